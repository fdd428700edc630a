"""Joint rollout tracked incrementally while an encoder-decoder model generates (KV cache).

The joint rollout (``attnflow.core.joint``) is causal on the decoder side: row ``t`` of
``D_l = (1 - r) C_l [E | 0] + r A_l D_{l-1}`` needs only row ``t`` of ``C_l`` and ``A_l`` (what one
KV-cached decoder step returns: the new position's cross-attention over the source and its
self-attention over decoder positions ``0..t``), the encoder's rollout ``E`` (computed once), and the
stored rows ``D_{l-1}[u], u < t``, which never change when positions are appended. Each step costs
``O(Ld * t * (S + t))``.
"""

from __future__ import annotations

from typing import Any

import torch

from attnflow.core.causal import augment_last_row
from attnflow.core.fusion import check_head_fusion, check_residual, fuse_heads
from attnflow.core.incremental import place_window
from attnflow.core.joint import normalized_rows
from attnflow.errors import AttnflowError


def joint_rollout_row(rows: torch.Tensor, encoder_rollout: torch.Tensor, self_row: torch.Tensor,
                      cross_row: torch.Tensor, *, residual: float = 0.5, head_fusion: str = "mean") -> torch.Tensor:
    """The joint rollout rows of a new last decoder position ``t`` at every decoder layer.

    rows: ``(Ld, t, >= S + t)`` stored rows ``D_{l+1}[u]`` of positions ``u < t``.
    encoder_rollout: ``E`` ``(S, S)``. self_row: ``(Ld, heads, t+1)``; cross_row: ``(Ld, heads, S)``.
    Returns ``(Ld, S + t + 1)``.
    """
    n_layers, _, width = self_row.shape
    t = width - 1
    s = encoder_rollout.shape[0]
    a = augment_last_row(fuse_heads(self_row.unsqueeze(-2), head_fusion)[..., 0, :], residual, None)  # (Ld, t+1)
    c = normalized_rows(fuse_heads(cross_row.unsqueeze(-2), head_fusion)[..., 0, :])  # (Ld, S)
    out = torch.zeros(n_layers, s + t + 1, dtype=a.dtype)
    for layer in range(n_layers):
        row = torch.zeros(s + t + 1, dtype=a.dtype)
        row[:s] = (1.0 - residual) * (c[layer] @ encoder_rollout)
        if layer == 0:  # D_0 is the identity on the decoder inputs
            row[s:] += residual * a[0]
        else:
            row[: s + t] += residual * (a[layer, :t] @ rows[layer - 1, :t, : s + t])
            row += residual * a[layer, t] * out[layer - 1]
        out[layer] = row
    return out


class IncrementalJointRollout:
    """Joint rollout rows of a growing decoder sequence, one position per ``append``.

    encoder_rollout: ``E`` ``(S, S)`` (``JointGraph(...).encoder_rollout()`` on the encoder's attention).
    ``rows``: ``(Ld, n, S + n)``, equal to ``attnflow.core.joint.joint_rollout`` on the whole decoder
    sequence.
    """

    def __init__(self, encoder_rollout: Any, n_layers: int, *, residual: float = 0.5,
                 head_fusion: str = "mean") -> None:
        check_residual(residual)
        check_head_fusion(head_fusion)
        if head_fusion is None:
            raise AttnflowError("incremental joint rollout needs head_fusion 'mean', 'max' or 'min'; got None")
        self.encoder_rollout = torch.as_tensor(encoder_rollout).detach().to(torch.float64)
        if self.encoder_rollout.dim() != 2 or self.encoder_rollout.shape[0] != self.encoder_rollout.shape[1]:
            raise AttnflowError(f"expected the encoder rollout as (S, S); got {tuple(self.encoder_rollout.shape)}")
        self.residual, self.head_fusion = float(residual), head_fusion
        self.n_layers, self.n = int(n_layers), 0
        s = self.encoder_rollout.shape[0]
        self._rows = torch.zeros(self.n_layers, 16, s + 16, dtype=torch.float64)

    @property
    def n_source(self) -> int:
        return int(self.encoder_rollout.shape[0])

    @property
    def rows(self) -> torch.Tensor:
        return self._rows[:, : self.n, : self.n_source + self.n]

    def append(self, self_attention: Any, cross_attention: Any) -> torch.Tensor:
        """Add decoder position ``n``: ``self_attention`` ``(Ld, heads, n+1)`` (or one ``(heads, k)``
        block per layer, see ``attnflow.core.incremental.place_window``), ``cross_attention``
        ``(Ld, heads, S)``. Returns its rows ``(Ld, S + n + 1)``."""
        s = self.n_source
        values = place_window(self_attention, self.n + 1).detach().to(torch.float64)
        cross = torch.as_tensor(cross_attention).detach().to(torch.float64)
        if values.dim() != 3 or values.shape[0] != self.n_layers or values.shape[-1] != self.n + 1:
            raise AttnflowError(f"expected the new position's decoder self-attention of shape ({self.n_layers}, heads, "
                                f"{self.n + 1}); got {tuple(values.shape)}")
        if cross.dim() != 3 or cross.shape[0] != self.n_layers or cross.shape[-1] != s:
            raise AttnflowError(f"expected the new position's cross-attention of shape ({self.n_layers}, heads, {s}); "
                                f"got {tuple(cross.shape)}")
        if self.n + 1 > self._rows.shape[1]:  # grow by doubling
            cap = 2 * self._rows.shape[1]
            bigger = torch.zeros(self.n_layers, cap, s + cap, dtype=torch.float64)
            bigger[:, : self.n, : s + self.n] = self.rows
            self._rows = bigger
        new = joint_rollout_row(self._rows[:, : self.n], self.encoder_rollout, values, cross, residual=self.residual,
                                head_fusion=self.head_fusion)
        self._rows[:, self.n, : s + self.n + 1] = new
        self.n += 1
        return new
