"""The typer application every command module registers itself on, and how a command says it failed."""

import re
import sys
from typing import NoReturn

import typer
from typer.core import TyperGroup


def reflow(text: str | None) -> str | None:
    """`text` with each paragraph on one line: typer's rich help keeps a docstring's single line breaks, and
    rewrapping to the terminal's width around them leaves ragged half-lines. Blank lines still part paragraphs."""
    if not text:
        return text
    return "\n\n".join(re.sub(r"\s*\n\s*", " ", p.strip()) for p in re.split(r"\n\s*\n", text.strip()))


class _Commands(TyperGroup):
    """The app's group: each command's help reflowed (once, when typer builds the group)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        for command in self.commands.values():
            command.help = reflow(command.help)


def speaker() -> str:
    """`otel-grpo <command>` (as given on the command line): the prefix of every message a command ends with."""
    return " ".join(["otel-grpo", *(a for a in sys.argv[1:2] if not a.startswith("-"))])


def fail(message: str, code: int = 1) -> NoReturn:
    """End the command with one line on stderr, `otel-grpo <command>: <message>`, and exit `code`: 2 when
    the input is wrong (as click's usage errors), 1 when it could not be done."""
    typer.echo(f"{speaker()}: {message}", err=True)
    raise typer.Exit(code)


def warn(message: str) -> None:
    """One line on stderr, `otel-grpo <command>: warning: <message>`; the command goes on."""
    typer.echo(f"{speaker()}: warning: {message}", err=True)


app = typer.Typer(
    name="otel-grpo",
    help="Observability for GRPO training: train, run the sidecar, or bring up the local stack.",
    cls=_Commands,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.command()
def version() -> None:
    """Print the installed otel-grpo version."""
    from otel_grpo import __version__

    typer.echo(__version__)


def _print_version(given: bool) -> None:
    if given:
        version()
        raise typer.Exit()


@app.callback()
def _options(
    show_version: bool = typer.Option(False, "--version", callback=_print_version, is_eager=True,
                                      help="Print the installed otel-grpo version and exit."),
) -> None:
    # the app's own options (its help text is the app's); `--version` as most tools take it
    pass
