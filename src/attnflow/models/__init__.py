"""Small real models that ship with attnflow as package data (one folder per model)."""

from __future__ import annotations

from pathlib import Path

from attnflow.errors import AttnflowError


def bundled_model_path(name: str) -> Path:
    """The folder of the bundled model ``name`` (``src/attnflow/models/<name>/``)."""
    path = Path(__file__).resolve().parent / name
    if not (path / "config.json").is_file():
        raise AttnflowError(f"the bundled model {name!r} is not installed (expected {path}/config.json)")
    return path
