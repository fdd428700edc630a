"""The attnflow command line: a thin layer of argument parsing over the public API.

Each command lives in its own module and registers itself on ``attnflow.cli.app.app``; each
imports the heavy parts (torch, transformers, matplotlib) only when it runs, so ``--help`` is fast.
Every error and warning prints as one line on stderr, never a traceback: ``main`` runs the app
through ``attnflow.cli.messages.run``, so a new command gets that without doing anything (raise
``AttnflowError`` for bad input, ``warnings.warn`` for doubtful input).
"""

from __future__ import annotations

import os
import sys
import warnings

from attnflow.cli import app_command as _app_command  # noqa: F401
from attnflow.cli import batch as _batch  # noqa: F401
from attnflow.cli import explain as _explain  # noqa: F401  (command modules register themselves)
from attnflow.cli import explain_image as _explain_image  # noqa: F401
from attnflow.cli import faithfulness as _faithfulness  # noqa: F401
from attnflow.cli import generate as _generate  # noqa: F401
from attnflow.cli import methods as _methods  # noqa: F401
from attnflow.cli import perturbation as _perturbation  # noqa: F401
from attnflow.cli import reproduce as _reproduce  # noqa: F401
from attnflow.cli import view as _view  # noqa: F401
from attnflow.cli.app import app
from attnflow.cli.messages import run
from attnflow.errors import LongFlowWarning

__all__ = ["app", "main"]


def main(*, fast_exit: bool = True) -> None:
    """Console entry point. ``fast_exit``: after Ctrl-C, end the process at once instead of raising
    ``SystemExit(130)`` (callers that run the CLI inside their own process pass False)."""
    # The CLI's output is the answer: no weight-loading bars or notices from transformers. Set before
    # transformers is imported (it reads these once); quieten it directly when it already is (tests).
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    # Long flow runs print their estimate through the progress bar instead of as a Python warning.
    warnings.filterwarnings("ignore", category=LongFlowWarning)
    if "transformers" in sys.modules:
        from attnflow.api.models import quiet_transformers

        quiet_transformers()
    try:
        run(app)
    except SystemExit as exc:
        if exc.code == 130 and fast_exit:  # Ctrl-C, already reported by run()
            # Tearing down an interpreter that loaded torch and transformers takes seconds, and nothing
            # is left to clean up (outputs are written atomically, a flow worker is already killed).
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(130)
        raise
