"""The typer application every command registers itself on."""

from __future__ import annotations

import typer

app = typer.Typer(
    name="attnflow",
    help="Which input tokens does a Transformer's output draw on? Attention rollout and attention flow "
    "(Abnar & Zuidema 2020) for Hugging Face models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import version  # the installed distribution's (the package root is above cli)

        typer.echo(f"attnflow {version('attnflow')}")
        raise typer.Exit()


@app.callback()
def _root(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                       help="Print attnflow's version and exit.")) -> None:
    """Which input tokens does a Transformer's output draw on? Attention rollout and attention flow
    (Abnar & Zuidema 2020) for Hugging Face models. Run `attnflow COMMAND --help` for each command."""
