"""A decoder's target rows, captured on the model's fast attention: no ``(heads, n, n)``, no ``(layers, n, n)``.

The eager capture (``attnflow.capture.text``) runs the model on eager attention and keeps the fused
``(layers, n, n)`` maps: 8 GB at 8,192 tokens on SmolLM2-135M, before one layer's eager attention
inside the model. Raw attention's and rollout's rows of one target need neither: here the model runs
on SDPA, a receiver at each layer's attention kernel (the hook point ``layers.i.attn.kernel`` of
``attnflow.hf.points``) keeps the queries and keys as the kernel received them (after the position
encoding, in the model's dtype, grouped-query heads not repeated), and
``attnflow.core.qk_rows.target_rows`` recomputes the rows from them top down, chunk by chunk of
queries. Where the queries and keys of every layer would exceed ``KEEP_IN_MEMORY``, each layer's are
written to a temporary file as it runs and read back one layer at a time.

Soft-capped logits (Gemma 2), which SDPA cannot apply, are computed by the receiver itself, chunk by
chunk of queries (``chunked_attention``), so those layers hold no ``(heads, n, n)`` either.

The mask: the rows apply the causal mask, the layer's sliding window (from the architecture table,
``attnflow.hf.architectures.layer_windows``, checked against the kernel's ``sliding_window``
argument) and nothing else; a mask the kernel is given that says otherwise (a family whose masks differ)
is refused with a sentence rather than explained wrongly. Families the row capture cannot serve keep the
eager capture; ``why_not_rows`` says why (``attnflow methods --model``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Any

import torch

from attnflow.hf.architectures import layer_windows, why_not_rows
from attnflow.capture.text import forward_takes
from attnflow.core.maps import AttentionMaps, TargetRows
from attnflow.core.qk_rows import CHUNK_MEMORY, QK, chunk_size, head_weights, target_rows
from attnflow.errors import AttnflowError
from attnflow.hf.kind import kind_of
from attnflow.hf.points import hook_points, own_implementation, receiving

# Above this many bytes of queries and keys (every layer) each layer's are kept in a temporary file
# instead: SmolLM2-135M in float32 holds 92 KiB per token (377 MiB at 4,096 tokens).
KEEP_IN_MEMORY = 256 * 2**20
# A chunk of queries' scores on an accelerator: large matrix products keep it busy (on a CPU the
# core's CHUNK_MEMORY, sized for its cache).
DEVICE_CHUNK_MEMORY = 512 * 2**20


class QKStore(Sequence):
    """Each layer's ``QK``, kept in memory or, with ``folder``, in one file
    per layer there (read back on indexing, one layer at a time). ``close`` deletes the files."""

    def __init__(self, n_layers: int, folder: str | None = None) -> None:
        self.folder = folder
        self.kept: list[Any] = [None] * n_layers

    def put(self, layer: int, qk: QK) -> None:
        if self.folder is None:
            self.kept[layer] = qk
            return
        path = os.path.join(self.folder, f"layer{layer}.pt")
        torch.save({"query": qk.query.cpu(), "key": qk.key.cpu(), "scaling": qk.scaling, "softcap": qk.softcap,
                    "window": qk.window, "device": str(qk.query.device)}, path)
        self.kept[layer] = path

    def __len__(self) -> int:
        return len(self.kept)

    def __getitem__(self, layer: int) -> QK:  # type: ignore[override]
        kept = self.kept[layer]
        if kept is None:
            raise AttnflowError(f"layer {layer}'s attention kernel did not run")
        if isinstance(kept, QK):
            return kept
        saved = torch.load(kept, weights_only=True)
        device = saved.pop("device")
        return QK(saved.pop("query").to(device), saved.pop("key").to(device), **saved)

    def close(self) -> None:
        for kept in self.kept:
            if isinstance(kept, str):
                Path(kept).unlink(missing_ok=True)
        self.kept = [None] * len(self.kept)


def chunked_attention(qk: QK, value: torch.Tensor, memory: int = CHUNK_MEMORY) -> torch.Tensor:
    """Causal attention's output ``(1, n, heads, d_v)`` (what eager attention returns before its output
    projection) from ``qk`` and ``value`` ``(kv_heads, n, d_v)``, computed in float32 (or wider) chunk by chunk
    of queries and returned in ``value``'s dtype: soft-capped logits without a ``(heads, n, n)`` tensor."""
    heads, n, _ = qk.query.shape
    kv_heads, group = qk.key.shape[0], heads // qk.key.shape[0]
    dtype = torch.promote_types(value.dtype, torch.float32)
    out = torch.empty(n, heads, value.shape[-1], dtype=value.dtype, device=value.device)
    step = min(n, chunk_size(heads, n, torch.finfo(dtype).bits // 8, memory))
    for q0 in range(0, n, step):
        q1 = min(n, q0 + step)
        lo = max(0, q0 - qk.window + 1) if qk.window is not None else 0
        p = head_weights(qk, torch.arange(q0, q1), lo, q1, dtype=dtype)  # (heads, c, keys)
        o = p.reshape(kv_heads, group * (q1 - q0), q1 - lo) @ value[:, lo:q1].to(dtype)
        out[q0:q1] = o.reshape(heads, q1 - q0, -1).transpose(0, 1).to(value.dtype)
    return out[None]


def _check_mask(mask: Any, n: int, window: int | None, layer: int) -> None:
    """Refuse a kernel mask that is not the causal (windowed) one the rows recompute."""
    if mask is None:  # SDPA's own causal mask (transformers passes none only where a window changes nothing)
        if window is not None and window < n:
            raise AttnflowError(f"layer {layer} got no attention mask although its window ({window}) is shorter "
                                f"than the input ({n} tokens)")
        return
    if not isinstance(mask, torch.Tensor) or mask.shape[-2:] != (n, n) or mask.shape[0] != 1:
        shown = tuple(mask.shape) if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise AttnflowError(f"layer {layer}'s attention mask has shape {shown}; the row capture expects one "
                            f"input's ({n}, {n}) mask")
    queries = torch.arange(n, device=mask.device)
    step = 1024
    for q0 in range(0, n, step):
        rows = mask[0, :, q0:q0 + step]  # (1 or heads, c, n)
        seen = rows if rows.dtype == torch.bool else rows > torch.finfo(rows.dtype).min / 2
        keys, own = queries[None, :], queries[q0:q0 + step, None]
        expected = (keys <= own) & ((keys > own - window) if window is not None else True)
        if not bool((seen == expected).all()):
            raise AttnflowError(f"layer {layer}'s attention mask is not the causal{' sliding-window' if window else ''}"
                                " mask the row capture recomputes; explain this model with its attention maps")


class _Keeper:
    """The kernel receivers of one pass: each layer's queries and keys into ``store``."""

    def __init__(self, store: QKStore, keep: bool, memory: int, windows: list[int | None],
                 progress: Any = None, total: int = 0) -> None:
        self.store, self.keep, self.memory, self.windows = store, keep, memory, windows
        self.progress, self.total = progress, total
        self.calls = 0
        self.computed = 0  # layers whose output the receiver computed (soft-capped logits)
        self.checked: dict[tuple, Any] = {}  # (id(mask), window) -> the mask (held, so the id stays its own)

    def receiver(self, layer: int) -> Any:
        def kernel(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> Any:
            self.calls += 1
            if self.progress is not None:  # layer by layer: the pass alone takes minutes on a long prompt
                self.progress(self.calls, self.total)
            for unknown in ("s_aux", "position_bias"):
                if kwargs.get(unknown) is not None:
                    raise AttnflowError(f"layer {layer}'s attention takes {unknown}, which the row capture does not "
                                        "recompute; explain this model with its attention maps")
            if query.shape[0] != 1:
                raise AttnflowError(f"the row capture takes one input; got a batch of {query.shape[0]}")
            n = key.shape[-2]
            # the table's window (some families build it into the mask alone, e.g. Qwen2-MoE), checked against
            # the kernel's argument and the mask
            window = self.windows[layer] if layer < len(self.windows) else None
            given = kwargs.get("sliding_window")
            if given is not None and min(int(given), n) != min(window or n, n):
                raise AttnflowError(f"layer {layer} slides a window of {given} keys; the architecture table says "
                                    f"{window}")
            if (id(attention_mask), window) not in self.checked:
                _check_mask(attention_mask, n, window, layer)
                self.checked[id(attention_mask), window] = attention_mask
            qk = QK.received(query, key, window, **kwargs)
            if self.keep:
                self.store.put(layer, qk)
            if qk.softcap is None:
                return None  # the scope's SDPA runs
            self.computed += 1
            return chunked_attention(qk, value[0].detach(), self.memory), None
        return kernel


def qk_bytes(model: Any, n: int) -> int:
    """Bytes of every layer's queries and keys for ``n`` tokens in the model's dtype, from its config."""
    config = getattr(model.config, "text_config", None) or model.config
    heads = int(getattr(config, "num_attention_heads", 0) or getattr(config, "n_head", 0) or 1)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or int(getattr(config, "hidden_size", 0) or 0) // heads)
    dtype = next(model.parameters()).dtype
    layers = hook_points(model).layers
    return layers * n * (heads + kv_heads) * head_dim * torch.finfo(dtype).bits // 8


def run_rows(model: Any, inputs: dict, position: int | Sequence[int], methods: Sequence[str], *, residual: float,
             head_fusion: str, causal_norm: str | None, memory: int | None = None, keep_in_memory: int = KEEP_IN_MEMORY,
             progress: Any = None, **forward: Any) -> tuple[TargetRows, Any, bool]:
    """One SDPA forward pass of ``model`` on ``inputs`` (one text, on the model's device) keeping each
    layer's queries and keys, then ``methods``' rows of ``position`` (one, or a sequence) at every layer
    (``attnflow.core.qk_rows.target_rows``). Returns the rows (float32, on the CPU), the model's
    output and whether that output is the model's own (it runs on SDPA itself and no layer's output was
    computed by the receiver). ``methods`` empty: the pass alone (nothing kept). ``memory``: bytes per chunk of queries
    (default ``CHUNK_MEMORY`` on a CPU, ``DEVICE_CHUNK_MEMORY`` elsewhere).
    ``progress(done, total)``: after each layer of the pass, then of the sweep (``total``: twice the layers; a
    progress with a ``method`` attribute, the CLI's bar, is told the step is "capture", counted in layers)."""
    why = why_not_rows(model, kind_of(model).family)
    if why:
        raise AttnflowError(f"the row capture cannot explain {type(model).__name__}: {why}")
    points = hook_points(model)
    positions = [int(position)] if isinstance(position, int) else [int(p) for p in position]
    n = int(inputs["input_ids"].shape[-1])
    if memory is None:
        memory = CHUNK_MEMORY if inputs["input_ids"].device.type == "cpu" else DEVICE_CHUNK_MEMORY
    own = own_implementation(model) == "sdpa"
    spill = bool(methods) and qk_bytes(model, n) > keep_in_memory
    with tempfile.TemporaryDirectory(prefix="attnflow-qk-") if spill else nullcontext() as folder:
        store = QKStore(points.layers, folder)
        total = points.layers * (2 if methods else 1)
        if hasattr(progress, "method"):
            progress.method("capture", "layers")
        keeper = _Keeper(store, keep=bool(methods), memory=memory, windows=layer_windows(model), progress=progress,
                         total=total)
        swept = None if progress is None else (lambda done, _: progress(points.layers + done, total))
        receivers = {name: keeper.receiver(i) for i, name in enumerate(points.names("attn.kernel"))}
        try:
            with torch.no_grad(), receiving(model, receivers, attention="sdpa"):
                out = model(**inputs, **forward)
            keeper.checked.clear()
            if keeper.calls != points.layers:
                raise AttnflowError(f"expected {points.layers} attention kernel calls; {keeper.calls} ran (a layer "
                                    "computes its attention outside transformers' attention functions)")
            values = target_rows(store, positions, methods=list(methods), residual=residual,
                                 head_fusion=head_fusion, causal_norm=causal_norm, memory=memory,
                                 progress=swept) if methods else {}
        finally:
            store.close()
    rows = TargetRows(positions=tuple(positions), values={m: v.cpu() for m, v in values.items()}, n_layers=points.layers,
                      n=n, residual=residual, head_fusion=head_fusion, causal_norm=causal_norm)
    return rows, out, own and not keeper.computed


def capture_rows(model: Any, tokenizer: Any, text: str, position: int, methods: Sequence[str], *,
                 truncate: bool = False, residual: float = 0.5, head_fusion: str = "mean",
                 causal_norm: str | None = None, memory: int | None = None,
                 keep_in_memory: int = KEEP_IN_MEMORY, progress: Any = None) -> AttentionMaps:
    """``attnflow.capture.capture`` of one text for a decoder, holding ``methods``' rows of
    ``position`` (``"raw"``, ``"rollout"``; every layer) instead of the maps: ``maps.attentions`` is None
    and ``maps.rows`` a ``TargetRows``. The model runs on SDPA for the pass and
    comes back on the attention implementation it had; ``maps.last_logits`` is kept only where the
    pass ran as the model runs (a model on SDPA). ``memory``: bytes per chunk of queries;
    ``keep_in_memory``: the most bytes of queries and keys kept in memory (beyond: temporary files)."""
    from attnflow.capture.text import encoded, maps_of

    if not isinstance(text, str):
        raise AttnflowError(f"the row capture takes one text (a string); got {type(text).__name__}")
    given = encoded(model, tokenizer, text, truncate=truncate)
    if not given.causal:
        raise AttnflowError(f"the row capture is for decoders; {type(model).__name__} is not one")
    n = int(given.enc["input_ids"].shape[1])
    if not 0 <= position < n:
        raise AttnflowError(f"target position {position} is outside the input's {n} tokens")
    no_cache = {"use_cache": False} if forward_takes(model, "use_cache") else {}
    rows, out, own = run_rows(model, given.inputs, position, methods, residual=residual, head_fusion=head_fusion,
                         causal_norm=causal_norm, memory=memory, keep_in_memory=keep_in_memory, progress=progress,
                         **given.forward, **no_cache)
    maps = maps_of(given, tokenizer, text, out, None, head_fusion=head_fusion, rows=rows)
    if not own:
        # SDPA's output differs from the model's own attention by rounding (eager attention's softmax is
        # float32 even for a float64 model); methods that compare edited passes with a clean one, on the
        # model's own attention, run that clean pass themselves rather than mix the two
        maps.last_logits = None
    return maps
