"""The decoder methods through a generation: every generated token explained by one of
ablated flow, occlusion, ALTI-Logit or direct logit attribution, as ``M[n_generated, sources, layers]``.

Generated token ``i`` sits at position ``m + i`` and is predicted at ``m - 1 + i``; each method
explains that token (the one generated, not the argmax) with the sequence up to it, exactly as one
teacher-forced pass over ``prompt + generated[:i]`` per token would (``tests/test_generation_methods.py``
checks it), but in one go: the logit methods take one pass over the whole sequence (positions do not
interact along the direct path), and ablated flow / occlusion one edited run per source that reads
every later target, starting from the generation's own key/value cache and logits (reused, not
recomputed) where its layers can be cropped.

    method_blocks(model, trace, methods, progress=None) -> {method: Block}
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import numpy as np

from attnflow.api.methods import ablation, logit
from attnflow.errors import AttnflowError
from attnflow.results import Block

# name -> (function, has a layers axis, reuses the generation's cache)
FUNCTIONS = {
    "ablated-flow": (ablation.ablated_flow, False, True),
    "ablated-flow-layers": (ablation.ablated_flow_layers, True, True),
    "occlusion": (ablation.occlusion, False, True),
    "occlusion-mean": (ablation.occlusion_mean, False, True),
    "alti-logit": (logit.alti_logit, True, False),
    "logit-attribution": (logit.logit_attribution, True, False),
}


def reuses_cache(methods: list[str]) -> bool:
    return any(FUNCTIONS[m][2] for m in methods if m in FUNCTIONS)


def method_blocks(model: Any, trace: Any, methods: list[str], n_layers: int, progress: Any = None) -> dict[str, Block]:
    """method -> :class:`Block` ``(n_generated, layers, m + n_generated)`` for a generation ``trace``
    (:class:`attnflow.capture.generation.GenerationTrace`); a method without a layers axis fills the
    top layer only."""
    unknown = [m for m in methods if m not in FUNCTIONS]
    if unknown:
        raise AttnflowError(f"generate tracks rollout and {', '.join(FUNCTIONS)}; got {unknown[0]!r}")
    ids = list(trace.prompt_ids) + list(trace.new_ids)
    m, k = len(trace.prompt_ids), len(trace.new_ids)
    rows = [m - 1 + i for i in range(k)]
    blocks = {}
    for name in methods:
        function, layered, _ = FUNCTIONS[name]
        extra = {"tokens": list(trace.new_ids)}
        if trace.cache is not None and FUNCTIONS[name][2]:
            extra.update(cache=trace.cache, clean_logits=trace.logits)
        context = SimpleNamespace(kind="text", model=model, input_ids=ids, rows=rows, layers=None, progress=progress,
                                  settings=None, attentions=None, tokenizer=None, gradients=None, extra=extra)
        values = np.asarray(function(context), dtype=float).transpose(1, 0, 2)  # (rows, layers, N)
        if layered:
            blocks[name] = Block.full(values)
        else:
            blocks[name] = Block(values, tuple(range(k)), (n_layers - 1,))
    return blocks
