"""Explanation: one method's scores for one target position of one input, and how to show them.

``scores[l, j]`` is how much the target position at layer ``l+1`` draws on input token ``j``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np


def ranked(scores: np.ndarray, tokens: list[str], k: int,
           keep: Callable[[int], bool] = lambda i: True) -> list[tuple[int, str, float]]:
    """The ``k`` highest ``(position, token, score)`` among the positions ``keep`` accepts; ties keep
    token order."""
    order = [int(i) for i in np.argsort(-scores, kind="stable") if keep(int(i))]
    return [(i, tokens[i], float(scores[i])) for i in order[:k]]


@dataclass
class Explanation:
    """Scores of one method for one target position.

    tokens: the ``n`` input tokens; scores: ``(layers, n)``; method: "raw" | "rollout" | "flow" | ...;
    target: the 0-based target position; prediction: the model's label for the input, if known;
    params: the settings that produced the scores (residual, head_fusion, model, ...).
    """

    tokens: list[str]
    scores: np.ndarray
    method: str
    target: int
    prediction: str | None = None
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def n_layers(self) -> int:
        return int(self.scores.shape[0])

    def top(self, k: int = 5, layer: int = -1, skip: tuple[int, ...] = ()) -> list[tuple[int, str, float]]:
        """The ``k`` highest-scoring ``(position, token, score)`` at ``layer``, leaving out ``skip``."""
        return ranked(self.scores[layer], self.tokens, k, keep=lambda i: i not in skip)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tokens": list(self.tokens),
            "method": self.method,
            "target": int(self.target),
            "scores": np.asarray(self.scores, dtype=float).tolist(),
            "target_token": self.tokens[self.target],
            "prediction": self.prediction,
            "params": self.params,
        }

    def to_json(self, indent: int | None = None) -> str:
        """JSON with ``tokens``, ``method``, ``target`` and ``scores`` (one list per layer), plus
        ``target_token``, ``prediction`` and ``params``."""
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Explanation:
        from attnflow.errors import AttnflowError

        missing = [key for key in ("tokens", "method", "target", "scores") if key not in data]
        if missing:
            raise AttnflowError(f"an explanation needs the keys tokens, method, target, scores; missing {missing}")
        return cls(tokens=list(data["tokens"]), scores=np.asarray(data["scores"], dtype=float),
                   method=str(data["method"]), target=int(data["target"]), prediction=data.get("prediction"),
                   params=dict(data.get("params") or {}))

    def plot(self, path: str, **kwargs: Any) -> str:
        """Write the layers x tokens heatmap (PNG, SVG or PDF by extension); returns the path."""
        from attnflow.views.heatmap import save_heatmaps

        return save_heatmaps([self], path, **kwargs)

    def to_html(self, path: str | None = None, title: str | None = None) -> str:
        """The self-contained HTML report of this explanation (no network needed); also written
        atomically to ``path`` when given. To switch method in the page, pass several explanations
        to :func:`attnflow.views.report.save_report`."""
        from attnflow.views.report import report_html, save_report

        return save_report(self, path, title=title) if path else report_html(self, title=title)

    def _repr_html_(self) -> str:
        from attnflow.views.report import notebook_html

        return notebook_html(self)

    def table(self, k: int = 5) -> Any:
        """A rich table of the top ``k`` tokens per layer."""
        from attnflow.views.table import layer_table

        return layer_table(self, k)

    def __str__(self) -> str:
        from attnflow.views.table import render_text

        return render_text(self.table())
