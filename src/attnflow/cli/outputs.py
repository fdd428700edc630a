"""Output files of the CLI commands, checked before any work is done."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from attnflow.results.files import check_output
from attnflow.views.files import FIGURE_FORMATS

SUFFIXES = {"json": ("json",), "png": FIGURE_FORMATS, "html": ("html", "htm"), "csv": ("csv",), "png_only": ("png",)}


def check_outputs(**paths: Path | None) -> None:
    """Refuse bad ``--json``/``--png``/``--html`` paths up front (keyword = kind), so that a slow run
    never ends in an error with some files written and others not."""
    for kind, path in paths.items():
        if path is not None:
            check_output(path, SUFFIXES[kind])


def write_outputs(console: Any, outputs: Sequence[tuple[Path | None, Callable[[Path], Any]]]) -> None:
    """Write every requested output, or none: each ``write(tmp)`` draws into a hidden folder beside its
    destination, and only when all of them have succeeded are the files moved into place (a figure
    that fails to draw, or Ctrl-C, leaves no JSON behind it). ``None`` paths are skipped."""
    staged: list[tuple[Path, Path]] = []
    try:
        for path, write in outputs:
            if path is None:
                continue
            folder = Path(tempfile.mkdtemp(prefix=".attnflow-", dir=Path(path).parent))
            staged.append((folder, Path(path)))
            write(folder / Path(path).name)
        for folder, path in staged:
            os.replace(folder / path.name, path)
    finally:
        for folder, _ in staged:
            shutil.rmtree(folder, ignore_errors=True)
    for _, path in staged:
        console.print(f"wrote {path}")
