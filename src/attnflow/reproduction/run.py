"""Run the paper's section-4 experiment on a subject-verb agreement model (the bundled one by default).

For each test example (the model's own held-out test split): one forward pass with attentions, the
CLS row of raw / rollout / flow per layer, blank-out and input-gradient importance, and the rank
correlation between them, under one of the protocols of ``attnflow.reproduction.protocol``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from attnflow.hf import load_model
from attnflow.data import agreement, ptb_agreement
from attnflow.errors import AttnflowError
from attnflow.evaluation.correlation import summarize
from attnflow.reproduction.protocol import GRADIENTS, PROTOCOLS, check_choice, evaluate_example

DATASETS = ("templates", "ptb")
PAPER_EXAMPLES = 2000  # the paper's test set size

#: Below this median ``|sum_d g| / ||g||_2`` the gradient score is rounding residue, not a measurement
#: (a generic gradient gives order 1; the LayerNorm-invariant ones here give 1e-8 to 1e-6).
RESIDUE = 1e-3


@dataclass
class Reproduction:
    """What one run measured: ``summary[(method, importance)] = {"mean", "std", "n"}`` per layer."""

    summary: dict[tuple[str, str], dict[str, np.ndarray]]
    model: str
    data: str
    protocol: str
    gradient: str
    examples: int
    gradient_residue: float  # median over examples of ExampleResult.gradient_residue

    @property
    def gradient_is_residue(self) -> bool:
        return self.gradient == "sum" and self.gradient_residue < RESIDUE


def resolve_model(model: str | Path | None, data: str = "templates") -> Path:
    """A model folder for ``data``: ``None`` (the bundled ``agreement`` model; for ``ptb`` the treebank
    model, trained on first use), a bundled model's name (``agreement``, ``agreement_distilled``, ``agreement_bert``) or a
    directory written by ``attnflow.reproduction.training.agreement``."""
    from attnflow.models import bundled_model_path

    check_choice("data", data, DATASETS)
    if model is None:
        if data == "ptb":
            from attnflow.reproduction.training.ptb import ptb_model_path

            return ptb_model_path()
        return bundled_model_path("agreement")
    path = Path(model)
    if not path.exists() and "/" not in str(model) and "\\" not in str(model):
        if data == "ptb":
            raise AttnflowError(f"the bundled model {model!r} is trained on the templated sentences; with --data ptb "
                                "leave out --model or pass a folder written by attnflow.reproduction.training.agreement --data ptb")
        return bundled_model_path(str(model))
    if not (path / "config.json").is_file():
        raise AttnflowError(f"no model found in {path}; pass a bundled model's name or a directory "
                            "written by attnflow.reproduction.training.agreement")
    trained_on = _training(path).get("data", "templates")
    if trained_on != data:
        raise AttnflowError(f"the model in {path} was trained on --data {trained_on}; evaluate it with --data {trained_on}")
    return path


def _training(path: Path) -> dict:
    info = path / "training.json"
    return json.loads(info.read_text()) if info.is_file() else {}


def load(model: str | Path | None = None, data: str = "templates") -> tuple[Any, Any, int, Path]:
    """(model in eval mode with eager attention, tokenizer, the seed its data splits were drawn with, folder)."""
    path = resolve_model(model, data)
    net, tokenizer = load_model(str(path), task="classification")
    return net, tokenizer, _training(path).get("seed", 0), path


def held_out_examples(n: int | None, seed: int, data: str = "templates") -> list[agreement.Example]:
    """The first ``n`` examples (default: the paper's 2000, or all if fewer) of the test split drawn
    with ``seed`` (disjoint from its training split)."""
    test = agreement.splits(seed)["test"] if data == "templates" else ptb_agreement.splits(seed)["test"]
    if n is None:
        n = min(PAPER_EXAMPLES, len(test))
    if not isinstance(n, int) or not 1 <= n <= len(test):
        raise AttnflowError(f"examples must be between 1 and {len(test)} (the test split's size); got {n!r}")
    return test[:n]


def reproduce(model: str | Path | None = None, examples: int | None = None, *, data: str = "templates",
              protocol: str = "paper", gradient: str = "sum", flow_solver: str = "auto", include_cls: bool = False,
              progress: Callable[[int, int], None] | None = None) -> Reproduction:
    """Tables 1 and 2 over ``examples`` test examples of ``model`` (see ``resolve_model``) on ``data``
    (``"templates"``: the generated sentences; ``"ptb"``: Penn Treebank prefixes, needs ``treebank``)."""
    check_choice("data", data, DATASETS)
    check_choice("protocol", protocol, PROTOCOLS)
    check_choice("gradient", gradient, GRADIENTS)
    if include_cls and protocol == "paper":
        raise AttnflowError("--include-cls applies to --protocol words; the paper protocol always ranks CLS")
    net, tokenizer, seed, path = load(model, data)
    test = held_out_examples(examples, seed, data)
    results = []
    for i, example in enumerate(test):
        results.append(evaluate_example(net, tokenizer, example.text, example.label, protocol=protocol,
                                        gradient=gradient, flow_solver=flow_solver, include_cls=include_cls))
        if progress is not None:
            progress(i + 1, len(test))
    return Reproduction(summary=summarize(r.rho for r in results), model=str(path), data=data, protocol=protocol,
                        gradient=gradient, examples=len(test),
                        gradient_residue=float(np.nanmedian([r.gradient_residue for r in results])))
