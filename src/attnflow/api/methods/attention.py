"""Raw attention, rollout and flow (Abnar & Zuidema 2020) as registry functions: the core's row
methods for text and images, the joint-graph methods of ``attnflow.core.joint`` for seq2seq."""

from __future__ import annotations

from typing import Any

import numpy as np

from attnflow.api import flowrun
from attnflow.config.registry import Context
from attnflow.core.methods import method_rows


def _rows(context: Context, method: str) -> Any:
    s = context.settings
    return np.asarray(method_rows(context.attentions, method, context.rows, layers=context.layers,
                                  residual=s.residual, head_fusion=s.head_fusion, solver=s.solver,
                                  causal_norm=s.causal_norm, progress=context.progress,
                                  runner=flowrun.run), dtype=float)


def _joint_rows(context: Context, full: Any) -> np.ndarray:
    """``(layers, T, S + T)`` joint rows -> the requested rows and layers."""
    full = np.asarray(full, dtype=float)
    if context.layers is not None:
        full = full[np.atleast_1d(context.layers)]
    return full if context.rows is None else full[:, list(context.rows)]


def raw(context: Context) -> np.ndarray:
    if context.kind == "seq2seq":
        from attnflow.core.joint import joint_raw

        t = context.target_tokens
        return _joint_rows(context, joint_raw(context.attentions[2], t, head_fusion=context.settings.head_fusion))
    return _rows(context, "raw")


def rollout(context: Context) -> np.ndarray:
    if context.kind == "seq2seq":
        from attnflow.core.joint import joint_rollout

        s = context.settings
        return _joint_rows(context, joint_rollout(*context.attentions, residual=s.residual,
                                                  head_fusion=s.head_fusion))
    return _rows(context, "rollout")


def flow(context: Context) -> np.ndarray:
    if context.kind == "seq2seq":
        from attnflow.core.joint import joint_flow

        s = context.settings
        return np.asarray(joint_flow(*context.attentions, residual=s.residual, head_fusion=s.head_fusion,
                                     positions=context.rows, layers=context.layers, solver=s.solver,
                                     progress=context.progress), dtype=float)
    return _rows(context, "flow")
