"""The attnflow command line: a thin layer of argument parsing over the public API.

Each command lives in its own module and registers itself on ``app``. Errors the user can fix
(:class:`AttnflowError`) print as one line on stderr with exit status 2, never a traceback.
"""

from __future__ import annotations

import sys

import typer

from attnflow.errors import AttnflowError

app = typer.Typer(
    name="attnflow",
    help="Which input tokens does a Transformer's output draw on? Attention rollout and attention flow "
    "(Abnar & Zuidema 2020) for Hugging Face models.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)



@app.callback()
def _root() -> None:
    """Which input tokens does a Transformer's output draw on? Attention rollout and attention flow
    (Abnar & Zuidema 2020) for Hugging Face models. Run `attnflow COMMAND --help` for each command."""


# Command modules register themselves on `app` when imported.
from attnflow.cli import explain as _explain  # noqa: E402,F401
from attnflow.cli import explain_image as _explain_image  # noqa: E402,F401
from attnflow.cli import perturbation as _perturbation  # noqa: E402,F401
from attnflow.cli import reproduce as _reproduce  # noqa: E402,F401
from attnflow.cli import view as _view  # noqa: E402,F401
from attnflow.cli import generate as _generate  # noqa: E402,F401


def main() -> None:
    """Console entry point."""
    from attnflow.capture.load import quiet_transformers

    quiet_transformers()
    try:
        app()
    except AttnflowError as exc:
        print(f"attnflow: error: {exc}", file=sys.stderr)
        sys.exit(2)
    except SystemExit as exc:
        # typer turns Ctrl-C into exit status 130 itself; say what that left behind
        if exc.code == 130:
            print("attnflow: interrupted; no output file was written", file=sys.stderr)
        raise
