"""Small real models that ship with attnflow as package data (one folder per model).

``bundled_model_path("agreement")`` is the subject-verb agreement classifier of the paper's
section 2 (6-layer, 8-head, 128-hidden BERT encoder, CLS read-out), trained by
:mod:`attnflow.models.train_agreement`, stored as safetensors + ``tokenizer.json``. It loads offline
with ``AutoModelForSequenceClassification`` / ``AutoTokenizer`` and is the default model of
``attnflow explain`` and ``make demo``.
"""

from __future__ import annotations

from pathlib import Path

from attnflow.errors import AttnflowError


def bundled_model_path(name: str) -> Path:
    """The folder of the bundled model ``name`` (``src/attnflow/models/<name>/``)."""
    here = Path(__file__).resolve().parent
    path = here / name
    if not (path / "config.json").is_file():
        available = sorted(p.name for p in here.iterdir() if (p / "config.json").is_file())
        raise AttnflowError(
            f"the bundled model {name!r} is not installed (expected {path}/config.json); available: {', '.join(available)}"
        )
    return path
