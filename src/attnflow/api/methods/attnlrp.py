"""AttnLRP as a registry function (the rules and the one pass: ``attnflow.interventions.attnlrp``).

Takes the registry's ``Context`` (``model``, ``input_ids``, ``rows``, ``tokens``, ``foils``,
``readout``, ``spans``) and returns ``(1, rows, n)``: the relevance of each source token for the
explained logit, which sums over sources to that logit minus AttnLRP's bias terms (linear biases,
norm offsets, position embeddings, the softmax rule's terms; see the capture module). A decoder's
row ``t`` explains the token predicted at ``t`` (one backward pass per row); a classifier's predicted
class logit is read from the whole sequence, not one position: every requested row holds its
relevances. With ``spans`` each token carries its span's sum (relevance is additive).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from attnflow.api.methods.ablation import _needs_decoder, _rows
from attnflow.units.spans import spread
from attnflow.hf.kind import kind_of
from attnflow.interventions.attnlrp import attnlrp as _attnlrp


def attnlrp(context: Any) -> np.ndarray:
    _needs_decoder(context, "AttnLRP")
    rows = _rows(context)
    n = len(np.asarray(context.input_ids).reshape(-1))
    order = np.argsort(rows, kind="stable")
    classifier = kind_of(context.model).head == "classification"

    def pick(given: Any) -> Any:  # per row, in the sorted targets' order; a classifier explains one class
        if given is None:
            return None
        return np.atleast_1d(given)[:1] if classifier else np.asarray(given)[order]

    found = _attnlrp(context.model, context.input_ids, sorted(rows), tokens=pick(context.tokens),
                     foils=pick(context.foils), readout=context.readout, progress=context.progress)
    if found.decoder:
        scores = found.relevance[[found.targets.index(r) for r in rows]]
    else:  # one class logit, shown on every requested row
        scores = np.repeat(found.relevance, len(rows), axis=0)
    if context.spans is not None:
        groups = [list(g) for g in context.spans]
        scores = spread(np.stack([scores[..., g].sum(-1) for g in groups], -1), groups, n)
    return scores[None]
