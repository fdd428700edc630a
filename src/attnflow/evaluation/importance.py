"""Input-token importance baselines the paper compares attention against (section 4).

- :func:`blank_out`: replace one token at a time with an "unknown" token and measure how much the
  probability of the target class changes, ``|p(c | x) - p(c | x with token i blanked)|``.
- :func:`input_gradients`: ``|sum_d d(p_0 - p_1)/d e_{i,d}|``, the gradient of the difference of the
  two class probabilities w.r.t. the input embeddings ``e_i``, summed over the embedding dimensions
  (``times_input=True`` gives grad x input, ``|sum_d e_{i,d} d(p_0 - p_1)/d e_{i,d}|``); ``at`` picks
  the word embeddings or the first layer's input (see its docstring for why BERT needs the latter).

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


def _first_layer_input(model: Any) -> Any:
    """The module whose output the first Transformer layer reads (BERT-style ``embeddings``)."""
    module = getattr(getattr(model, "base_model", model), "embeddings", None)
    if module is None:
        raise AttnflowError(
            f"{type(model).__name__} has no base_model.embeddings module; use at='word' for this model"
        )
    return module


def input_gradients(model: Any, input_ids: Any, *, classes: tuple[int, int] = (0, 1),
                    times_input: bool = False, at: str = "word") -> np.ndarray:
    """``|sum_d d(p_a - p_b)/d e_{i,d}|`` (times ``e_{i,d}`` inside the sum if ``times_input``), ``(n,)``.

    ``at`` says which embedding ``e_i`` is:

    - ``"word"``: the output of the model's input (word) embedding layer, before position
      embeddings are added. Caveat: BERT-style models layer-normalise the summed embeddings, and
      LayerNorm ignores a shift along the all-ones vector, so there the sum over ``d`` is 0 up to
      rounding (use ``times_input=True`` or ``at="layer_input"``).
    - ``"layer_input"``: the output of ``base_model.embeddings`` (word + position [+ segment],
      layer-normalised): the vectors the first attention layer mixes. In GPT-2, the paper's
      architecture, the first block reads the un-normalised sum, where ``"word"`` is not degenerate.

    ``classes = (a, b)``; the paper's binary task uses ``(0, 1)``.
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

        handle = _first_layer_input(model).register_forward_hook(leaf)
        try:
            logits = _logits(model(input_ids=ids[None], attention_mask=mask))
        finally:
            handle.remove()
        e = seen[0]
    # float64 softmax: in float32 a confident model's 1 - p loses most of its digits.
    probs = logits.double().softmax(-1)[0]
    a, b = classes
    if not (0 <= a < probs.numel() and 0 <= b < probs.numel()):
        raise AttnflowError(f"classes must be two class indices in [0, {probs.numel()}); got {classes!r}")
    (grad,) = torch.autograd.grad(probs[a] - probs[b], e)
    values = grad * e if times_input else grad
    return values[0].sum(-1).abs().detach().double().numpy()
