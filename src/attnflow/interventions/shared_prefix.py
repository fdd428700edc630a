"""Edited re-runs that share one clean prefix instead of copying it into every row.

An exact re-run of ablated flow or occlusion edits a source ``j`` and runs positions ``j0 .. t`` of a
batch of rows, each starting from the clean key/value cache of ``[0, j0)``. transformers' cache
concatenates each row's new keys onto its own copy of the prefix (and SDPA's wrapper repeats the
grouped-query key/value heads once more), so a batch of ``b`` rows moved ``b`` copies of the prefix
through memory two or three times per layer: at 2,000 tokens on SmolLM2-135M that was a fifth of the
budgeted method's time, none of it counted in multiply-accumulates, and at 8,192 tokens ``b`` copies
of a 380 MB cache.

Here every row's suffix attends to the **one** prefix, in two parts merged exactly by their
log-sum-exps (the split-softmax identity FlashAttention's blocks use):

- the prefix part: every row's queries attend to every prefix key (a causal suffix sees the whole
  prefix), so the rows, and the query heads that share a key/value head, are laid end to end as the
  queries of one attention call against the single ``(1, kv_heads, j0, head_dim)`` prefix: no copy;
- the suffix part: each row's queries attend causally to its own new keys (``s`` of them);
- ``out = w * out_prefix + (1 - w) * out_suffix`` with ``w = sigmoid(lse_prefix - lse_suffix)``.

Both parts run on torch's fused CPU attention kernel, which returns the log-sum-exp
(``aten._scaled_dot_product_flash_attention_for_cpu``; torch's public SDPA does not return it). It
applies where SDPA computes the model's attention (``attnflow.interventions.efficient_attention.why_not``:
no soft-capping, sinks or mask fixes), the cache can be cropped (no sliding-window layers) and the
model runs on the CPU in float32 or float64 (in half precision the
kernel rounds otherwise than the clean pass did, and that gap would be read as the edit's effect); elsewhere ``usable`` says why and callers copy the prefix as before. The
scores equal the copying path's to float round-off (``tests/test_shared_prefix.py``) and one plain
pass per source (the ablation and span oracles run through this path).

API::

    why = usable(model)                      # "" where the shared path applies
    with SharedPrefix(model) as shared:      # the kernel receivers, for the block
        cache = shared.cache(prefix_kv)      # [(keys, values) (1, kv_heads, j0, head_dim) per layer]
        with shared.running():
            model(input_ids=rows, **{cache_keyword: cache})
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from attnflow.hf.architectures import layer_windows
from attnflow.interventions.efficient_attention import why_not
from attnflow.errors import AttnflowError
from attnflow.hf.points import hook_points, receiving
from attnflow.hf.weights import input_device

_KERNEL = getattr(torch.ops.aten, "_scaled_dot_product_flash_attention_for_cpu", None)
SUFFIX_BYTES = 64 * 2**20  # rows of the suffix part repeated over grouped heads at once, at most


def usable(model: Any) -> str:
    """Why re-runs of ``model`` cannot share their prefix (a sentence), or ``""`` where they can."""
    why = why_not(model)
    if why:
        return why
    if any(w is not None for w in layer_windows(model)):
        return "its sliding-window layers keep only their window of the prefix"
    if _KERNEL is None:
        return "this torch has no fused CPU attention kernel returning the log-sum-exp"
    if next(model.parameters()).dtype in (torch.float16, torch.bfloat16):
        # an edited run's unedited positions must round as the clean run's did, or the rounding gap
        # (half precision's, not float32's) is read as the edit's effect: a one-layer zeroing's
        # ranking on a bfloat16 model fell to Spearman 0.3 against float32's
        return "in half precision the edited runs round as the clean pass does only on the model's own attention"
    if input_device(model).type != "cpu":
        return "the shared prefix runs on the CPU's fused kernel; on other devices each row copies it"
    return ""


def _layer_class() -> type:
    from transformers.cache_utils import DynamicLayer

    class SharedLayer(DynamicLayer):
        """A cache layer holding the shared prefix ``(1, kv_heads, j0, head_dim)``; ``update`` keeps and
        returns only the rows' new keys and values (the prefix is attended to by the kernel receiver)."""

        def __init__(self, keys: torch.Tensor | None, values: torch.Tensor | None) -> None:
            super().__init__()
            self.prefix_keys, self.prefix_values = keys, values
            self.keys = self.values = None
            self.is_initialized = True

        def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
            if self.keys is not None:
                raise AttnflowError("a shared-prefix cache serves one forward pass")
            self.keys, self.values = key_states, value_states
            return key_states, value_states

        def get_seq_length(self) -> int:
            prefix = 0 if self.prefix_keys is None else self.prefix_keys.shape[-2]
            return prefix + (0 if self.keys is None else self.keys.shape[-2])

    return SharedLayer


def _attend(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, causal: bool,
            scale: float | None) -> tuple[torch.Tensor, torch.Tensor]:
    out, lse = _KERNEL(query, keys, values, 0.0, causal, scale=scale)[:2]
    return out, lse


def shared_attention(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, prefix_keys: torch.Tensor,
                     prefix_values: torch.Tensor, scale: float | None) -> torch.Tensor:
    """Causal attention of ``query (b, heads, s, d)`` over the shared prefix ``(1, kv, j0, d)`` (None:
    no prefix) then its own row's ``keys``/``values (b, kv, s, d)``: ``(b, s, heads, d)``, as
    transformers' attention functions return it (see the module docstring)."""
    b, heads, s, d = query.shape
    kv = keys.shape[1]
    group = heads // kv  # query head i reads key/value head i // group (transformers' repeat_kv)
    # suffix part: each row's own keys, causal; rows in pieces so the repeated heads stay bounded
    per_row = heads * s * (d + values.shape[-1]) * keys.element_size()
    step = max(1, SUFFIX_BYTES // max(per_row, 1))
    outs, lses = [], []
    for r in range(0, b, step):
        k = keys[r:r + step].repeat_interleave(group, dim=1) if group > 1 else keys[r:r + step]
        v = values[r:r + step].repeat_interleave(group, dim=1) if group > 1 else values[r:r + step]
        o, lse = _attend(query[r:r + step], k, v, True, scale)
        outs.append(o)
        lses.append(lse)
    out_s, lse_s = torch.cat(outs) if len(outs) > 1 else outs[0], torch.cat(lses) if len(lses) > 1 else lses[0]
    if prefix_keys is None or prefix_keys.shape[-2] == 0:
        return out_s.transpose(1, 2).contiguous()
    # prefix part: (1, kv, group * b * s, d) queries against the one prefix
    laid = query.reshape(b, kv, group, s, d).permute(1, 2, 0, 3, 4).reshape(1, kv, group * b * s, d)
    out_p, lse_p = _attend(laid, prefix_keys, prefix_values, False, scale)
    out_p = out_p.reshape(kv, group, b, s, -1).permute(2, 0, 1, 3, 4).reshape(b, heads, s, -1)
    lse_p = lse_p.reshape(kv, group, b, s).permute(2, 0, 1, 3).reshape(b, heads, s)
    weight = torch.sigmoid(lse_p - lse_s)[..., None].to(out_s.dtype)
    out_p -= out_s
    out_p *= weight
    out_p += out_s  # out_s + w (out_p - out_s), in place: one (rows, heads, s, d) buffer
    return out_p.transpose(1, 2).contiguous()


class SharedPrefix:
    """The kernel receivers of every layer for a block (one scope, many re-runs); ``cache`` builds
    a run's cache from the prefix, ``running`` marks the edited call (other calls in the block, such
    as growing the clean prefix, run on the model's attention as usual)."""

    def __init__(self, model: Any) -> None:
        why = usable(model)
        if why:
            raise AttnflowError(f"re-runs of this model cannot share their prefix: {why}")
        self.model = model
        self.layers: list[Any] | None = None
        self.active = False

    def cache(self, prefix: list[tuple[torch.Tensor, torch.Tensor]] | None) -> Any:
        """A run's cache from the clean prefix's keys and values per layer (None: a run from position 0,
        whose rows' attention runs on the fused kernel too, never on eager attention's scores)."""
        from transformers import DynamicCache

        cache = DynamicCache(config=self.model.config)
        layer = _layer_class()
        if prefix is None:
            prefix = [(None, None)] * hook_points(self.model).layers
        cache.layers = [layer(k, v) for k, v in prefix]
        self.layers = cache.layers
        return cache

    @contextmanager
    def running(self, cache: Any = None) -> Iterator[None]:
        """The edited call of a run that starts from ``cache`` (None: no prefix, nothing shared)."""
        if cache is None:
            yield
            return
        self.active = True
        try:
            # SDPA's mask for the edited call (a boolean one, where eager's is a float per query and key;
            # the kernel receivers replace the attention itself)
            with receiving(self.model, {}, attention="sdpa"):
                yield
        finally:
            self.active, self.layers = False, None

    def _receiver(self, index: int) -> Any:
        def receiver(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> Any:
            if not self.active:
                return None  # not an edited re-run: the model's own attention
            for name in ("softcap", "s_aux", "sliding_window"):
                if kwargs.get(name) is not None:
                    raise AttnflowError(f"the shared-prefix re-run cannot apply {name} (layer {index})")
            layer = self.layers[index]
            scale = kwargs.get("scaling", getattr(module, "scaling", None))
            return shared_attention(query, key, value, layer.prefix_keys, layer.prefix_values, scale), None
        return receiver

    def __enter__(self) -> SharedPrefix:
        self.active, self.layers = False, None
        names = hook_points(self.model).names("attn.kernel")
        # the block's other calls (the clean prefix grown) keep the model's attention, so that a prefix
        # grown here equals one grown elsewhere (an estimate pass's cache) bit for bit
        self._scope = receiving(self.model, {name: self._receiver(i) for i, name in enumerate(names)})
        self._scope.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._scope.__exit__(*exc)


@contextmanager
def sharing(model: Any) -> Iterator[SharedPrefix | None]:
    """A ``SharedPrefix`` for the block where ``model``'s re-runs can share their prefix, else None
    (each row copies it; ``usable`` says why)."""
    if usable(model):
        yield None
        return
    with SharedPrefix(model) as shared:
        yield shared
