"""Streaming capture: reduce each layer's attention inside a forward hook, as soon as the layer has run.

``model(..., output_attentions=True)`` makes transformers keep every layer's ``(batch, heads, n, n)``
weights in a tuple until the forward pass ends; stacking them for the methods then holds a second
copy. At 4,096 tokens on SmolLM2-135M (30 layers, 9 heads) one copy alone is 18 GB. Here a receiver on
each attention module's hook point (``layers.i.attn``, ``attnflow.hf.points``) gets that layer's
weights (under eager attention, switched on for the call only; transformers 5 attention
modules return them whether or not ``output_attentions`` is set), writes what the methods need into
one preallocated float32 buffer (the head-fused ``(n, n)`` map, or every head only when per-head
results are asked for) and returns; nothing else keeps the weights, so each layer's are freed before
the next layer runs. Peak memory: the buffer plus one layer's attention.

Which modules produce attention comes from the model classes themselves: every transformers 5 model
declares ``_can_record_outputs`` (e.g. ``{"attentions": LlamaAttention}``, or an ``OutputRecorder``
with the tuple index and a sub-module name such as ``"self_attn"``), which transformers' own
``output_attentions`` machinery reads. We read the same declaration, in the same way (a sub-model's
declaration applies to its own sub-tree), so no per-architecture table is needed for this. Models
without one (older code such as Falcon, Bloom, DeBERTa-v2) fall back to ``output_attentions``.

This module also holds what the capture and the interventions share about a pass through the hook
points: ``eager`` (eager attention for a call, no receivers) and ``architecture_fixes`` (the
table's corrections as receivers on the ``fixes`` point).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch

from attnflow.hf.architectures import FIXES, architecture
from attnflow.core.fusion import fuse_heads
from attnflow.core.weighting import norm_weighted
from attnflow.errors import AttnflowError
from attnflow.hf.points import AttentionModule, attention_modules, can_switch, receiving


def streamable_modules(model: Any) -> list[AttentionModule]:
    """``attention_modules`` when each runs once per layer; empty (take transformers' tuple
    instead) for a model that runs one module in several layers (ALBERT shares its layers'
    weights: one attention module, called ``num_hidden_layers`` times)."""
    modules = attention_modules(model)
    config = getattr(model, "config", None)
    config = getattr(config, "text_config", None) or config
    layers = getattr(config, "num_hidden_layers", None)
    if modules and isinstance(layers, int) and len({m.owner for m in modules}) == 1 and len(modules) < layers:
        return []
    return modules


def checked_weights(weights: Any) -> torch.Tensor:
    """A layer's attention weights ``(batch, heads, q, k)`` as a hook received them, detached; a
    module that returned none (an attention implementation other than eager) is refused."""
    if not isinstance(weights, torch.Tensor) or weights.dim() != 4:
        raise AttnflowError(
            "an attention module returned no attention weights; load the model with attn_implementation='eager'")
    return weights.detach()


def pending_norms(pending: dict[int, torch.Tensor], projections: list[Any], layer: int, heads: int) -> torch.Tensor:
    """Per-head norms ``(batch, heads, positions)`` of the value projection output that layer
    ``layer``'s value hook left in ``pending`` (taken out), for its ``heads`` query heads."""
    projected = pending.pop(layer, None)
    if projected is None:
        raise AttnflowError(f"layer {layer}'s value projection did not run before its attention; the architecture "
                            "table names the wrong module for the norm weighting")
    return projections[layer].head_norms(projected, heads)


def replay_attentions(output: Any, receiver: Any) -> int:
    """For a model whose classes declare no attention modules: hand the layers of ``output``'s
    attention tuple to ``receiver.layer(i, weights)`` one by one, dropping each entry as it goes (so
    the tuple and the receiver never both hold everything). Returns the number of layers."""
    layers = list(getattr(output, "attentions", None) or ())
    if not layers:
        raise AttnflowError("the model returned no attentions; load it with attn_implementation='eager'")
    output["attentions"] = None
    for i in range(len(layers)):
        receiver.layer(i, layers[i])
        layers[i] = None
    return len(layers)


class Reducer:
    """Receives layer ``i``'s weights ``(batch, heads, q, k)`` and keeps what is asked for.

    ``head_fusion`` "mean" / "max" / "min": ``buffer[:, i, 0]`` = the fused ``(q, k)`` map (float32);
    None: ``buffer[:, i]`` = every head. The buffer ``(batch, layers, 1 or heads, q, k)`` is made on
    the first call, when the number of heads is known.

    ``projections`` (one ``attnflow.capture.values.Projection`` per layer) switch to the norm
    weighting: the value projection's output of layer ``i`` arrives first (``values``), and the
    fused map kept is ``attnflow.core.weighting.norm_weighted`` of the weights and those norms.
    """

    def __init__(self, n_layers: int, head_fusion: str | None, projections: list[Any] | None = None) -> None:
        if projections is not None and head_fusion is None:
            raise AttnflowError("the norm weighting fuses the heads while the model runs; pass head_fusion "
                                "'mean', 'max' or 'min'")
        self.n_layers, self.head_fusion, self.projections = n_layers, head_fusion, projections
        self.buffer: torch.Tensor | None = None
        self.calls = 0
        self.pending: dict[int, torch.Tensor] = {}

    def end_call(self, output: Any) -> None:
        """The whole model has run (nothing to do: every layer was kept as it came)."""

    def values(self, layer: int, projected: Any) -> None:
        """Layer ``layer``'s value projection output ``(batch, n, width)``, kept until its weights come."""
        self.pending[layer] = projected.detach()

    def weighted(self, layer: int, w: torch.Tensor) -> torch.Tensor:
        """The norm-weighted fused map ``(batch, q, k)`` of layer ``layer``'s weights ``w``."""
        norms = pending_norms(self.pending, self.projections, layer, w.shape[1])
        # fused where the model runs: only the (batch, q, k) map crosses to the host, not every head's
        return norm_weighted(w.to(dtype=torch.float32), norms.to(device=w.device, dtype=torch.float32),
                             self.head_fusion).to(device="cpu")

    def layer(self, layer: int, weights: Any) -> None:
        self.calls += 1
        w = checked_weights(weights)
        if self.buffer is None:
            batch, heads, q, k = w.shape
            kept = heads if self.head_fusion is None else 1
            self.buffer = torch.zeros(batch, self.n_layers, kept, q, k, dtype=torch.float32)
        target = self.buffer[:, layer]
        if tuple(w.shape[-2:]) != tuple(target.shape[-2:]) or w.shape[0] != target.shape[0]:
            raise AttnflowError(f"layer {layer} returned attention of shape {tuple(w.shape)}; layer 0 had "
                                f"{tuple(self.buffer[:, 0].shape)} (per-layer windows are not supported here)")
        if self.head_fusion is None:
            target.copy_(w)
            return
        if self.projections is not None:
            target[:, 0] = self.weighted(layer, w)
            return
        # fused where the model runs (a GPU's heads never cross to the host); no copy for float32 on the CPU
        target[:, 0] = fuse_heads(w.to(dtype=torch.float32), self.head_fusion).to(device="cpu")


def layer_weights(output: Any, index: int) -> Any:
    """What a ``layers.i.attn`` receiver gets as the layer's weights: ``output[index]`` of an attention
    module that returns a tuple (its ``AttentionModule`` ``index``), else the output itself."""
    return output[index] if isinstance(output, (tuple, list)) else output


def _receivers(modules: list[AttentionModule], receiver: Any) -> dict[str, Any]:
    """The named points a streaming receiver takes: each layer's attention module (its weights at
    ``output[index]``), each value projection when it weights by norms, and the whole model's output."""
    def layer_hook(layer: int, index: int) -> Any:
        def hook(module: Any, args: Any, output: Any) -> None:
            receiver.layer(layer, layer_weights(output, index))
        return hook

    def value_hook(layer: int) -> Any:
        return lambda module, args, output: receiver.values(layer, output)

    def end_hook(module: Any, args: Any, output: Any) -> None:
        receiver.end_call(output)

    wanted: dict[str, Any] = {f"layers.{i}.attn": layer_hook(i, found.index) for i, found in enumerate(modules)}
    if modules and getattr(receiver, "projections", None) is not None:
        wanted.update({f"layers.{i}.attn.value": value_hook(i) for i in range(len(modules))})
    wanted["output"] = end_hook
    return wanted


@contextmanager
def streaming(model: Any, modules: list[AttentionModule], receiver: Any) -> Iterator[Any]:
    """For the duration of the block, every forward call of ``model`` in this thread runs on eager
    attention and hands layer ``i``'s attention (``output[index]`` of ``modules[i]``, the model's
    ``layers.i.attn`` hook points) to ``receiver.layer(i, weights)`` and, once the whole model has
    run, its output to ``receiver.end_call(output)``. A receiver with ``projections`` (norm
    weighting) also gets each value projection's output first: ``receiver.values(i, output)``.
    ``modules`` empty (a model whose classes declare none): eager attention and the end call only.
    The model is as it was after the block (``attnflow.hf.points``)."""
    receiver.model = model
    with receiving(model, _receivers(modules, receiver), attention=attention_for_weights(model)):
        yield receiver


def attention_for_weights(model: Any) -> str | None:
    """"eager" where the model can switch; None (its own) for older modelling code that cannot (Falcon,
    Bloom): such code returns weights for ``output_attentions`` on any implementation, or none, which the
    capture refuses with a sentence."""
    return "eager" if can_switch(model) else None


def eager(model: Any) -> Any:
    """The model on eager attention (which returns weights) for a block with no receivers: transformers'
    own ``output_attentions`` tuple, for models whose classes declare no attention modules."""
    return receiving(model, {}, attention=attention_for_weights(model))


@contextmanager
def scoped(variable: ContextVar[Any], value: Any) -> Iterator[None]:
    """Set ``variable`` (which receivers in an open scope read) for the duration of one pass, and
    restore it after, also when the pass fails (ablation's edits, one batch at a time, reach the
    receivers of its scope this way)."""
    token = variable.set(value)
    try:
        yield
    finally:
        variable.reset(token)


@contextmanager
def architecture_fixes(model: Any) -> Iterator[None]:
    """Apply the architecture table's ``fixes`` for ``model`` (``attnflow.hf.architectures.FIXES``:
    receivers on its ``fixes`` hook point, before each module they correct runs) for the duration of the
    block; nothing for models whose row has none."""
    row = architecture(model)
    if row is None or not row.fixes:
        yield
        return
    with receiving(model, {"fixes": [FIXES[fix][1] for fix in row.fixes]}):
        yield
