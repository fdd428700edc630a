"""Two trained models that only attnflow's reproduction needs, kept out of attnflow's own wheel (9.8 MB
of the 14.9 it weighed): ``attnflow reproduce --model agreement_bert`` and ``--model
agreement_distilled`` find them here (:func:`attnflow.models.bundled_model_path`).

- ``agreement_distilled``: the paper's 6-block GPT-2-style agreement student trained by online
  distillation from an LSTM teacher (seed 0).
- ``agreement_bert``: the same task on a post-LN BERT, kept for comparison.

Both are trained by ``attnflow.reproduction.training.agreement`` (see attnflow's docs/reproduction.md).
"""

from pathlib import Path

MODELS = ("agreement_bert", "agreement_distilled")


def folder() -> Path:
    """Where the model folders lie (one per name in :data:`MODELS`)."""
    return Path(__file__).resolve().parent
