"""Rollout tracked incrementally through generation (decoders).

Causality makes rollout incremental: row ``t`` of ``R_l = A_l @ R_{l-1}`` is
``R_l[t] = sum_{k<=t} A_l[t, k] R_{l-1}[k]`` and needs only row ``t`` of each ``A_l`` plus the
stored rows ``R_{l-1}[k], k < t``, which never change when tokens are appended (position ``k`` never
attends to later positions). So each new position costs ``O(layers * t^2)`` (one row times the stored
rows per layer) instead of the ``O(layers * t^3)`` of rolling out the whole prefix again, and the model
only has to produce the new query's attention row, which a KV-cached forward step gives.

``IncrementalRollout`` keeps ``rows[l, k, :]`` = ``R_{l+1}[k]`` (0-based layer ``l``) for every
position seen so far, in a buffer that grows by doubling. Row = query, column = input position, as in
``attnflow.core.fusion``.

Sliding-window layers (Mistral, Gemma 2/3, ...): a KV-cached step of such a layer returns attention over
the ``k`` most recent keys only. ``place_window`` puts those ``k`` columns at their absolute positions
``t+1-k .. t`` and zeros before them, which is exactly row ``t`` of the layer's full map (a one-pass
forward returns the same row with zeros outside the window), so rollout stays exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from attnflow.core.causal import augment_last_row, check_causal_norm
from attnflow.core.fusion import (
    augmented,
    check_head_fusion,
    check_residual,
    fuse_heads,
)
from attnflow.core.rollout import rollout_matrices
from attnflow.errors import AttnflowError


def rollout_row(rows: torch.Tensor, attention: torch.Tensor, *, residual: float = 0.5,
                head_fusion: str = "mean", causal_norm: str | None = None) -> torch.Tensor:
    """The rollout rows of a new last position ``t`` at every layer.

    rows: ``(layers, t, >=t)`` stored rollout rows of positions ``0..t-1`` (only the first ``t``
        columns are read; earlier positions put no mass on later ones).
    attention: ``(layers, heads, t+1)``, the new query's attention over keys ``0..t`` at each layer.
    Returns ``(layers, t+1)``: ``R_l[t]`` for every layer ``l``.
    """
    n_layers, _, width = attention.shape
    t = width - 1
    fused = fuse_heads(attention.unsqueeze(-2), head_fusion)[..., 0, :]  # heads sit at dim -3 as a 1-row map
    a = augment_last_row(fused, residual, causal_norm)  # (layers, t+1)
    out = torch.empty(n_layers, t + 1, dtype=a.dtype, device=a.device)
    below = None  # R_{l-1}[t]; at the embeddings R_0 is the identity
    for layer in range(n_layers):
        if layer == 0:
            row = a[0].clone()
        else:
            row = a[layer, :t] @ rows[layer - 1, :t, : t + 1]
            row = row + a[layer, t] * below
        out[layer] = row
        below = row
    return out


def window_columns(keys: int, width: int, window: int | None = None, layer: int = 0) -> slice:
    """Where a cached step's ``keys`` attention columns sit among the ``width`` positions ``0..t``: the
    most recent ones, ``width-keys .. width-1``. ``window``: the layer's declared sliding window (None:
    full attention); ``keys`` must be ``width`` or ``min(width, window)``, anything else is refused (a
    cache whose keys are not the most recent ones would be placed wrongly)."""
    allowed = {width} if window is None else {width, min(width, window)}
    if keys not in allowed:
        what = "full attention" if window is None else f"a sliding window of {window}"
        raise AttnflowError(f"layer {layer} ({what}) returned attention over {keys} keys at position {width - 1}; "
                            f"expected {' or '.join(str(a) for a in sorted(allowed))}")
    return slice(width - keys, width)


def place_window(attention: Any, width: int, windows: Sequence[int | None] | None = None) -> torch.Tensor:
    """Per-layer attention rows of the newest query over possibly fewer keys -> ``(layers, heads, width)``.

    attention: a ``(layers, heads, width)`` tensor, or one ``(heads, k_l)`` row block per layer with
        ``k_l <= width``: the ``k_l`` most recent keys, placed at absolute columns ``width-k_l .. width-1``
        (the columns before get 0, positions outside the layer's window); see ``window_columns``.
    windows: per layer, the window size (None: full attention) the model declares.
    """
    if isinstance(attention, torch.Tensor) or not isinstance(attention, (list, tuple)):
        return torch.as_tensor(attention)
    rows = [torch.as_tensor(a) for a in attention]
    if not rows or any(r.dim() != 2 for r in rows) or len({r.shape[0] for r in rows}) != 1:
        raise AttnflowError(f"expected one (heads, keys) attention row per layer; got shapes {[tuple(r.shape) for r in rows]}")
    out = torch.zeros(len(rows), rows[0].shape[0], width, dtype=rows[0].dtype)
    for layer, row in enumerate(rows):
        window = windows[layer] if windows is not None and layer < len(windows) else None
        out[layer, :, window_columns(row.shape[-1], width, window, layer)] = row
    return out


class IncrementalRollout:
    """Rollout rows of a growing causal sequence, one new position at a time.

    ``start(prompt_attentions)`` rolls out the prompt ``(layers, heads, m, m)`` once; each
    ``append(attention_row)`` with ``(layers, heads, t+1)`` adds position ``t``. ``rows`` is
    ``(layers, n, n)``, lower-triangular, equal to ``attnflow.rollout`` on the whole sequence.
    Unpadded sequences only (one sequence; pad a batch outside). ``windows``: per layer, the model's
    sliding-window size or None (see ``place_window``); ``append`` then also takes one row block per
    layer over that layer's window.
    """

    def __init__(self, *, residual: float = 0.5, head_fusion: str = "mean", causal_norm: str | None = None,
                 dtype: torch.dtype = torch.float64, windows: Sequence[int | None] | None = None) -> None:
        check_residual(residual)
        check_head_fusion(head_fusion)
        check_causal_norm(causal_norm)
        if head_fusion is None:
            raise AttnflowError("incremental rollout needs head_fusion 'mean', 'max' or 'min'; got None")
        self.residual, self.head_fusion, self.causal_norm, self.dtype = residual, head_fusion, causal_norm, dtype
        self.windows = list(windows) if windows is not None else None
        self._rows: torch.Tensor | None = None
        self.n = 0

    @property
    def rows(self) -> torch.Tensor:
        if self._rows is None:
            raise AttnflowError("no attention yet: call start() with the prompt's attention first")
        return self._rows[:, : self.n, : self.n]

    def start(self, attentions: Any) -> torch.Tensor:
        """Roll out the prompt; ``attentions``: ``(layers, heads, m, m)``. Returns ``(layers, m, m)``."""
        values = torch.as_tensor(attentions).detach().to(self.dtype)
        if values.dim() != 4 or values.shape[-1] != values.shape[-2]:
            raise AttnflowError(f"expected prompt attentions of shape (layers, heads, m, m); got {tuple(values.shape)}")
        n_layers, _, m, _ = values.shape
        mask = torch.ones(1, m, dtype=torch.bool)
        a = augmented(values[None], mask, residual=self.residual, head_fusion=self.head_fusion,
                      causal_norm=self.causal_norm)[0]
        self._rows = torch.zeros(n_layers, max(2 * m, 16), max(2 * m, 16), dtype=self.dtype)
        self._rows[:, :m, :m] = rollout_matrices(a)
        self.n = m
        return self.rows

    def append(self, attention: Any) -> torch.Tensor:
        """Add the next position; ``attention``: ``(layers, heads, n+1)``, or one ``(heads, k_l)`` block per
        layer over its most recent keys (``place_window``). Returns its rows ``(layers, n+1)``."""
        rows = self._rows if self._rows is not None else None
        if rows is None:
            raise AttnflowError("call start() with the prompt's attention before append()")
        values = place_window(attention, self.n + 1, self.windows).detach().to(self.dtype)
        if values.dim() != 3 or values.shape[0] != rows.shape[0] or values.shape[-1] != self.n + 1:
            raise AttnflowError(
                f"expected the new position's attention of shape ({rows.shape[0]}, heads, {self.n + 1}); "
                f"got {tuple(values.shape)}")
        if self.n + 1 > rows.shape[1]:  # grow by doubling: amortised O(1) copies per position
            bigger = torch.zeros(rows.shape[0], 2 * rows.shape[1], 2 * rows.shape[1], dtype=self.dtype)
            bigger[:, : self.n, : self.n] = rows[:, : self.n, : self.n]
            self._rows = rows = bigger
        new = rollout_row(rows[:, : self.n], values, residual=self.residual, head_fusion=self.head_fusion,
                          causal_norm=self.causal_norm)
        rows[:, self.n, : self.n + 1] = new
        self.n += 1
        return new
