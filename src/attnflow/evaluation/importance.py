"""Input-token importance baselines the paper compares attention against (section 4).

- ``blank_out``: replace one token at a time with an "unknown" token and measure how much the
  probability of the target class changes, ``|p(c | x) - p(c | x with token i blanked)|``.
- ``input_gradients``: the gradient ``g_i = d(p_0 - p_1)/d e_i`` of the difference of the two
  class probabilities w.r.t. the input vector ``e_i`` of each token, reduced over the embedding
  dimensions: ``|sum_d g_{i,d}|`` (the paper's score; ``reduce="sum"``) or ``||g_i||_2``
  (``reduce="norm"``); ``times_input=True`` multiplies by ``e_{i,d}`` first (grad x input);
  ``embedding_gradients`` returns the unreduced ``(n, d)`` gradient.

**The paper's gradient score is zero in LayerNorm networks.** LayerNorm subtracts the mean over
``d``, so ``LN(x + c 1) = LN(x)`` for every scalar ``c``. If every path from ``e_i`` to the output
starts with a LayerNorm, the output cannot change when ``e_i`` moves along the all-ones vector, and
``sum_d dF/de_{i,d} = <grad, 1> = 0`` exactly; a computed value is floating-point rounding residue.
This holds at the embedding sum of BERT (its embedding LayerNorm comes first) and of every pre-LN
model with a final LayerNorm: GPT-2's blocks read ``LN(x)``, the residual stream only adds to ``x``,
and the read-out sees ``LN_final(x)``. So the paper's ``|sum_d|`` score, measured at the embedding
sum of its GPT-2-block model, ranked tokens by float32 residue; ``reduce="norm"`` is a score that
means something there. ``tests/test_importance.py`` pins the invariance on a tiny BERT and on the
bundled pre-LN model.

Both work with any Hugging Face sequence classifier (anything called as ``model(input_ids=...,
attention_mask=...)`` / ``model(inputs_embeds=...)`` that returns logits), one example at a time.
Returns a ``(n,)`` float64 numpy array over token positions; unscored positions are NaN.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

from attnflow.errors import AttnflowError
from attnflow.hf.points import hook_points, receiving


def _logits(out: Any) -> torch.Tensor:
    return out.logits if hasattr(out, "logits") else out


def _check(model: Any, input_ids: Any) -> torch.Tensor:
    if getattr(model, "training", False):
        raise AttnflowError("the model is in training mode (dropout makes scores random); call model.eval() first")
    ids = torch.as_tensor(input_ids)
    if ids.ndim == 2 and ids.shape[0] == 1:
        ids = ids[0]
    if ids.ndim != 1 or ids.numel() == 0 or ids.dtype not in (torch.int64, torch.int32):
        raise AttnflowError(f"expected the token ids of one example, shape (n,) or (1, n); got shape {tuple(ids.shape)}")
    return ids.long()


def _positions(positions: Sequence[int] | None, n: int) -> list[int]:
    if positions is None:
        return list(range(n))
    out = [int(p) % n for p in positions if -n <= int(p) < n]
    if len(out) != len(list(positions)):
        raise AttnflowError(f"positions must lie in [{-n}, {n}) for a {n}-token input; got {list(positions)}")
    return out


def blank_out(model: Any, input_ids: Any, *, unk_id: int, target: int | None = None,
              positions: Sequence[int] | None = None) -> np.ndarray:
    """``|p(target | x) - p(target | x with x_i := unk_id)|`` for each position ``i``.

    Parameters
    ----------
    model: a sequence classifier in eval mode.
    input_ids: one example's token ids, ``(n,)`` or ``(1, n)``, unpadded.
    unk_id: the id that replaces each token in turn; for Hugging Face tokenizers ``tokenizer.unk_token_id``.
    target: the class whose probability is compared; the model's prediction on ``x`` when None (the
        paper uses the correct class: pass the label).
    positions: positions to blank out (default all); the others are NaN in the result.
    """
    ids = _check(model, input_ids)
    if unk_id is None or not isinstance(unk_id, int):
        raise AttnflowError(f"unk_id must be an integer token id (e.g. tokenizer.unk_token_id); got {unk_id!r}")
    n = ids.numel()
    where = _positions(positions, n)
    batch = ids.repeat(len(where) + 1, 1)  # row 0 is the untouched input
    for row, pos in enumerate(where, start=1):
        batch[row, pos] = unk_id
    with torch.no_grad():
        # softmax in float64: a confident model's p(c) sits within 1e-4 of 1, where float32 rounds
        # most single-token changes to exactly 0 and would turn the ranking into ties.
        probs = _logits(model(input_ids=batch, attention_mask=torch.ones_like(batch))).double().softmax(-1)
    c = int(probs[0].argmax()) if target is None else int(target)
    if not 0 <= c < probs.shape[-1]:
        raise AttnflowError(f"target must be a class index in [0, {probs.shape[-1]}); got {target!r}")
    scores = np.full(n, np.nan)
    scores[where] = (probs[0, c] - probs[1:, c]).abs().numpy()
    return scores


def embedding_gradients(model: Any, input_ids: Any, *, classes: tuple[int, int] = (0, 1),
                        at: str = "word") -> tuple[np.ndarray, np.ndarray]:
    """``(g, e)``, both ``(n, d)`` in the model's dtype: ``g_i = d(p_a - p_b)/d e_i`` for every token,
    with ``e_i`` chosen by ``at``:

    - ``"word"``: the output of the model's input (word) embedding layer. Position (and segment)
      embeddings are added to it, so this is also the gradient at the embedding sum ``e_word +
      e_position``: the paper's ``e``.
    - ``"layer_input"``: the output of ``base_model.embeddings``, the vectors the first Transformer
      layer reads. In BERT that is the layer-normalised sum; in a pre-LN model without an embedding
      LayerNorm (GPT-2, Megatron-BERT) it is the embedding sum itself, the same as ``"word"``.

    ``classes = (a, b)``; the paper's binary task uses ``(0, 1)``. Probabilities in float64: in
    float32 a confident model's ``1 - p`` loses most of its digits. The backward pass runs in the
    model's dtype, as the paper's did, so a score that is zero in exact arithmetic shows that dtype's
    rounding residue.
    """
    ids = _check(model, input_ids)
    if at not in ("word", "layer_input"):
        raise AttnflowError(f"at must be 'word' or 'layer_input'; got {at!r}")
    mask = torch.ones_like(ids[None])
    if at == "word":
        e = model.get_input_embeddings()(ids[None]).detach().requires_grad_(True)
        logits = _logits(model(inputs_embeds=e, attention_mask=mask))
    else:
        seen: list[torch.Tensor] = []

        def leaf(_module: Any, _inputs: Any, output: torch.Tensor) -> torch.Tensor:
            seen.append(output.detach().requires_grad_(True))  # differentiate w.r.t. this tensor
            return seen[-1]

        if not hook_points(model).has("layer_input"):
            raise AttnflowError(f"{type(model).__name__} has no base_model.embeddings module; use at='word' for this "
                                "model")
        with receiving(model, {"layer_input": leaf}):  # the first layer's input, a leaf of autograd
            logits = _logits(model(input_ids=ids[None], attention_mask=mask))
        e = seen[0]
    probs = logits.double().softmax(-1)[0]
    a, b = classes
    if not (0 <= a < probs.numel() and 0 <= b < probs.numel()):
        raise AttnflowError(f"classes must be two class indices in [0, {probs.numel()}); got {classes!r}")
    (grad,) = torch.autograd.grad(probs[a] - probs[b], e)
    return grad[0].detach().numpy(), e[0].detach().numpy()


def reduce_gradient(grad: np.ndarray, reduce: str = "sum") -> np.ndarray:
    """``(n, d) -> (n,)`` float64: ``|sum_d g_{i,d}|`` (``"sum"``, the paper's) or ``||g_i||_2`` (``"norm"``).

    Summed in ``grad``'s own dtype (float32 for float32 models, as the paper's), then widened.
    """
    if reduce == "sum":
        return np.abs(grad.sum(-1)).astype(np.float64)
    if reduce == "norm":
        return np.linalg.norm(grad.astype(np.float64), axis=-1)
    raise AttnflowError(f"reduce must be 'sum' (the paper's) or 'norm'; got {reduce!r}")


def input_gradients(model: Any, input_ids: Any, *, classes: tuple[int, int] = (0, 1),
                    times_input: bool = False, at: str = "word", reduce: str = "sum") -> np.ndarray:
    """``|sum_d d(p_a - p_b)/d e_{i,d}|`` (``reduce="sum"``) or its L2 norm over ``d`` (``"norm"``), ``(n,)``.

    ``times_input`` multiplies each component by ``e_{i,d}`` before reducing (grad x input). ``at``
    picks ``e`` (see ``embedding_gradients``). With ``reduce="sum"`` and no ``times_input``, the
    score is rounding residue wherever a LayerNorm sees ``e_i`` first (see the module docstring):
    at ``"word"`` in BERT and in pre-LN models, and at ``"layer_input"`` in pre-LN models.
    """
    grad, e = embedding_gradients(model, input_ids, classes=classes, at=at)
    return reduce_gradient(grad * e if times_input else grad, reduce)
