"""ExplanationMaps: every method's scores for every target position of one input.

An :class:`~attnflow.Explanation` answers "which tokens does position ``t`` draw on"; the HTML report
lets a reader click any token to make it the target, so it needs ``maps[method][l, t, j]`` for all
``t``. Raw attention and rollout give every row in one pass. Flow needs one max-flow per (target,
input token, layer), so by default it is computed for every position only while that is cheap
(``n <= FLOW_ALL_MAX``) and otherwise for the captured target alone; ``computed[method]`` records which
rows exist and the report says so.

    maps = attnflow.explain_maps("The keys to the cabinet", target="cls")
    maps.explanation("flow")          # an Explanation for the captured target
    maps.to_html("report.html")
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from attnflow.errors import AttnflowError
from attnflow.explanation import Explanation

# Above this many tokens, flow for every target costs tens of seconds on a laptop core
# (about n^3 max-flow work per layer), so "auto" computes it for the captured target only.
FLOW_ALL_MAX = 32


@dataclass
class ExplanationMaps:
    """tokens: the ``n`` input tokens; maps: method -> ``(layers, n, n)``, row = target position,
    column = input token (rows that were not computed are NaN); computed: method -> the target
    positions whose rows exist; target: the captured (default) target position."""

    tokens: list[str]
    maps: dict[str, np.ndarray]
    computed: dict[str, list[int]]
    target: int
    prediction: str | None = None
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def methods(self) -> list[str]:
        return list(self.maps)

    @property
    def n_layers(self) -> int:
        return int(next(iter(self.maps.values())).shape[0])

    def explanation(self, method: str, target: int | None = None) -> Explanation:
        """The :class:`Explanation` of ``method`` for ``target`` (default: the captured target)."""
        if method not in self.maps:
            raise AttnflowError(f"these maps hold the methods {self.methods}; got {method!r}")
        target = self.target if target is None else int(target) % len(self.tokens)
        if target not in self.computed[method]:
            raise AttnflowError(f"{method} was computed for positions {self.computed[method]} only; got {target}")
        return Explanation(tokens=list(self.tokens), scores=np.array(self.maps[method][:, target, :]), method=method,
                           target=target, prediction=self.prediction, params=dict(self.params))

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": "maps", "tokens": list(self.tokens), "target": int(self.target), "prediction": self.prediction,
            "params": self.params, "computed": {m: list(map(int, c)) for m, c in self.computed.items()},
            # Only computed rows are stored: JSON has no NaN.
            "maps": {m: {str(t): np.asarray(v[:, t, :], dtype=float).tolist() for t in self.computed[m]}
                     for m, v in self.maps.items()},
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict())

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ExplanationMaps:
        try:
            tokens = [str(t) for t in data["tokens"]]
            n = len(tokens)
            maps, computed = {}, {}
            for method, rows in data["maps"].items():
                targets = sorted(int(t) for t in rows)
                first = np.asarray(rows[str(targets[0])], dtype=float)
                full = np.full((first.shape[0], n, n), np.nan)
                for t in targets:
                    full[:, t, :] = np.asarray(rows[str(t)], dtype=float)
                maps[method], computed[method] = full, targets
            target = int(data["target"])
            if not any(target in rows for rows in computed.values()):
                raise ValueError(f"target {target} is not among the computed positions of its {n} tokens")
            return cls(tokens=tokens, maps=maps, computed=computed, target=target,
                       prediction=data.get("prediction"), params=dict(data.get("params") or {}))
        except (KeyError, TypeError, ValueError, IndexError) as exc:
            raise AttnflowError(f"not a valid maps result (kind 'maps'): {exc}") from exc

    def to_html(self, path: str | None = None, title: str | None = None) -> str:
        """The self-contained HTML report; also written atomically to ``path`` when given."""
        from attnflow.views.report import report_html, save_report

        return save_report(self, path, title=title) if path else report_html(self, title=title)

    def _repr_html_(self) -> str:
        from attnflow.views.report import notebook_html

        return notebook_html(self)


def maps_from_attentions(attentions: Any, tokens: list[str], target: int, *, methods: tuple[str, ...] = (
        "raw", "rollout", "flow"), flow_targets: str = "auto", residual: float = 0.5,
        head_fusion: str | None = "mean", solver: str = "auto", prediction: str | None = None,
        params: dict[str, Any] | None = None, progress: Callable[[int, int], None] | None = None,
        causal_norm: str | None = None) -> ExplanationMaps:
    """Full maps from captured attention ``(layers, heads, n, n)`` (or :class:`AttentionMaps`).

    flow_targets: ``"all"`` (every position), ``"target"`` (``target`` only) or ``"auto"`` (all
    positions when ``n <= FLOW_ALL_MAX``, else the target only).
    """
    from attnflow.core.methods import method_rows

    if flow_targets not in ("auto", "all", "target"):
        raise AttnflowError(f"flow_targets must be 'auto', 'all' or 'target'; got {flow_targets!r}")
    n = len(tokens)
    out: dict[str, np.ndarray] = {}
    computed: dict[str, list[int]] = {}
    for method in methods:
        # flow costs one max-flow per row, so it gets every row only while that is cheap
        every = method != "flow" or flow_targets == "all" or (flow_targets == "auto" and n <= FLOW_ALL_MAX)
        rows = list(range(n)) if every else [target]
        values = np.asarray(method_rows(attentions, method, rows, residual=residual, head_fusion=head_fusion,
                                        solver=solver, causal_norm=causal_norm, progress=progress), dtype=float)
        full = np.full((values.shape[0], n, n), np.nan)
        full[:, rows, :] = values
        out[method], computed[method] = full, rows
    return ExplanationMaps(tokens=list(tokens), maps=out, computed=computed, target=target, prediction=prediction,
                           params=dict(params or {}))


def explain_maps(text: str, model: Any = None, *, tokenizer: Any = None,
                 methods: tuple[str, ...] = ("raw", "rollout", "flow"), target: Any = None,
                 flow_targets: str = "auto", residual: float = 0.5, head_fusion: str = "mean",
                 solver: str = "auto", truncate: bool = False,
                 progress: Callable[[int, int], None] | None = None,
                 causal_norm: str | None = None) -> ExplanationMaps:
    """Like :func:`attnflow.explain`, but every method's scores for every target position (flow as
    ``flow_targets`` says), so a report can switch target. One forward pass, plus one differentiable
    pass when ``methods`` includes "grad-rollout" (sequence classifiers only)."""
    from attnflow.explain import prepare

    run = prepare(text, model, tokenizer, target=target, head_fusion=head_fusion, truncate=truncate,
                  residual=residual, causal_norm=causal_norm)
    plain = tuple(m for m in methods if m != "grad-rollout")
    result = maps_from_attentions(run.maps, list(run.maps.tokens), run.target, methods=plain,
                                  flow_targets=flow_targets, residual=residual, head_fusion=head_fusion,
                                  solver=solver, prediction=run.prediction, params=run.params, progress=progress,
                                  causal_norm=causal_norm)
    if "grad-rollout" in methods:  # every row comes from one backward pass
        n = len(run.maps.tokens)
        result.maps["grad-rollout"], result.computed["grad-rollout"] = run.grad_rollout(), list(range(n))
    return result
