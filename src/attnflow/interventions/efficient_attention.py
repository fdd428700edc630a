"""Memory-efficient attention for a pass that needs gradients through attention but not its weights.

Eager attention materialises each layer's ``(heads, n, n)`` scores and softmax weights, and autograd
keeps the weights (and the softmax's output) for the backward pass: at 8,192 tokens on SmolLM2-135M
(9 heads) one layer's weights alone are 2.4 GB in float32, and a checkpointed backward pass
recomputes them layer by layer. Value zeroing (``attnflow.interventions.attribution_patching``) reads
no attention weights, only gradients through attention, so it can run on torch's
``scaled_dot_product_attention`` instead, whose fused kernels (the CPU flash kernel, CUDA's flash and
memory-efficient kernels) keep per query only its output and the softmax's log-sum-exp and recompute
the rest block by block in the backward pass: memory ``O(n)`` per head instead of ``O(n^2)``.

The switch is scoped: ``efficient_attention`` opens a ``attnflow.hf.points.receiving`` scope
with ``attention="sdpa"`` and a kernel receiver per layer that counts the calls (and refuses attention
sinks, which SDPA would silently leave out); the model is back on its own implementation after the
block, also when it raises. It only switches where SDPA computes the same function as eager attention:

- the model class declares SDPA support (``_supports_sdpa``; Gemma 2 does not: its attention
  logits are soft-capped, ``cap * tanh(s / cap)``, which SDPA cannot apply);
- the config sets no attention soft-capping (``attn_logit_softcapping``: a Gemma 3 config may);
- the architecture table applies no mask fixes to the family
  (``attnflow.hf.architectures.architecture_fixes``).

Sliding windows are honoured: transformers builds the windowed mask for SDPA as it does for eager
attention (a boolean ``(n, n)`` mask per windowed layer, one byte per entry: 64 MB at 8,192 tokens),
and the CPU flash kernel takes a mask. Elsewhere the block runs on the model's own attention and
says so (the yielded ``Kernel`` has ``used`` False and ``why`` the reason).

Another thread running the same model meanwhile keeps its own attention (the hook points dispatch per
calling context).

API::

    with efficient_attention(model) as kernel:   # kernel.used: SDPA is on; kernel.calls: attention calls run on it
        model(...)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from attnflow.hf.architectures import architecture
from attnflow.hf.points import can_switch, hook_points, receiving


@dataclass
class Kernel:
    """What ``efficient_attention`` did: ``used`` (the model ran on SDPA), ``why`` not (a
    sentence), ``calls`` (attention calls that went through SDPA in the block)."""

    used: bool
    why: str = ""
    calls: int = 0


def _counter(kernel: Kernel) -> Any:
    def receiver(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> None:
        if kwargs.get("s_aux") is not None:  # attention sinks: SDPA would silently leave them out
            raise ValueError("attention sinks are not supported by SDPA")
        kernel.calls += 1  # None: the scope's implementation (SDPA) runs the call
    return receiver


def why_not(model: Any) -> str:
    """Why ``model`` must keep its own attention for a gradient pass (see the module docstring), or
    ``""`` when SDPA computes the same function."""
    config = getattr(model.config, "text_config", None) or model.config
    if not getattr(model, "_supports_sdpa", False):
        return f"{type(model).__name__} does not support SDPA"
    if getattr(config, "attn_logit_softcapping", None) is not None:
        return "its attention logits are soft-capped, which SDPA cannot apply"
    row = architecture(model)
    if row is not None and row.fixes:
        return f"attnflow corrects its attention masks ({', '.join(row.fixes)})"
    if not can_switch(model):
        return f"{type(model).__name__} cannot switch its attention implementation"
    return ""


@contextmanager
def efficient_attention(model: Any, enabled: bool = True) -> Iterator[Kernel]:
    """Run ``model`` on SDPA for the block where it computes the same function as eager attention
    (see the module docstring); restore its attention implementation after. ``enabled`` False: leave
    it as it is (``used`` False)."""
    why = why_not(model) if enabled else "not asked for"
    kernel = Kernel(used=not why, why=why)
    if not kernel.used:
        yield kernel
        return
    counter = _counter(kernel)
    with receiving(model, dict.fromkeys(hook_points(model).names("attn.kernel"), counter), attention="sdpa"):
        yield kernel
