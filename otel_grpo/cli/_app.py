"""The typer application every command module registers itself on."""

import re

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
