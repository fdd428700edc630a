"""Models that ship inside attnflow.

``bundled_model_path("agreement")`` is the subject-verb agreement classifier of the paper's
section 2 (6-layer, 8-head, 128-hidden BERT encoder, CLS read-out), trained by
:mod:`attnflow.models.train_agreement` and stored as safetensors + ``tokenizer.json``. It loads
offline with ``AutoModelForSequenceClassification`` / ``AutoTokenizer`` and is the default model of
``attnflow explain`` and ``make demo``.
"""

from __future__ import annotations

from pathlib import Path

from attnflow.errors import AttnflowError

BUNDLED = ("agreement",)


def bundled_model_path(name: str = "agreement") -> Path:
    """Directory of a bundled model, ready for ``from_pretrained``."""
    if name not in BUNDLED:
        raise AttnflowError(f"no bundled model named {name!r}; available: {', '.join(BUNDLED)}")
    path = Path(__file__).resolve().parent / name
    if not (path / "model.safetensors").is_file():
        raise AttnflowError(
            f"the bundled model files are missing from {path}; reinstall attnflow or run "
            f"python -m attnflow.models.train_agreement --out {path} --seed 0"
        )
    return path


__all__ = ["BUNDLED", "bundled_model_path"]
