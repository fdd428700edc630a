"""The two correlation protocols of ``attnflow reproduce`` (Abnar & Zuidema 2020, section 4), one example at a time.

Both take the CLS row of raw attention, rollout and flow at every layer and correlate it with
blank-out and input-gradient importance. They differ in which tokens are ranked and how:

``paper`` -- the paper's protocol, as its experiment notebook ran it (samiraabnar/Reflect,
``notebooks/attention_flow.ipynb``):

- the input is ``[CLS] w1 ... wn`` plus the end-of-sentence token when the tokenizer adds one
  (the bundled ``agreement`` model's does; ``agreement_bert``'s has none);
- blank-out replaces CLS and each word in turn with UNK and scores ``|delta p(correct class)|``;
  the end-of-sentence token is never blanked and scores 0;
- every token is ranked (CLS, words, end-of-sentence), with ``spearman_dense``
  (dense ranks, ``1 - 6 sum d^2 / (n (n^2 - 1))``, no tie correction);
- the gradient score is ``|sum_d d(p_0 - p_1)/d e_{i,d}|`` at the embedding sum ``e`` (word +
  position). In LayerNorm networks this is zero in exact arithmetic (see
  ``attnflow.evaluation.importance``), so it ranks float32 rounding residue; ``gradient="norm"``
  ranks by ``||g_i||_2`` instead.

``words`` -- the protocol attnflow used before (issue 16): only the words are ranked (``[CLS]`` too
with ``include_cls``), Spearman with average ranks for ties, every token blanked, and the gradient
at the first layer's input (``at="layer_input"``: BERT's layer-normalised embeddings; in a pre-LN
model the embedding sum, where the ``sum`` score is rounding residue again).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from attnflow.capture import capture
from attnflow.errors import AttnflowError
from attnflow.evaluation.correlation import cls_scores, correlate, spearman, spearman_dense
from attnflow.evaluation.importance import blank_out, embedding_gradients, reduce_gradient

PROTOCOLS = ("paper", "words")
GRADIENTS = ("sum", "norm")


@dataclass
class ExampleResult:
    """One example: ``rho[(method, importance)]`` per layer, and how degenerate its gradient was:
    the median over tokens of ``|sum_d g_{i,d}| / ||g_i||_2`` (order 1 for a generic vector, order
    1e-7 when the sum is rounding residue)."""

    rho: dict[tuple[str, str], np.ndarray]
    gradient_residue: float


def check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise AttnflowError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")


def evaluate_example(model: Any, tokenizer: Any, text: str, label: int, *, protocol: str = "paper",
                     gradient: str = "sum", flow_solver: str = "auto", include_cls: bool = False) -> ExampleResult:
    """Correlations for one sentence ``text`` whose correct class is ``label`` (see the module docstring)."""
    check_choice("protocol", protocol, PROTOCOLS)
    check_choice("gradient", gradient, GRADIENTS)
    if include_cls and protocol == "paper":
        raise AttnflowError("include_cls applies to the words protocol; the paper protocol always ranks CLS")
    maps = capture(model, tokenizer, text)
    ids = maps.input_ids
    n = len(ids)
    if maps.tokens[0] != tokenizer.cls_token:
        raise AttnflowError(f"the protocol reads the CLS row, but the tokenizer puts {maps.tokens[0]!r} first, "
                            f"not {tokenizer.cls_token!r}")
    special = set(maps.special)
    scores = cls_scores(maps.attentions, position=0, flow_solver=flow_solver)
    if protocol == "paper":
        ends = sorted(special - {0})  # the end-of-sentence token: never blanked, score 0
        blanked = blank_out(model, ids, unk_id=tokenizer.unk_token_id, target=label,
                            positions=[i for i in range(n) if i not in ends])
        blanked[ends] = 0.0
        grad, _ = embedding_gradients(model, ids, at="word")  # = at the embedding sum
        ranked, rho = list(range(n)), spearman_dense
    else:
        blanked = blank_out(model, ids, unk_id=tokenizer.unk_token_id, target=label)
        grad, _ = embedding_gradients(model, ids, at="layer_input")
        ranked = [i for i in range(n) if (include_cls and i == 0) or i not in special]
        rho = spearman
    importance = {"blank_out": blanked, "gradients": reduce_gradient(grad, gradient)}
    norms = reduce_gradient(grad, "norm")
    with np.errstate(invalid="ignore", divide="ignore"):
        residue = float(np.nanmedian(reduce_gradient(grad, "sum") / norms)) if norms.max() > 0 else float("nan")
    return ExampleResult(correlate(scores, importance, ranked, rho), residue)
