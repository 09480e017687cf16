"""The typer application every command module registers itself on."""

import typer

app = typer.Typer(
    name="otel-grpo",
    help="Observability for GRPO training: train, run the sidecar, or bring up the local stack.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.command()
def version() -> None:
    """Print the installed otel-grpo version."""
    from otel_grpo import __version__

    typer.echo(__version__)
