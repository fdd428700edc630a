"""Slow, obvious re-implementations used as test oracles (deliberately plain loops, no shared code)."""

from __future__ import annotations

import numpy as np


def naive_augment(att: np.ndarray, residual: float = 0.5, fusion: str = "mean") -> list[np.ndarray]:
    """att: (layers, heads, n, n) -> list of (n, n) residual-augmented, row-normalised matrices."""
    layers, heads, n, _ = att.shape
    out = []
    for layer in range(layers):
        a = np.zeros((n, n))
        for q in range(n):
            for k in range(n):
                values = [att[layer, h, q, k] for h in range(heads)]
                w = {"mean": sum(values) / heads, "max": max(values), "min": min(values)}[fusion]
                a[q, k] = (1 - residual) * w + (residual if q == k else 0.0)
            total = sum(a[q])
            if total > 0:
                a[q] = a[q] / total
        out.append(a)
    return out


def naive_rollout(att: np.ndarray, residual: float = 0.5, fusion: str = "mean") -> np.ndarray:
    """R_1 = A_1, R_l = A_l @ R_{l-1}, with the matrix product written as loops."""
    mats = naive_augment(att, residual, fusion)
    n = att.shape[-1]
    r = mats[0].copy()
    result = [r]
    for a in mats[1:]:
        new = np.zeros((n, n))
        for q in range(n):
            for j in range(n):
                new[q, j] = sum(a[q, k] * r[k, j] for k in range(n))
        r = new
        result.append(r)
    return np.stack(result)


def random_attention(rng: np.random.Generator, layers: int, heads: int, n: int, causal: bool = False,
                     zeros: float = 0.0) -> np.ndarray:
    """Dirichlet rows, optionally causal and with a fraction of exact zeros (rows re-normalised)."""
    att = rng.dirichlet(np.ones(n), size=(layers, heads, n))
    if zeros:
        att = att * (rng.random(att.shape) >= zeros)
    if causal:
        att = np.tril(att)
    sums = att.sum(-1, keepdims=True)
    att = np.where(sums > 0, att / np.where(sums > 0, sums, 1), 0.0)
    return att


def naive_joint_rollout(enc: np.ndarray, dec: np.ndarray, cross: np.ndarray, residual: float = 0.5) -> np.ndarray:
    """The joint encoder-decoder rollout written as loops, head mean only: ``D_l[t, :] =
    (1-r) sum_j C_l[t, j] E[j, :] + r sum_u A_l[t, u] D_{l-1}[u, :]`` over S source + T decoder columns."""
    s, t = enc.shape[-1], dec.shape[-1]
    e = np.eye(s)
    for a in naive_augment(enc, residual):  # encoder rollout, R_k = A_k R_{k-1}
        e = np.array([[sum(a[q, k] * e[k, j] for k in range(s)) for j in range(s)] for q in range(s)])
    d = np.zeros((t, s + t))
    for u in range(t):
        d[u, s + u] = 1.0
    out = []
    for layer, a in enumerate(naive_augment(dec, residual)):
        c = cross[layer].mean(axis=0)
        new = np.zeros((t, s + t))
        for q in range(t):
            total = sum(c[q])
            for j in range(s):
                new[q, :s] += (1 - residual) * (c[q, j] / total) * e[j]
            for u in range(t):
                new[q] += residual * a[q, u] * d[u]
        d = new
        out.append(d)
    return np.stack(out)


def edited_logit_drop(model, path: str, columns, ids, target: int, token: int, positions, scale: float = 0.0,
                      layers=None) -> float:
    """z_token(clean) - z_token(edited) at ``target``: two plain forward passes of ``ids[:target + 1]``
    (no cache), the edited one with the value columns (``columns(out)`` of the module at
    ``path.format(layer)``) of every position in ``positions`` multiplied by ``scale`` in ``layers``
    (None: every layer). ``scale=0`` zeroes them (value zeroing, ablated flow's edit)."""
    import torch

    positions = [p for p in positions if p <= target]

    def edit(module, args, out):
        out = out.clone()
        columns(out)[:, positions] *= scale
        return out

    seq = torch.tensor([list(ids[: target + 1])])
    with torch.no_grad():
        clean = float(model(input_ids=seq, use_cache=False).logits[0, -1, token])
        if not positions:
            return 0.0
        chosen = range(model.config.num_hidden_layers) if layers is None else layers
        handles = [model.get_submodule(path.format(l)).register_forward_hook(edit) for l in chosen]
        try:
            edited = float(model(input_ids=seq, use_cache=False).logits[0, -1, token])
        finally:
            for h in handles:
                h.remove()
    return clean - edited


FLOAT32_EPS = float(np.finfo(np.float32).eps)


def float32_softmax_atol(clean: float, n: int) -> float:
    """The tolerance between a score computed by attnflow's cached, batched re-runs and the same score
    from a plain full pass, on a float64 model whose attention takes its softmax in float32 (transformers'
    eager attention does, for every dtype: ``softmax(..., dtype=torch.float32).to(query.dtype)``).

    A softmax row over ``n`` keys summed in float32 is exact to about ``n`` float32 units in the last
    place relative to its weights; the cached re-run reduces rows of different lengths than the full
    pass (its queries are a suffix, its keys come from the cache), and the SIMD width torch picks (a
    ``ATEN_CPU_CAPABILITY`` of default, avx2 or avx512) changes the order of that sum. So the two
    logits, and so the two drops, can differ by ``n * eps32`` relative to the logit's size: about
    2.5e-6 for the tiny Llama's logits of ~15 over 25 keys under avx512, where avx2 happens to agree
    to 1e-15. Anything larger is a real difference (the drops tested are of order 1)."""
    return n * FLOAT32_EPS * max(1.0, abs(float(clean)))
