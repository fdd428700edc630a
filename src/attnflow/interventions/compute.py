"""What a pass through a decoder computes, counted from the model's shapes: the unit of the budgeted
chooser (``attnflow.interventions.budgeted``), so that a stated budget is the compute the call runs.

Counted in multiply-accumulates (MACs) of the matrix products, which are nearly all of a pass:

- per position run, every weight matrix of the decoder layers once (``linear``: the layers' parameters
  of two or more dimensions; a mixture of experts' experts scaled by the share that a token runs);
- per (query, key) pair a query attends to, ``2 * heads * head_dim`` per layer (the scores and the
  weighted sum of values), a sliding-window layer's keys capped at its window (``pair`` per layer);
- per position whose logits are computed, ``hidden * vocab`` (``logits``).

Norms, the position encoding, softmax and activations (element-wise) are left out: a few percent.

What the MACs leave out and a CPU does not: **a fixed price per call** (``call``). A re-run that runs a
few positions reads every weight matrix once for little arithmetic (a matrix-vector product is bound by
memory, not multiplies), and attnflow's own per-call work (installing the edit and the shared prefix's
receivers, copying the rows' logits out) does not shrink with the positions. Measured on SmolLM2-135M
(float32, one CPU thread, ``benchmarks/budget.py``'s prompt of 200 tokens), an exact re-run batch took
17-56 positions' worth of the linear layers more than its MACs (median about 30: one row of one
position cost 0.155 forward passes of the prompt where its MACs are 0.006), whatever its rows and
positions; ``CALL_POSITIONS`` prices each call at that many positions' linear work. It is a
measurement of one machine, not of every device: where a call's fixed cost is larger (an accelerator's
kernel launches), the count is low for short re-runs; at 2,000 tokens it is a hundredth of a pass.
**The unit is one forward pass of the input as a language model runs it to predict the next token**:
every position, the last one's logits (``model(input_ids, logits_to_keep=1)``, as a generation's first
pass and attnflow's capture pass run it). Every position's logits would add ``n * hidden * vocab``, a
fifth of SmolLM2-135M's pass at 200 tokens in one large product that runs faster per multiply-accumulate
than the layers' small ones: a unit counting them would make the layers' work look cheaper than it is.
A backward pass to the activations alone (the estimate's: no weight gradients) runs the linear products
once more and attention's twice (the gradients of the scores and of the values), two and a half times on
SDPA, whose fused kernels recompute the scores; checkpointing adds the forward pass again. A pass's MACs
are the same whatever kernel runs them; its *time* is not: eager attention materialises the
``(heads, n, n)`` weights (at 2,000 tokens a forward pass of SmolLM2-135M on eager attention takes about
twice as long as on SDPA, where these counts and the time agree), so the unit is a forward pass on SDPA,
where attnflow's own passes run on long inputs.

API::

    shapes = Shapes.of(model)
    shapes.run(start, stop, rows=1, logits=0)   # MACs of rows x positions [start, stop), causal keys [0, p]
    shapes.forward(n)                           # the unit: a forward pass of n positions, the last one's logits
    shapes.backward(n, sdpa=False)              # the estimate's backward pass over n positions
    shapes.call                                 # the fixed price of one call that runs the model (a batch)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from attnflow.hf.architectures import layer_windows
from attnflow.hf.points import hook_points

CALL_POSITIONS = 30  # one call's fixed price, in positions' linear work (see the module docstring)


def _causal_keys(start: int, stop: int, window: int | None) -> float:
    """Keys attended to by queries ``p`` in ``[start, stop)``: ``min(p + 1, window)`` each."""
    if stop <= start:
        return 0.0
    if window is None or window >= stop:
        return (stop * (stop + 1) - start * (start + 1)) / 2
    full_to = max(start, min(stop, window))  # queries below window - 1 see p + 1 keys
    return (full_to * (full_to + 1) - start * (start + 1)) / 2 + (stop - full_to) * window


@dataclass(frozen=True)
class Shapes:
    """MACs per position (``linear``), per attended key per layer (``pair``, with ``windows``), per
    position's logits (``logits``) and the fixed price of a call that runs the model (``call``, in MACs:
    ``CALL_POSITIONS`` positions' linear work); see the module docstring."""

    linear: float
    pair: tuple[float, ...]
    windows: tuple[int | None, ...]
    logits: float
    call: float = 0.0

    @classmethod
    def of(cls, model: Any) -> Shapes:
        config = getattr(model.config, "text_config", None) or model.config
        points = hook_points(model)
        experts = getattr(config, "num_experts_per_tok", None)
        total = getattr(config, "num_local_experts", None) or getattr(config, "num_experts", None)
        share = experts / total if isinstance(experts, int) and isinstance(total, int) and total > 0 else 1.0
        linear = 0.0
        for name in points.names("block"):
            for module in points[name].modules:
                for pname, p in module.named_parameters():
                    if p.dim() >= 2:
                        linear += p.numel() * (share if "experts" in pname else 1.0)
        heads = int(config.num_attention_heads)
        hidden = int(config.hidden_size)
        head_dim = int(getattr(config, "head_dim", None) or hidden // heads)
        windows = tuple(layer_windows(model))
        out = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
        vocab = int(out.weight.shape[0]) if out is not None else int(config.vocab_size)
        return cls(linear=linear, pair=(2.0 * heads * head_dim,) * points.layers,
                   windows=windows if len(windows) == points.layers else (None,) * points.layers,
                   logits=float(hidden * vocab), call=CALL_POSITIONS * linear)

    def run(self, start: int, stop: int, rows: int = 1, logits: int = 0) -> float:
        """``rows`` runs of positions ``[start, stop)`` (the keys before ``start`` from a cache), with
        ``logits`` positions' logits each."""
        attention = sum(pair * _causal_keys(start, stop, w) for pair, w in zip(self.pair, self.windows))
        return rows * (max(stop - start, 0) * self.linear + attention + logits * self.logits)

    def attention(self, n: int) -> float:
        return sum(pair * _causal_keys(0, n, w) for pair, w in zip(self.pair, self.windows))

    def forward(self, n: int) -> float:
        """One forward pass of ``n`` positions with the last position's logits: the unit."""
        return self.run(0, n, logits=1)

    def backward(self, n: int, sdpa: bool = False, logits: int = 1) -> float:
        """A backward pass to the activations over ``n`` positions from ``logits`` positions' logits."""
        return n * self.linear + (2.5 if sdpa else 2.0) * self.attention(n) + logits * self.logits
