"""Memory-efficient attention for a pass that needs gradients through attention but not its weights.

Eager attention materialises each layer's ``(heads, n, n)`` scores and softmax weights, and autograd
keeps the weights (and the softmax's output) for the backward pass: at 8,192 tokens on SmolLM2-135M
(9 heads) one layer's weights alone are 2.4 GB in float32, and a checkpointed backward pass
recomputes them layer by layer. Value zeroing (:mod:`attnflow.capture.attribution_patching`) reads
no attention weights, only gradients through attention, so it can run on torch's
``scaled_dot_product_attention`` instead, whose fused kernels (the CPU flash kernel, CUDA's flash and
memory-efficient kernels) keep per query only its output and the softmax's log-sum-exp and recompute
the rest block by block in the backward pass: memory ``O(n)`` per head instead of ``O(n^2)``.

The switch is scoped: :func:`efficient_attention` registers one attention function with transformers'
``AttentionInterface`` (transformers' own SDPA function, counted), puts the model on it for the block
and back on its previous implementation after, also when the block raises. It only switches where
SDPA computes the same function as eager attention:

- the model class declares SDPA support (``_supports_sdpa``; Gemma 2 does not: its attention
  logits are soft-capped, ``cap * tanh(s / cap)``, which SDPA cannot apply);
- the config sets no attention soft-capping (``attn_logit_softcapping``: a Gemma 3 config may);
- the architecture table applies no mask fixes to the family
  (:func:`attnflow.capture.architectures.architecture_fixes`).

Sliding windows are honoured: transformers builds the windowed mask for SDPA as it does for eager
attention (a boolean ``(n, n)`` mask per windowed layer, one byte per entry: 64 MB at 8,192 tokens),
and the CPU flash kernel takes a mask. Elsewhere the block runs on the model's own attention and
says so (the yielded :class:`Kernel` has ``used`` False and ``why`` the reason).

The switch changes the model's config for the block: another thread running the same model at the
same time would see SDPA too (and get no attention weights). attnflow runs this only from
:data:`attnflow.capture.attribution_patching.CHECKPOINT_FROM` positions, beyond what the app explains
(512 tokens), as AttnLRP switches to its own function for its pass.

API::

    with efficient_attention(model) as kernel:   # kernel.used: SDPA is on; kernel.calls: attention calls run on it
        model(...)
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from attnflow.capture.architectures import architecture

KERNEL = "attnflow_sdpa"  # the name the counted SDPA function is registered under


@dataclass
class Kernel:
    """What :func:`efficient_attention` did: ``used`` (the model ran on SDPA), ``why`` not (a
    sentence), ``calls`` (attention calls that went through SDPA in the block)."""

    used: bool
    why: str = ""
    calls: int = 0


_ACTIVE: ContextVar[Kernel | None] = ContextVar("attnflow_efficient_attention", default=None)


def _attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> Any:
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    if kwargs.get("s_aux") is not None:  # attention sinks: SDPA would silently leave them out
        raise ValueError("attention sinks are not supported by SDPA")
    counting = _ACTIVE.get()
    if counting is not None:
        counting.calls += 1
    return ALL_ATTENTION_FUNCTIONS["sdpa"](module, query, key, value, attention_mask, **kwargs)


def _register() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

    AttentionInterface.register(KERNEL, _attention)
    AttentionMaskInterface.register(KERNEL, sdpa_mask)  # a boolean mask, or none where is_causal does it


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
    if not callable(getattr(model, "set_attn_implementation", None)):
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
    _register()
    previous = getattr(model.config, "_attn_implementation", None) or "eager"
    token = _ACTIVE.set(kernel)
    try:
        model.set_attn_implementation(KERNEL)
        if getattr(model.config, "_attn_implementation", None) != KERNEL:  # transformers declined (it warns)
            kernel.used, kernel.why = False, f"{type(model).__name__} did not switch to SDPA"
        yield kernel
    finally:
        _ACTIVE.reset(token)
        model.set_attn_implementation(previous)
