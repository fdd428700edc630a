"""Small real models that ship with attnflow as package data (one folder per model).

- ``bundled_model_path("agreement")``: the subject-verb agreement classifier of the paper's section 2
  with the paper's block type (6 pre-LayerNorm GPT-2-style blocks, 8 heads, hidden 128, bidirectional,
  CLS read after the final LayerNorm; a stock ``MegatronBertForSequenceClassification``). The default
  model of ``attnflow explain``, ``attnflow reproduce`` and ``make demo``.
- ``bundled_model_path("agreement_distilled")``: the same student trained by online distillation from an
  LSTM teacher (the recipe of the paper's checkpoint; seed 0; the teacher is not shipped, it retrains
  with the student in minutes).
- ``bundled_model_path("agreement_bert")``: the same task on a post-LN ``BertForSequenceClassification``
  (the default before issue 16), kept for comparison.
- ``bundled_model_path("digits_vit")``: a tiny ViT on scikit-learn's 8x8 digits.

The agreement models are trained by :mod:`attnflow.reproduction.training.agreement`, stored as safetensors +
``tokenizer.json``, and load offline with ``AutoModelForSequenceClassification`` / ``AutoTokenizer``.
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
