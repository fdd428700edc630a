"""Run the paper's section-4 experiment on a subject-verb agreement model (the bundled one by default).

For each test example (the model's own held-out test split): one forward pass with attentions, the
CLS row of raw / rollout / flow per layer, blank-out (UNK = ``tokenizer.unk_token_id``, probability
of the correct class) and input-gradient importance, and Spearman's rho between them over the words
(see :mod:`attnflow.evaluation.correlation` for why CLS is left out).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from attnflow.capture import capture, load_model
from attnflow.data import agreement
from attnflow.errors import AttnflowError
from attnflow.evaluation.correlation import cls_scores, correlate, summarize
from attnflow.evaluation.importance import blank_out, input_gradients


def load(model_dir: str | Path | None = None) -> tuple[Any, Any, int]:
    """(model in eval mode with eager attention, tokenizer, the seed its data splits were drawn with)."""
    from attnflow.models import bundled_model_path

    path = Path(model_dir) if model_dir is not None else bundled_model_path("agreement")
    if not (path / "config.json").is_file():
        raise AttnflowError(f"no model found in {path}; pass a directory written by attnflow.models.train_agreement")
    model, tokenizer = load_model(str(path), task="classification")
    info = path / "training.json"
    seed = json.loads(info.read_text())["seed"] if info.is_file() else 0
    return model, tokenizer, seed


def held_out_examples(n: int, seed: int) -> list[agreement.Example]:
    """The first ``n`` examples of the test split drawn with ``seed`` (disjoint from its training split)."""
    available = agreement.DEFAULT_SIZES["test"]
    if not isinstance(n, int) or not 1 <= n <= available:
        raise AttnflowError(f"examples must be between 1 and {available} (the test split's size); got {n!r}")
    return agreement.splits(seed)["test"][:n]


def evaluate_example(model: Any, tokenizer: Any, example: agreement.Example, flow_solver: str = "auto",
                     include_cls: bool = False) -> dict[tuple[str, str], np.ndarray]:
    """``{(method, importance): rho per layer}`` for one example; ``include_cls`` ranks CLS too."""
    maps = capture(model, tokenizer, example.text)
    ids = maps.input_ids
    scores = cls_scores(maps.attentions, position=0, flow_solver=flow_solver)
    importance = {
        "blank_out": blank_out(model, ids, unk_id=tokenizer.unk_token_id, target=example.label),
        "gradients": input_gradients(model, ids, at="layer_input"),  # see input_gradients: BERT needs it
    }
    keep = {0} if include_cls else set()
    words = [i for i in range(len(ids)) if i in keep or i not in set(maps.special)]
    return correlate(scores, importance, words)


def reproduce(model_dir: str | Path | None = None, examples: int = 2000, *, flow_solver: str = "auto",
              include_cls: bool = False, progress: Callable[[int, int], None] | None = None) -> dict:
    """Summary ``{(method, importance): {"mean", "std", "n"}}`` over ``examples`` test examples."""
    model, tokenizer, seed = load(model_dir)
    data = held_out_examples(examples, seed)
    results = []
    for i, example in enumerate(data):
        results.append(evaluate_example(model, tokenizer, example, flow_solver, include_cls))
        if progress is not None:
            progress(i + 1, len(data))
    return summarize(results)
