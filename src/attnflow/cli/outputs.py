"""Output files of the CLI commands, checked before any work is done."""

from __future__ import annotations

from pathlib import Path

from attnflow.results.files import check_output
from attnflow.views.files import FIGURE_FORMATS

SUFFIXES = {"json": ("json",), "png": FIGURE_FORMATS, "html": ("html", "htm"), "csv": ("csv",), "png_only": ("png",)}


def check_outputs(**paths: Path | None) -> None:
    """Refuse bad ``--json``/``--png``/``--html`` paths up front (keyword = kind), so that a slow run
    never ends in an error with some files written and others not."""
    for kind, path in paths.items():
        if path is not None:
            check_output(path, SUFFIXES[kind])
