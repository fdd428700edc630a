"""The model side of measuring faithfulness: what the model predicts for token-id lists (the
``predict`` callable ``attnflow.evaluation.faithfulness`` sees), how many rows fit one pass, the
ids capture ran on and the label of the explained output. ``attnflow.faithfulness`` and the
on-the-fly numbers of a report (``attnflow.api.defaults``) both use it; it explains nothing itself.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from attnflow.api.models import Loaded
from attnflow.hf.load import ModelInfo, config_task, output_cache
from attnflow.capture.text import encode, is_causal, max_length
from attnflow.errors import AttnflowError

BATCH = 32  # sequences per forward pass of the perturbed inputs

_NO_HEAD = ("faithfulness compares the scores with what the model predicts, so it needs a sequence-"
            "classification or causal language-model head")


def _refuse_without_head(info: ModelInfo) -> None:
    """From the config alone (read once, into ``info``), before any weight loads."""
    name = info.path
    if info.config.get("is_encoder_decoder"):
        raise AttnflowError(f"{name!r} is an encoder-decoder model; faithfulness covers classifiers and decoders")
    if config_task(info.config, info.model_kind) == "encoder":
        arch = (info.config.get("architectures") or ["bare encoder"])[0]
        raise AttnflowError(f"{name!r} is a {arch} checkpoint, without a prediction head; {_NO_HEAD}")


def _head(loaded: Loaded) -> str:
    """"decoder" or "classifier" (from the architecture table, see ``attnflow.api.models``), or a
    refusal for a model whose output is no prediction."""
    if loaded.family == "encoder-decoder":
        raise AttnflowError("encoder-decoder models are not covered; faithfulness covers classifiers and decoders")
    if is_causal(loaded.model) and loaded.model.get_output_embeddings() is not None:
        return "decoder"
    if loaded.head == "classification":
        return "classifier"
    raise AttnflowError(f"{type(loaded.model).__name__} has no sequence-classification or language-model head; "
                        f"{_NO_HEAD}")


# Memory one forward pass of the perturbed inputs may take (activations of the batch, not the weights):
# the batch size follows from it and the sequence length (see rows_per_pass).
MEMORY = 512 * 2**20


def default_memory(device: Any) -> int:
    """Activation memory per pass: ``MEMORY`` on the CPU; on a GPU a quarter of its free memory, at
    most 8 GiB (a GPU runs small passes no faster than large ones: their cost is the kernel launches)."""
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(min(free // 4, 8 * 2**30))
    return MEMORY


def _sizes(model: Any) -> dict[str, int]:
    config = getattr(model, "config", None)
    config = getattr(config, "text_config", None) or config

    def get(*names: str, default: int = 0) -> int:
        for name in names:
            value = getattr(config, name, None)
            if isinstance(value, int) and value > 0:
                return value
        return default

    hidden = get("hidden_size", "n_embd", "d_model", default=768)
    heads = get("num_attention_heads", "n_head", default=12)
    return {"hidden": hidden, "heads": heads, "layers": get("num_hidden_layers", "n_layer", default=12),
            "kv": get("num_key_value_heads", default=heads), "inner": get("intermediate_size", "n_inner",
                                                                           default=4 * hidden),
            "vocab": get("vocab_size", default=1)}


def rows_per_pass(model: Any, new: int, total: int | None = None, *, last_only: bool = True,
                  memory: int = MEMORY, cap: int = BATCH) -> int:
    """Sequences per forward pass so that its activations stay within ``memory`` bytes: ``new`` tokens
    run per sequence, attending over ``total`` (``new`` plus a reused prefix). Per sequence, float32:
    one layer's attention scores (and their softmax and mask copies, eager attention), its MLP
    activations, the KV cache of every layer, and the logits (one position, or every position when
    the model cannot keep only the last)."""
    size = _sizes(model)
    total = new if total is None else total
    per = 4 * (3 * size["heads"] * new * total + 4 * new * size["inner"] + 4 * new * size["hidden"]
               + 2 * size["layers"] * size["kv"] * (size["hidden"] // size["heads"]) * total
               + size["vocab"] * (1 if last_only else new))
    return max(1, min(cap, memory // max(per, 1)))


def _takes(model: Any, keyword: str) -> bool:
    import inspect

    try:
        return keyword in inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        return False


def _reused_cache_keyword(model: Any) -> str | None:
    """The keyword a model's forward takes its KV cache by (``attnflow.interventions.ablation.cache_keyword``)
    when a common prefix's cache may be reused, or None: no such keyword, or a decoder whose every layer
    does not attend over the whole prefix (a sliding window: a continued window cache need not equal the
    full pass)."""
    from attnflow.interventions.ablation import cache_keyword
    from attnflow.hf.architectures import layer_windows

    if any(w is not None for w in layer_windows(model)):
        return None
    return cache_keyword(model)


def _common_prefix(rows: list[list[int]]) -> int:
    first, last = min(rows), max(rows)  # the common prefix of a set is that of its extremes in order
    n = 0
    for a, b in zip(first, last):
        if a != b:
            break
        n += 1
    return n


def model_predict(model: Any, decoder: bool, batch_size: int | None = None, *, last_only: bool = True,
                  reuse_prefix: bool = True, memory: int | None = None) -> Callable[[list[list[int]]], np.ndarray]:
    """``predict`` for ``attnflow.evaluation.faithfulness.evaluate``: token-id lists -> logits
    ``(batch, outputs)``. Sequences of equal length run together, so no padding (and no question of
    pad tokens, position ids or left/right padding) ever enters the comparison.

    For a decoder only the last position's logits are computed (``logits_to_keep=1``: a 49k-word
    vocabulary at every position of 32 sequences of 200 tokens is 1.3 GB), and sequences that start
    alike (every deletion keeps the tokens before it) share one pass over their common prefix, whose
    KV cache the rest continue from (``reuse_prefix``; checked once against a full pass, and dropped
    if they disagree). Passes hold ``batch_size`` sequences, default as many as ``memory`` bytes of
    activations allow (``rows_per_pass``; default ``default_memory``).
    ``last_only=False, reuse_prefix=False, batch_size=32`` is the plain path (every position's logits, no cache): the baseline of ``benchmarks/faithfulness.py``."""
    device = next(model.parameters()).device
    memory = memory if memory is not None else default_memory(device)
    last_only = last_only and decoder and _takes(model, "logits_to_keep")
    keyword = _reused_cache_keyword(model) if decoder else None
    state = {"reuse": reuse_prefix and keyword is not None, "checked": False}

    def forward(x: Any, past: Any = None, offset: int = 0) -> Any:
        mask = torch.ones(x.shape[0], offset + x.shape[1], dtype=torch.long, device=device)
        kwargs: dict[str, Any] = {"logits_to_keep": 1} if last_only else {}
        if past is not None:
            kwargs.update({keyword: past, "use_cache": True})
        return model(input_ids=x, attention_mask=mask, **kwargs)

    def plain(rows: list[list[int]]) -> Any:
        logits = forward(torch.tensor(rows, dtype=torch.long, device=device)).logits
        return logits[:, -1] if decoder else logits

    def continued(rows: list[list[int]], p: int) -> Any:
        head = torch.tensor([rows[0][:p]], dtype=torch.long, device=device)
        out = model(input_ids=head, attention_mask=torch.ones_like(head), use_cache=True,
                    **({"logits_to_keep": 1} if last_only else {}))
        past = output_cache(out)
        if len(rows) > 1:  # this pass's own cache: repeated in place, once per row
            past.batch_repeat_interleave(len(rows))
        tail = torch.tensor([r[p:] for r in rows], dtype=torch.long, device=device)
        return forward(tail, past, p).logits[:, -1]

    def run(rows: list[list[int]]) -> Any:
        p = _common_prefix(rows) if state["reuse"] and len(rows) > 1 else 0  # one row: nothing to share
        p = min(p, len(rows[0]) - 1)  # at least the last token runs, to give its logits
        if p < 8:
            return plain(rows)
        got = continued(rows, p)
        if not state["checked"]:  # the cache path must give what a full pass gives, on this model
            state["checked"] = True
            full = plain(rows[:1])
            scale = float(full.abs().max()) or 1.0
            if float((got[:1] - full).abs().max()) > 1e-3 * scale:
                state["reuse"] = False
                return plain(rows)
        return got

    def predict(batch: list[list[int]]) -> np.ndarray:
        out: list[Any] = [None] * len(batch)
        by_length: dict[int, list[int]] = {}
        for i, ids in enumerate(batch):
            by_length.setdefault(len(ids), []).append(i)
        for length, rows in by_length.items():
            rows = sorted(rows, key=lambda i: batch[i])  # neighbours share the longest prefixes
            size = batch_size or rows_per_pass(model, length, last_only=last_only, memory=memory)
            for start in range(0, len(rows), size):
                chunk = rows[start:start + size]
                with torch.no_grad():
                    logits = run([batch[i] for i in chunk])
                for i, row in zip(chunk, logits.double().cpu().numpy()):
                    out[i] = row
        return np.stack(out)

    predict.batch_size = batch_size or BATCH  # type: ignore[attr-defined]  # calls evaluate() makes at a time
    predict.reuses_prefix = state["reuse"]  # type: ignore[attr-defined]
    return predict


@dataclass(frozen=True)
class PassEstimate:
    """The forward passes of one faithfulness check and their expected time, measured before they run
    (the progress bar prints it and counts it down, as for flow). rows: sequences to run (LOO, then
    AOPC's, repeats included: identical ones run once, so it ends early when layers agree); seconds:
    expected wall time, from one timed pass over the whole input scaled by the tokens the passes run."""

    rows: int
    tokens: int
    seconds: float
    one_pass: float

    def seconds_for(self, done: int) -> float:
        return self.seconds * done / max(self.rows, 1)

    def __str__(self) -> str:
        minutes = self.seconds / 60
        shown = f"{minutes:.0f} min" if minutes >= 2 else f"{self.seconds:.0f} s"
        return (f"faithfulness on {self.tokens} tokens: up to {self.rows} forward passes, about {shown} "
                f"(one pass over the whole input: {self.one_pass:.2f} s)")


def estimate(model: Any, ids: list[int], ranked: int, rows: int, fractions: Sequence[float], methods: int = 1,
             decoder: bool = True) -> PassEstimate:
    """The check's time from a cost model fitted on two timed passes over ``ids``: one sequence, and
    as many copies as a pass of the check holds (at most 8). A pass costs ``a + b * tokens``: ``a`` is
    reading every weight and launching every kernel once (what dominates a GPU, or a one-sequence pass
    on a CPU), ``b`` the work per token. The check runs ``ranked`` leave-one-out deletions (each about
    half the input, plus one pass over the shared prefix per pass, when passes continue a prefix's
    cache; else all of it) and, per method and layer (``rows`` over ``methods`` methods) and fraction,
    a comprehensiveness and a sufficiency sequence (together about one input's length), in passes as
    ``model_predict`` groups them. ``rows`` of the result counts the steps as
    ``attnflow.evaluation.faithfulness.evaluate`` reports them."""
    import math
    import time

    n = max(len(ids), 1)
    copies = max(2, min(8, rows_per_pass(model, n, memory=default_memory(next(model.parameters()).device))))
    timer = model_predict(model, decoder, copies, reuse_prefix=False)

    def timed(count: int) -> float:
        times = []
        for _ in range(2):  # the first pass of a shape pays one-off set-up (kernels, buffers): the faster counts
            started = time.perf_counter()
            timer([list(ids)] * count)
            times.append(time.perf_counter() - started)
        return min(times)

    one, many = timed(1), timed(copies)
    per_token = max(many - one, 0.0) / ((copies - 1) * n)
    per_pass = max(one - per_token * n, 0.0)
    reuse = decoder and _reused_cache_keyword(model) is not None
    size = rows_per_pass(model, n, memory=default_memory(next(model.parameters()).device))
    loo_passes = math.ceil(ranked / size) * (2 if reuse else 1)
    aopc_passes = rows * len(fractions) * 2  # per level, its sequences differ in length: one pass each at worst
    tokens = n + ranked * (n / 2 if reuse else n) + rows * len(fractions) * n
    seconds = per_pass * (1 + loo_passes + aopc_passes) + per_token * tokens
    steps = 2 + ranked + methods + 2 * rows * len(fractions)
    return PassEstimate(rows=steps, tokens=len(ids), seconds=seconds, one_pass=one)


def _input_ids(model: Any, tokenizer: Any, text: str, truncate: bool) -> list[int]:
    """The ids ``attnflow.capture.capture`` runs the model on (same tokenizer call and limit)."""
    ids = encode(tokenizer, [text])["input_ids"][0]
    limit = max_length(model, tokenizer)
    if truncate and limit is not None and len(ids) > limit:
        ids = encode(tokenizer, [text], max_length=limit)["input_ids"][0]
    return ids.tolist()


def _label(model: Any, tokenizer: Any, decoder: bool, output: int) -> str:
    if decoder:
        return tokenizer.decode([output])
    id2label = getattr(model.config, "id2label", None) or {}
    return str(id2label.get(output, output))
