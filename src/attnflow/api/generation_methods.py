"""The model-based methods of the registry through a generation: every generated token explained by
ablated flow, occlusion, ALTI-Logit or logit attribution (any registered text method that runs the
model), as ``M[n_generated, sources, layers]`` beside the tracked rollout.

Generated token ``i`` sits at position ``m + i`` and is predicted at ``m - 1 + i``; each method
explains that token (the one generated, not the argmax) with the sequence up to it, exactly as one
teacher-forced pass over ``prompt + generated[:i]`` per token would (``tests/test_generation_methods.py``
checks it), but in one go: the logit methods take one pass over the whole sequence (positions do not
interact along the direct path), and the per-source methods (ablated flow, occlusion) one edited run
per source that reads every later target, starting from the generation's own key/value cache and
logits (reused, not recomputed) where its layers can be cropped.

    offered() -> the method names generate accepts besides "rollout"
    reuses_cache(methods) -> whether the generation should keep its cache and logits
    method_blocks(model, trace, methods, n_layers, progress=None) -> {method: Block}
"""

from __future__ import annotations

from typing import Any


from attnflow.api.methods import run_method
from attnflow.config import registry
from attnflow.config.registry import PER_SOURCE, Context
from attnflow.errors import AttnflowError
from attnflow.results import Block

TRACKED = registry.tracked()


def offered() -> tuple[str, ...]:
    """Registered text methods that run the model (so they can explain any generated token)."""
    return registry.generation_methods()[1:]


def check(methods: list[str]) -> None:
    unknown = [m for m in methods if m != TRACKED and m not in offered()]
    if unknown:
        raise AttnflowError(f"generate explains each token with {TRACKED} or {', '.join(offered())}; "
                            f"got {unknown[0]!r}")


def reuses_cache(methods: list[str]) -> bool:
    return any(registry.get(m).cost == PER_SOURCE for m in methods if m != TRACKED)


def method_blocks(model: Any, trace: Any, methods: list[str], n_layers: int, progress: Any = None) -> dict[str, Block]:
    """method -> ``Block`` ``(n_generated, layers, m + n_generated)`` for a generation ``trace``
    (``attnflow.capture.generation.GenerationTrace``); a method without a layers axis fills the
    top layer only, as in every text result."""
    check(methods)
    ids = list(trace.prompt_ids) + list(trace.new_ids)
    m, k = len(trace.prompt_ids), len(trace.new_ids)
    rows = [m - 1 + i for i in range(k)]
    blocks = {}
    for name in methods:
        if name == TRACKED:
            continue
        record = registry.get(name)
        per_source = record.cost == PER_SOURCE  # the generation's own cache and logits: no clean pass
        context = Context(kind="text", attentions=None, settings=None, rows=rows, model=model, input_ids=ids,
                          progress=progress, tokens=list(trace.new_ids), cache=trace.cache if per_source else None,
                          clean_logits=trace.logits if per_source else None, n_layers=n_layers)
        blocks[name] = run_method(record, context, targets=range(k))
    return blocks
