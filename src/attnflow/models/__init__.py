"""Small real models that ship with attnflow as package data (one folder per model).

- ``bundled_model_path("agreement")``: the subject-verb agreement classifier of the paper's section 2
  with the paper's block type (6 pre-LayerNorm GPT-2-style blocks, 8 heads, hidden 128, bidirectional,
  CLS read after the final LayerNorm; a stock ``MegatronBertForSequenceClassification``). The default
  model of ``attnflow explain``, ``attnflow reproduce`` and ``make demo``.
- ``bundled_model_path("digits_vit")``: a tiny ViT on scikit-learn's 8x8 digits.

Two more, used only by ``attnflow reproduce``, ship in their own package (``pip install
"attnflow[reproduction]"``, i.e. ``attnflow-reproduction-models``; ``make setup`` installs it), so that
attnflow's wheel carries only what its everyday commands use:

- ``bundled_model_path("agreement_distilled")``: the same student trained by online distillation from an
  LSTM teacher (the recipe of the paper's checkpoint; seed 0; the teacher is not shipped, it retrains
  with the student in minutes).
- ``bundled_model_path("agreement_bert")``: the same task on a post-LN ``BertForSequenceClassification``
  (the default before issue 16), kept for comparison.

The agreement models are trained by ``attnflow.reproduction.training.agreement``, stored as safetensors +
``tokenizer.json``, and load offline with ``AutoModelForSequenceClassification`` / ``AutoTokenizer``.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from attnflow.errors import AttnflowError


REPRODUCTION_PACKAGE = "attnflow_reproduction_models"  # agreement_bert, agreement_distilled
REPRODUCTION_MODELS = ("agreement_bert", "agreement_distilled")


def _folders() -> list[Path]:
    """Where bundled models lie: this package, then the reproduction models' package when installed."""
    folders = [Path(__file__).resolve().parent]
    spec = importlib.util.find_spec(REPRODUCTION_PACKAGE)
    if spec is not None and spec.submodule_search_locations:
        folders.append(Path(list(spec.submodule_search_locations)[0]))
    return folders


def bundled_model_path(name: str) -> Path:
    """The folder of the bundled model ``name`` (``src/attnflow/models/<name>/``, or the reproduction
    models' package for ``agreement_bert`` and ``agreement_distilled``)."""
    folders = _folders()
    for here in folders:
        if (here / name / "config.json").is_file():
            return here / name
    if name in REPRODUCTION_MODELS:
        raise AttnflowError(f"the model {name!r} ships in the reproduction models' package, which is not installed; "
                            "pip install 'attnflow[reproduction]' (or attnflow-reproduction-models)")
    available = sorted(p.name for here in folders for p in here.iterdir() if (p / "config.json").is_file())
    raise AttnflowError(f"no bundled model named {name!r}; available: {', '.join(available)}")


def installed(name: str) -> bool:
    """Whether the bundled model ``name`` is installed (the reproduction models are optional)."""
    return any((here / name / "config.json").is_file() for here in _folders())
