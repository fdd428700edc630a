"""AttentionMaps: what capture hands to the methods."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from attnflow.errors import AttnflowError


@dataclass
class AttentionMaps:
    """Per-layer attention of one input (or a padded batch) plus what is needed to read it.

    attentions: ``(layers, heads, n, n)`` or ``(batch, layers, heads, n, n)``; row = query, column = key;
        layer 0 is the lowest layer (the one that reads the embeddings). When ``head_fusion`` is set
        the heads were fused during capture and the heads axis has length 1.
    tokens: the ``n`` token strings (a list of lists for a batch; padding included).
    mask: ``(n,)`` or ``(batch, n)`` booleans, True for real tokens, or None when nothing is padded.
    causal: True when queries only see keys at or before their own position (decoders).
    special: indices of special tokens such as [CLS]/[SEP] (per example for a batch).
    input_ids: the token ids the model saw, when known.
    logits: the model's output logits for the same forward pass, when captured.
    last_logits: a decoder's logits at the last position ``(vocabulary,)`` from the same pass (one
        text), the clean readout that ablated flow and occlusion reuse instead of a pass of their own.
    head_fusion: None when ``attentions`` holds every head; ``"mean"``, ``"max"`` or ``"min"`` when
        the heads were fused that way while the model ran (the methods must then be asked for the
        same fusion: the per-head maps are gone).
    weighting: ``"attention"`` when the maps are the attention weights, ``"norm"`` when they are the
        norm-based maps of ``attnflow.core.weighting`` (heads then always fused during capture).
    rows: ``TargetRows`` computed while capturing, in place of the maps (``attentions`` is then
        None): a decoder's target rows captured on its fast attention (``attnflow.core.qk_rows``).
    """

    attentions: Any
    tokens: list
    mask: Any = None
    causal: bool = False
    special: list = field(default_factory=list)
    input_ids: Any = None
    logits: Any = None
    last_logits: Any = None
    head_fusion: str | None = None
    weighting: str = "attention"
    rows: TargetRows | None = None

    @property
    def n_layers(self) -> int:
        if self.attentions is None and self.rows is not None:
            return self.rows.n_layers
        return int(self.attentions.shape[-4])

    @property
    def n_heads(self) -> int:
        return int(self.attentions.shape[-3])


@dataclass(frozen=True)
class TargetRows:
    """Some methods' rows of some target positions, computed while the model ran, without the maps.

    values: method -> ``(n_layers, len(positions), n)`` (float32, every layer); row = target position;
    empty when no method needed rows (the pass ran for the others, which run the model themselves).
    residual, head_fusion, causal_norm: the settings they were computed with; other settings cannot be
    served from them (``rows`` refuses them in a sentence).
    """

    positions: tuple[int, ...]
    values: dict
    n_layers: int
    n: int
    residual: float
    head_fusion: str
    causal_norm: str | None = None

    def rows(self, method: str, positions: Any, *, residual: float, head_fusion: str | None,
             causal_norm: str | None) -> Any:
        """``values[method]`` at ``positions`` ``(layers, len(positions), n)``, or a refusal that says
        what was captured."""
        asked = dict(residual=float(residual), head_fusion=head_fusion, causal_norm=causal_norm)
        kept = dict(residual=float(self.residual), head_fusion=self.head_fusion, causal_norm=self.causal_norm)
        wanted = list(self.positions) if positions is None else [int(p) for p in positions]
        if method not in self.values or asked != kept or not set(wanted) <= set(self.positions):
            raise AttnflowError(f"only the rows of {', '.join(self.values)} at positions {list(self.positions)} "
                                f"with {kept} were captured (without the attention maps); got {method} at "
                                f"{wanted} with {asked}: capture the maps for that")
        return self.values[method][:, [self.positions.index(p) for p in wanted]]


def check_fusion(attentions: Any, head_fusion: str | None) -> None:
    """Refuse a head fusion that maps captured with heads already fused cannot give."""
    fused = getattr(attentions, "head_fusion", None) if isinstance(attentions, AttentionMaps) else None
    if fused is not None and head_fusion != fused:
        asked = "per-head results (head_fusion=None)" if head_fusion is None else f"head_fusion={head_fusion!r}"
        raise AttnflowError(f"these maps were captured with heads fused by {fused!r}, so {asked} cannot be "
                            f"computed from them; capture again with head_fusion={head_fusion!r}")
