"""ALTI-Logit and direct logit attribution as registry functions (the one pass:
``attnflow.interventions.logit_paths``; the decompositions: ``attnflow.core.logit_attribution``).

Each takes a context (``model``, ``input_ids``, ``rows``, ``layers``, ``tokens``, ``foils``) and returns
``(layers, rows, n)``: the source's share of the explained logit brought by the attention of layers
``1 .. l+1`` (cumulative over layers, like rollout's ``R_{l+1}``: the top layer holds the whole
attention part of the logit, and ``np.diff`` over the layers axis gives each layer's own share,
which sums over sources to that layer's attention part of the logit exactly).

A decoder's row ``t`` explains the token predicted at ``t`` (``context.tokens``: given tokens, e.g.
the generated ones; ``context.foils``: explain ``z_c - z_f``). A classifier's logit (the predicted
class) is read from the whole sequence, not one position: every requested row holds its attribution.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from attnflow.interventions.logit_paths import LogitPaths, logit_paths
from attnflow.core.logit_attribution import alti_normalised, direct_logit_attribution
from attnflow.core.logit_attribution import alti_logit as _alti_logit
from attnflow.errors import AttnflowError


def _paths(context: Any, alti: bool = False) -> tuple[LogitPaths, list[int]]:
    if context.model is None or context.input_ids is None:
        raise AttnflowError("logit attribution runs the model; use attnflow.explain or attnflow.generate with a model")
    ids = torch.as_tensor(np.asarray(context.input_ids)).reshape(-1)
    rows = list(range(ids.numel())) if context.rows is None else [int(r) for r in context.rows]
    paths = logit_paths(context.model, ids, targets=rows, tokens=context.tokens, foils=context.foils, alti=alti)
    return paths, rows


def _shaped(per_layer: torch.Tensor, paths: LogitPaths, rows: list[int], layers: Any) -> np.ndarray:
    """``(targets, L, n)`` per-layer shares -> cumulative ``(layers, rows, n)``."""
    values = per_layer.cumsum(1).numpy()
    if not paths.decoder:
        values = np.repeat(values[:1], len(rows), axis=0)
    out = values.transpose(1, 0, 2)
    return out if layers is None else out[np.atleast_1d(layers)]


def logit_attribution(context: Any) -> np.ndarray:
    paths, rows = _paths(context)
    dla = direct_logit_attribution(paths.attentions, paths.values, paths.grads, paths.select)
    return _shaped(dla, paths, rows, context.layers)


def alti_logit(context: Any) -> np.ndarray:
    paths, rows = _paths(context, alti=True)  # ALTI's scores made layer by layer while the model ran
    dla = direct_logit_attribution(paths.attentions, paths.values, paths.grads, paths.select)
    contributions = (alti_normalised(scores) for scores in paths.alti)  # one float64 C_l at a time
    return _shaped(_alti_logit(dla, contributions), paths, rows, context.layers)
