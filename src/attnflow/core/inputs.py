"""Turn what users pass as "attentions" into one validated stack.

Accepted forms (row = query, column = key everywhere in attnflow):

- an array or tensor ``(layers, heads, n, n)``;
- a batch ``(batch, layers, heads, n, n)`` (outputs then get a leading batch axis);
- the tuple Hugging Face returns with ``output_attentions=True``: one ``(batch, heads, n, n)``
  per layer (or ``(heads, n, n)`` per layer);
- an ``AttentionMaps``, whose padding mask is used;
- a TransformerLens ``ActivationCache`` (its ``blocks.{l}.attn.hook_pattern`` entries, one
  ``(batch, heads, n, n)`` per layer: the same as the Hugging Face tuple).

A 5-D stack is read as ``(batch, layers, heads, n, n)``; ``layout="layers-first"`` reads it as
``(layers, batch, heads, n, n)``, the order of TransformerLens's ``cache.stack_activation("pattern")``.
Without ``layout``, a 5-D stack whose second axis is 1 and first is not — what that call returns for
one input — is refused rather than read as a batch of one-layer maps.

numpy in -> numpy out (float64); torch in -> torch out (float64 stays float64, anything else is
computed in float32 on the input's device).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnflow.errors import AttnflowError

_SHAPE_HELP = "expected attentions of shape (layers, heads, n, n), (batch, layers, heads, n, n) or a per-layer tuple"
LAYOUTS = ("batch-first", "layers-first")


@dataclass
class Stack:
    """A validated attention stack ``(batch, layers, heads, n, n)`` plus how to hand results back."""

    values: torch.Tensor  # (batch, layers, heads, n, n)
    mask: torch.Tensor  # (batch, n) bool, True = real token
    batched: bool
    as_numpy: bool

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        return tuple(self.values.shape)  # type: ignore[return-value]

    def out(self, result: torch.Tensor | np.ndarray) -> Any:
        """Drop the batch axis if the input had none and convert to the caller's array type."""
        if isinstance(result, np.ndarray):
            result = torch.from_numpy(result)
        if not self.batched:
            result = result[0]
        if self.as_numpy:
            return result.detach().cpu().numpy().astype(np.float64, copy=False)
        return result.to(device=self.values.device, dtype=self.values.dtype)


def _to_tensor(x: Any) -> tuple[torch.Tensor, bool]:
    if isinstance(x, torch.Tensor):
        if x.is_complex() or x.dtype == torch.bool:
            raise AttnflowError(f"attention weights must be real numbers; got a tensor of dtype {x.dtype}")
        t = x.detach()
        if t.dtype != torch.float64:
            t = t.to(torch.float32)
        return t, False
    kind = np.asarray(x).dtype.kind if isinstance(x, np.ndarray) else None
    if kind is not None and kind not in "iuf":
        # complex would silently lose its imaginary part, object arrays hide anything: refuse both
        raise AttnflowError(f"attention weights must be real numbers; got an array of dtype {x.dtype}")
    try:
        arr = np.ascontiguousarray(x, dtype=np.float64)  # torch rejects negative strides (a[::-1])
    except (TypeError, ValueError) as exc:
        raise AttnflowError(f"{_SHAPE_HELP}; got an object of type {type(x).__name__} that is not numeric") from exc
    return torch.from_numpy(arr), True


def _from_tuple(layers: tuple | list) -> tuple[torch.Tensor, bool]:
    if len(layers) == 0:
        raise AttnflowError(
            "got an empty tuple of attentions; load the model with attn_implementation='eager' "
            "(transformers returns no attentions under sdpa) or use attnflow.capture"
        )
    converted = [_to_tensor(layer) for layer in layers]
    as_numpy = all(n for _, n in converted)
    tensors = [t for t, _ in converted]
    first = tensors[0].shape
    for i, t in enumerate(tensors):
        if t.dim() not in (3, 4):
            raise AttnflowError(
                f"expected each layer's attention as (batch, heads, n, n) or (heads, n, n); layer {i} has shape {tuple(t.shape)}"
            )
        if t.shape != first:
            what = "heads" if t.dim() == len(first) and t.shape[-3] != first[-3] else "shape"
            raise AttnflowError(
                f"all layers must have the same {what}: layer 0 has shape {tuple(first)}, layer {i} has shape {tuple(t.shape)}"
            )
    dtype = torch.float64 if any(t.dtype == torch.float64 for t in tensors) else torch.float32
    stacked = torch.stack([t.to(dtype) for t in tensors], dim=-4)  # (..., layers, heads, n, n)
    return stacked, as_numpy


def _cache_patterns(cache: Any) -> list | None:
    """A TransformerLens ``ActivationCache``'s attention patterns (or a plain dict of its
    ``blocks.L.attn.hook_pattern`` entries), one per layer in layer order (None for anything else;
    recognised by its keys, so TransformerLens is never imported here)."""
    import re
    from collections.abc import Mapping

    if isinstance(cache, Mapping) and not hasattr(cache, "stack_activation"):
        if not any(re.fullmatch(r"blocks\.(\d+)\.attn\.hook_pattern", str(k)) for k in cache.keys()):
            shown = ", ".join(repr(str(k))[:40] for k in list(cache.keys())[:3]) or "none"
            raise AttnflowError(f"a dict of attention is read by its TransformerLens keys "
                                f"(blocks.L.attn.hook_pattern), and this one has none (keys: {shown}); pass the "
                                "ActivationCache itself (run_with_cache), the Hugging Face attentions tuple, or a "
                                "(layers, heads, n, n) stack")
    elif not (hasattr(cache, "stack_activation") and hasattr(cache, "keys")):
        return None

    found = {}
    for key in cache.keys():
        hit = re.fullmatch(r"blocks\.(\d+)\.attn\.hook_pattern", str(key))
        if hit:
            found[int(hit.group(1))] = cache[key]
    if not found:
        raise AttnflowError("this TransformerLens cache holds no attention patterns (blocks.L.attn.hook_pattern); "
                            "run the model with run_with_cache and no names_filter, or one that keeps 'pattern'")
    if sorted(found) != list(range(len(found))):
        raise AttnflowError(f"this TransformerLens cache holds the patterns of layers {sorted(found)} only; "
                            "attnflow needs every layer from 0")
    return [found[layer] for layer in range(len(found))]


def as_stack(attentions: Any, mask: Any = None, layout: str | None = None) -> Stack:
    """Validate attention (and an optional padding mask) into one ``Stack``.

    Args:
        attentions: ``(layers, heads, n, n)``, ``(batch, layers, heads, n, n)``, a Hugging Face
            per-layer tuple, ``AttentionMaps``, or a TransformerLens ``ActivationCache``.
        mask: Optional padding mask ``(n,)`` or ``(batch, n)``, True for real tokens.
        layout: How a 5-D stack is ordered: ``"batch-first"`` reads it as ``(batch, layers, heads,
            n, n)``, ``"layers-first"`` as ``(layers, batch, heads, n, n)``, the order of
            TransformerLens's ``cache.stack_activation("pattern")``. None: batch-first, except that a
            stack whose second axis is 1 and first is not (what that call returns for one input) is
            refused rather than read as a batch of one-layer maps.

    Returns:
        A ``Stack``: ``values`` of shape ``(batch, layers, heads, n, n)`` (float64 stays float64,
            anything else is float32, on the input's device), the ``(batch, n)`` mask, and whether
            the input was batched and numpy (results are handed back the same way).

    Raises:
        AttnflowError: Attention of another shape, a mask that does not fit, or an unknown layout.
    """
    from attnflow.core.maps import AttentionMaps  # local: maps imports this module

    if layout is not None and layout not in LAYOUTS:
        raise AttnflowError(f"layout must be one of {', '.join(LAYOUTS)}; got {layout!r}")
    if isinstance(attentions, Stack):  # validated already (attnflow.as_stack(x, layout=...) passed on)
        if mask is None:
            return attentions
        b, _, _, n, _ = attentions.shape
        return Stack(attentions.values, _as_mask(mask, b, n, attentions.values.device), attentions.batched,
                     attentions.as_numpy)
    patterns = _cache_patterns(attentions)
    if patterns is not None:
        attentions = patterns
    if isinstance(attentions, AttentionMaps):
        if mask is None:
            mask = attentions.mask
        attentions = attentions.attentions
    if attentions is None:
        raise AttnflowError(
            "got attentions=None; load the model with attn_implementation='eager' and output_attentions=True, "
            "or use attnflow.capture"
        )
    if isinstance(attentions, (tuple, list)):
        if layout is not None:
            raise AttnflowError("layout orders a 5-D stack; a per-layer tuple (or cache) is always (batch, heads, "
                                "n, n) per layer: leave layout out")
        values, as_numpy = _from_tuple(attentions)
        # A Hugging Face tuple always has a batch axis; a batch of one comes back unbatched,
        # which is what a user with one text expects.
        batched = values.dim() == 5 and values.shape[0] > 1
    else:
        values, as_numpy = _to_tensor(attentions)
        batched = values.dim() == 5
        if values.dim() == 5:
            values = _batch_first(values, layout)
            # one input given layers-first, (layers, 1, ...), comes back unbatched like a tuple of one
            batched = layout != "layers-first" or values.shape[0] > 1
    if values.dim() == 4:
        values = values.unsqueeze(0)
    if values.dim() != 5:
        raise AttnflowError(f"{_SHAPE_HELP}; got shape {tuple(values.shape)}")
    b, n_layers, heads, n, m = values.shape
    if n != m:
        raise AttnflowError(f"attention maps must be square (queries x keys); got {n} x {m}")
    if n_layers == 0 or heads == 0 or n == 0:
        raise AttnflowError(f"{_SHAPE_HELP}; got an empty shape {tuple(values.shape)}")
    # One pass for both checks (a NaN anywhere makes both extremes NaN): on a single flow row this
    # validation otherwise costs a third as much as the solve.
    lo, hi = (x.item() for x in torch.aminmax(values))
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise AttnflowError("attentions contain NaN or infinite values")
    if lo < 0:
        raise AttnflowError(f"attentions must be non-negative; the smallest value is {lo:.3g}")
    return Stack(values=values, mask=_as_mask(mask, b, n, values.device), batched=batched, as_numpy=as_numpy)


def _batch_first(values: torch.Tensor, layout: str | None) -> torch.Tensor:
    """A 5-D stack as ``(batch, layers, heads, n, n)``; the ambiguous shape refused (module docstring)."""
    if layout == "layers-first":
        return values.transpose(0, 1)
    if layout is None and values.shape[1] == 1 and values.shape[0] > 1:
        shape = tuple(values.shape)
        raise AttnflowError(f"a stack of shape {shape} reads as {shape[0]} inputs of a one-layer model, or as "
                            f"{shape[0]} layers of one input in TransformerLens's (layers, batch, heads, n, n) order; "
                            "say which with attnflow.as_stack(stack, layout='layers-first') (or 'batch-first'), "
                            "or pass the ActivationCache itself")
    return values


def _as_mask(mask: Any, batch: int, n: int, device: torch.device) -> torch.Tensor:
    if mask is None:
        return torch.ones(batch, n, dtype=torch.bool, device=device)
    m = mask.detach().cpu() if isinstance(mask, torch.Tensor) else torch.as_tensor(np.asarray(mask))
    m = m.to(torch.bool)
    if m.dim() == 1:
        m = m.unsqueeze(0)
    if m.shape == (1, n) and batch > 1:
        m = m.expand(batch, n)
    if tuple(m.shape) != (batch, n):
        raise AttnflowError(f"expected a padding mask of shape ({batch}, {n}) or ({n},); got {tuple(m.shape)}")
    if not m.any(dim=1).all():
        raise AttnflowError("the padding mask leaves an example with no real tokens")
    return m.to(device)
