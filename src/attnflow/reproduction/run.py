"""Run the paper's section-4 experiment on a subject-verb agreement model (the bundled one by default).

For each test example (the model's own held-out test split): one forward pass with attentions, the
CLS row of raw / rollout / flow per layer, blank-out and input-gradient importance, and the rank
correlation between them, under one of the protocols of :mod:`attnflow.reproduction.protocol`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnflow.capture import load_model
from attnflow.data import agreement
from attnflow.errors import AttnflowError
from attnflow.evaluation.correlation import summarize
from attnflow.reproduction.protocol import GRADIENTS, PROTOCOLS, check_choice, evaluate_example

#: Below this median ``|sum_d g| / ||g||_2`` the gradient score is rounding residue, not a measurement
#: (a generic gradient gives order 1; the LayerNorm-invariant ones here give 1e-8 to 1e-6).
RESIDUE = 1e-3


@dataclass
class Reproduction:
    """What one run measured: ``summary[(method, importance)] = {"mean", "std", "n"}`` per layer."""

    summary: dict[tuple[str, str], dict[str, np.ndarray]]
    model: str
    protocol: str
    gradient: str
    examples: int
    gradient_residue: float  # median over examples of ExampleResult.gradient_residue

    @property
    def gradient_is_residue(self) -> bool:
        return self.gradient == "sum" and self.gradient_residue < RESIDUE


def resolve_model(model: str | Path | None) -> Path:
    """A model folder: ``None`` (the bundled ``agreement`` model), a bundled model's name
    (``agreement``, ``agreement_bert``) or a directory written by ``attnflow.models.train_agreement``."""
    from attnflow.models import bundled_model_path

    if model is None:
        return bundled_model_path("agreement")
    path = Path(model)
    if not path.exists() and "/" not in str(model) and "\\" not in str(model):
        return bundled_model_path(str(model))
    if not (path / "config.json").is_file():
        raise AttnflowError(f"no model found in {path}; pass a bundled model's name or a directory "
                            "written by attnflow.models.train_agreement")
    return path


def load(model: str | Path | None = None) -> tuple[Any, Any, int, Path]:
    """(model in eval mode with eager attention, tokenizer, the seed its data splits were drawn with, folder)."""
    path = resolve_model(model)
    net, tokenizer = load_model(str(path), task="classification")
    info = path / "training.json"
    seed = json.loads(info.read_text())["seed"] if info.is_file() else 0
    return net, tokenizer, seed, path


def held_out_examples(n: int, seed: int) -> list[agreement.Example]:
    """The first ``n`` examples of the test split drawn with ``seed`` (disjoint from its training split)."""
    available = agreement.DEFAULT_SIZES["test"]
    if not isinstance(n, int) or not 1 <= n <= available:
        raise AttnflowError(f"examples must be between 1 and {available} (the test split's size); got {n!r}")
    return agreement.splits(seed)["test"][:n]


def reproduce(model: str | Path | None = None, examples: int = 2000, *, protocol: str = "paper",
              gradient: str = "sum", flow_solver: str = "auto", include_cls: bool = False,
              progress: Callable[[int, int], None] | None = None) -> Reproduction:
    """Tables 1 and 2 over ``examples`` test examples of ``model`` (see :func:`resolve_model`)."""
    check_choice("protocol", protocol, PROTOCOLS)
    check_choice("gradient", gradient, GRADIENTS)
    if include_cls and protocol == "paper":
        raise AttnflowError("--include-cls applies to --protocol words; the paper protocol always ranks CLS")
    net, tokenizer, seed, path = load(model)
    data = held_out_examples(examples, seed)
    results = []
    for i, example in enumerate(data):
        results.append(evaluate_example(net, tokenizer, example.text, example.label, protocol=protocol,
                                        gradient=gradient, flow_solver=flow_solver, include_cls=include_cls))
        if progress is not None:
            progress(i + 1, len(data))
    return Reproduction(summary=summarize(r.rho for r in results), model=str(path), protocol=protocol,
                        gradient=gradient, examples=len(data),
                        gradient_residue=float(np.nanmedian([r.gradient_residue for r in results])))
