"""The lengths of the transformed value vectors, ``||f_h(x_j)||`` per head and token, for the norm
weighting (``attnflow.core.weighting``), read from the model while it runs.

``f_h(x) = (x W_V^h + b_V^h) W_O^h``: the first factor is what the attention module's value
projection outputs (a forward hook takes it, bias included, with no second computation of it); the
second is the head's slice of the output projection's weight, read once from the parameters. Which
modules those are (the ``layers.i.attn.value`` and ``layers.i.attn.out`` hook points of
``attnflow.hf.points``), and how a fused query/key/value projection lays out its output, is a row of the
architecture table (``attnflow.hf.architectures.PROJECTIONS``). Grouped-query and
multi-query models share a key/value head among ``heads / kv_heads`` consecutive query heads, as
transformers' ``repeat_kv`` does; the number of heads is read from the attention weights themselves.
The output projection's bias is added once per query, not per key, so it is no key's contribution.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from attnflow.hf.architectures import architecture, model_type
from attnflow.errors import AttnflowError
from attnflow.hf.points import hook_points
from attnflow.hf.weights import parameter


@dataclass
class Projection:
    """One attention layer's value projection (``value``, hooked) and its output projection's weight
    ``w_o`` ``(hidden, heads * head_dim)`` (``nn.Linear``'s layout: output = v @ w_o.T)."""

    value: Any
    w_o: torch.Tensor
    qkv: str | None

    def head_values(self, projected: torch.Tensor, heads: int) -> torch.Tensor:
        """``projected``: the value projection's output ``(batch, n, width)`` -> the value vectors
        ``(batch, n, kv_heads, head_dim)`` (the value part of a fused projection), as computed."""
        w_o = self.w_o
        if w_o.shape[1] % heads:
            raise AttnflowError(f"the output projection takes {w_o.shape[1]} inputs, not a multiple of {heads} heads")
        d = w_o.shape[1] // heads
        x = projected.detach()
        batch, n, width = x.shape
        if self.qkv == "interleaved":  # per head: query, key, value
            return x.reshape(batch, n, heads, 3, d)[..., 2, :]
        if self.qkv == "concat":  # queries (heads * d), keys (kv * d), values (kv * d)
            x = x[..., heads * d + (width - heads * d) // 2:]
        if x.shape[-1] % d:
            raise AttnflowError(f"value projection width {x.shape[-1]} is not a multiple of the head size {d}")
        v = x.reshape(batch, n, x.shape[-1] // d, d)
        if heads % v.shape[2]:
            raise AttnflowError(f"{heads} attention heads cannot share {v.shape[2]} key/value heads")
        return v

    def head_norms(self, projected: torch.Tensor, heads: int) -> torch.Tensor:
        """``projected``: the value projection's output ``(batch, n, width)`` -> ``(batch, heads, n)``
        float32, ``||v_j^{kv(h)} W_O^h||`` for every head ``h`` and token ``j``."""
        v = self.head_values(projected.to(dtype=torch.float32), heads)
        batch, n, kv, d = v.shape
        per_head = self.w_o.to(device=v.device, dtype=torch.float32).reshape(self.w_o.shape[0], heads, d)
        norms = torch.empty(batch, heads, n, dtype=torch.float32, device=v.device)
        for h in range(heads):  # one head at a time: (batch, n, hidden) at most, never times heads
            norms[:, h] = torch.linalg.vector_norm(v[:, :, h // (heads // kv)] @ per_head[:, h].T, dim=-1)
        return norms.cpu()


def projections(model: Any, modules: list[Any]) -> list[Projection]:
    """The ``Projection`` of each attention module (``modules`` from
    ``attnflow.capture.streaming.attention_modules``), or an ``AttnflowError`` for a model whose
    projections the architecture table does not know."""
    row = architecture(model)
    name = model_type(model) or type(model).__name__
    if row is None or row.value is None or row.output is None or row.family == "encoder-decoder":
        raise AttnflowError(f"the norm weighting needs each attention layer's value and output projections, and the "
                            f"architecture table does not name them for {name!r} models; use weighting='attention'")
    if not modules:
        raise AttnflowError(f"the norm weighting hooks the attention modules, and {name!r} models declare none "
                            "to transformers; use weighting='attention'")
    from transformers.pytorch_utils import Conv1D

    found = []
    points = hook_points(model)
    for layer in range(len(modules)):
        try:  # the layer's hook points, named from the table's paths
            value = points[f"layers.{layer}.attn.value"].module
            output = points[f"layers.{layer}.attn.out"].module
        except AttnflowError as exc:
            raise AttnflowError(f"{exc} for {name!r} models; use weighting='attention'") from None
        weight = parameter(output)  # brought in where accelerate offloads it
        # transformers' Conv1D (GPT-2) stores (in, out) and computes x @ W; nn.Linear stores (out, in).
        w_o = weight.T if isinstance(output, Conv1D) else weight
        found.append(Projection(value=value, w_o=w_o, qkv=row.qkv))
    return found
