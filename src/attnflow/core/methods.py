"""The paper's attention methods as rows: raw, rollout and flow for some target positions and layers.
(Which methods exist, and what "all" means, is the registry's: ``attnflow.config.registry``.)

Every entry point (explain, the report maps, the agreement correlations, images) asks for the same
thing: for some target positions, how each layer's node draws on the input tokens.
"""

from __future__ import annotations

from typing import Any, Callable

from attnflow.config.registry import paper_methods
from attnflow.core.flow import flow, resolve_indices
from attnflow.core.maps import AttentionMaps
from attnflow.core.raw import raw, raw_rows
from attnflow.core.rollout import rollout, rollout_rows
from attnflow.errors import AttnflowError

# Up to this many tokens flow_targets="auto" computes flow for every target (what a report needs to let
# a reader click any token); above it for the explained target only. Measured with the certified
# solver (docs/performance.md): a full MiniLM 6-layer map costs 0.24 s at 32 tokens, 2.5 s at 64 and
# 26 s of CPU (13.5 s on two cores) at 128, growing roughly with n^3.
FLOW_ALL_MAX = 128


def method_rows(attentions: Any, method: str, positions: Any = None, *, layers: Any = None,
                residual: float = 0.5, head_fusion: str | None = "mean", solver: str = "auto",
                causal_norm: str | None = None, mask: Any = None,
                progress: Callable[[int, int], None] | None = None, runner: Callable[..., Any] | None = None) -> Any:
    """``(layers, len(positions), n)`` (batch axis first for batched input): row ``[l, i]`` is how
    ``positions[i]`` at layer ``layers[l]`` draws on the input tokens under ``method``.

    Every method is asked for ``positions`` and ``layers`` only (None means all of them): rollout
    rows come from vector-matrix products (``attnflow.core.rollout.rollout_rows``) unless the
    full maps are cheaper, raw rows are read one layer at a time, and flow costs one max-flow per
    row, source and layer; ``runner`` runs it (see ``attnflow.core.flow.flow``).
    """
    if isinstance(attentions, AttentionMaps) and attentions.attentions is None and attentions.rows is not None:
        # a decoder's target rows captured without the maps (attnflow.core.qk_rows)
        captured = attentions.rows
        wanted = None if positions is None else resolve_indices(positions, captured.n, "positions").tolist()
        values = captured.rows(method, wanted, residual=residual, head_fusion=head_fusion, causal_norm=causal_norm)
        return values if layers is None else values[resolve_indices(layers, captured.n_layers, "layers").tolist()]
    if method == "flow":
        return flow(attentions, residual=residual, head_fusion=head_fusion, positions=positions, layers=layers,
                    solver=solver, causal_norm=causal_norm, mask=mask, progress=progress, runner=runner)
    if positions is not None and method == "raw":
        return raw_rows(attentions, positions, layers=layers, head_fusion=head_fusion, causal_norm=causal_norm,
                        mask=mask)
    if positions is not None and method == "rollout":
        return rollout_rows(attentions, positions, layers=layers, residual=residual, head_fusion=head_fusion,
                            causal_norm=causal_norm, mask=mask)
    if method == "raw":
        full = raw(attentions, head_fusion=head_fusion, causal_norm=causal_norm, mask=mask)
    elif method == "rollout":
        full = rollout(attentions, residual=residual, head_fusion=head_fusion, causal_norm=causal_norm, mask=mask)
    else:
        raise AttnflowError(f"method must be one of {', '.join(paper_methods())}; got {method!r}")
    n_layers, n = full.shape[-3], full.shape[-1]
    if layers is not None:
        full = full[..., resolve_indices(layers, n_layers, "layers").tolist(), :, :]
    if positions is not None:
        full = full[..., resolve_indices(positions, n, "positions").tolist(), :]
    return full
