"""The one-pass estimate of ablated flow and the budgeted chooser on long inputs: peak memory and time
against one forward pass, SmolLM2-135M at 2,048 to 8,192 tokens.

    PYTHONPATH=src python benchmarks/long_one_pass.py [--sizes 2048 4096 8192] [--budgeted 2048 4096 8192]
                                                      [--explain 8192] [--threads 1]

Text: the four kinds of benchmarks/texts.py (prose, dialogue, attnflow's own code, a shopping list)
concatenated in turn and repeated until the size is reached, cut to exactly N tokens. Each size runs
in a FRESH process: the model is loaded (``attnflow.load_model("smollm2")``, eager attention, float32)
and warmed up on 64 tokens, then each step runs with the kernel's peak counter reset
(``/proc/self/clear_refs``) and ``peak GB`` is ``VmHWM`` minus the resident size just before the step:
what the step adds above the loaded model. Steps:

- ``forward``: the baseline, one forward pass as the model is loaded (eager attention, no gradients,
  logits at the last position only, no cache);
- ``forward sdpa``: the same on SDPA (:mod:`attnflow.interventions.efficient_attention`), for reference;
- ``estimate``: :func:`attnflow.interventions.attribution_patching.attribution_patching` (the last position;
  from 1,024 tokens checkpointed, attention on SDPA);
- ``estimate eager`` (``--eager`` sizes): the same pass on eager attention, as it ran before SDPA
  (checkpointed, one layer's ``(heads, n, n)`` weights at a time), and how far its scores are from the
  SDPA pass's (max |difference| over max |score|);
- ``budgeted``: :func:`attnflow.interventions.budgeted.budgeted_ablated_flow` at budget 5 (the estimate, then
  exact runs of the latest tokens and the top ones within 5 passes, batches of 16).

Times are wall and CPU seconds of the step, printed as multiples of the ``forward`` step in the same
process (torch on ``--threads`` threads, 1 by default). ``--explain N``: the end-to-end
``attnflow.explain(text, "smollm2", method="ablated-flow-estimate")`` at N tokens (the CLI's
``attnflow explain FILE --model smollm2 --method ablated-flow-estimate``), in its own process: its peak
above the loaded model, its time, and the methods it ran (a decoder explaining its last position gets
rollout and the budgeted chooser beside the estimate, unless ``paper_only``), or its error.

Results go to ``benchmarks/results/long_one_pass_smollm2.json``. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import re
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "long_one_pass_smollm2.json")


def _status(field: str) -> float:
    """A field of /proc/self/status in GB (1e9 bytes)."""
    with open("/proc/self/status") as f:
        return int(re.search(rf"{field}:\s+(\d+)", f.read()).group(1)) * 1024 / 1e9


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # resets VmHWM to the current resident size (Linux >= 4.0)


def load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def long_text(tokenizer, n: int) -> tuple[list[int], str]:
    """Exactly ``n`` token ids (and their text) of the four kinds of text in turn, repeated."""
    sys.path.insert(0, HERE)
    from texts import KINDS, text

    parts: list[str] = []
    while len(tokenizer("\n\n".join(parts))["input_ids"]) < n:
        parts.extend(text(kind) for kind in KINDS)
    ids = tokenizer("\n\n".join(parts))["input_ids"][:n]
    return ids, tokenizer.decode(ids)


def _measured(step):
    gc.collect()
    base = _status("VmRSS")
    _reset_peak()
    wall, cpu = time.perf_counter(), time.process_time()
    extra = step() or {}
    return {"peak_gb": _status("VmHWM") - base, "wall_s": time.perf_counter() - wall,
            "cpu_s": time.process_time() - cpu, **extra}


def child(job: dict) -> dict:
    """Every step at one size, in this (fresh) process."""
    import torch

    import attnflow
    from attnflow.interventions.attribution_patching import attribution_patching
    from attnflow.interventions.budgeted import budgeted_ablated_flow
    from attnflow.interventions.efficient_attention import efficient_attention
    from attnflow.hf.load import quiet_transformers

    torch.set_num_threads(job["threads"])
    quiet_transformers()
    model, tokenizer = attnflow.load_model("smollm2")
    ids, _ = long_text(tokenizer, job["n"])
    batch = torch.tensor([ids])

    def forward(sdpa: bool, ids=batch):
        def run():
            with torch.no_grad(), efficient_attention(model, sdpa):
                model(input_ids=ids, use_cache=False, logits_to_keep=1)
        return run

    forward(False, batch[:, :64])()  # warm-up: lazy imports, allocator pools
    attribution_patching(model, ids[:64])
    out: dict = {"n": len(ids), "rss_model_gb": _status("VmRSS")}
    if "forward" in job["steps"]:
        out["forward"] = _measured(forward(False))
    out["forward sdpa"] = _measured(forward(True))
    found = {}

    def estimate(sdpa):
        def run():
            found[sdpa] = attribution_patching(model, ids, sdpa=sdpa)
            return {"attention": found[sdpa].attention}
        return run

    out["estimate"] = _measured(estimate(None))
    if job["eager"]:  # the pass as it was before SDPA (checkpointed, eager attention): memory, time, agreement
        out["estimate eager"] = _measured(estimate(False))
        a, b = found[None].scores[0, 0], found[False].scores[0, 0]
        out["estimate eager"]["max_abs_diff_over_max"] = float(abs(a - b).max() / abs(b).max())
    if job["budgeted"]:
        def budgeted():
            found = budgeted_ablated_flow(model, ids, budget=5.0)
            return {"plan": found.plan, "exact": int(found.exact.sum()), "cost": float(found.cost)}
        out["budgeted"] = _measured(budgeted)
    return out


def explain_child(job: dict) -> dict:
    """The end-to-end call at one size, in this (fresh) process."""
    import torch

    import attnflow
    from attnflow.hf.load import quiet_transformers

    torch.set_num_threads(job["threads"])
    quiet_transformers()
    model, tokenizer = attnflow.load_model("smollm2")
    _, text = long_text(tokenizer, job["n"])
    attnflow.explain("a short warm-up text", model, tokenizer=tokenizer, method="ablated-flow-estimate")
    out: dict = {"n": len(tokenizer(text)["input_ids"])}
    timeline: list[tuple[float, float]] = []  # (seconds, resident GB above the loaded model), every 5 s
    stop = threading.Event()
    base = _status("VmRSS")
    started = time.perf_counter()

    def sample():
        while not stop.wait(5.0):
            timeline.append((round(time.perf_counter() - started), round(_status("VmRSS") - base, 2)))

    def run():
        try:
            result = attnflow.explain(text, model, tokenizer=tokenizer, method="ablated-flow-estimate")
        except attnflow.AttnflowError as exc:  # a refusal: one sentence
            return {"error": str(exc)}
        budgeted = (result.meta or {}).get("ablated-flow-budgeted") or {}
        return {"methods": list(result.methods), "budgeted_exact": sum(budgeted.get("exact", [])),
                "budgeted_cost": budgeted.get("cost")}

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    out.update(_measured(run))
    stop.set()
    out["timeline"] = timeline
    return out


def run_child(job: dict) -> dict:
    sys.path.insert(0, HERE)
    from memory import run_child as fresh_process  # noqa: E402

    return fresh_process(job, __file__)


STEPS = ("forward", "forward sdpa", "estimate", "estimate eager", "budgeted")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="*", type=int, default=[2048, 4096, 8192])
    parser.add_argument("--budgeted", nargs="*", type=int, default=[2048, 4096, 8192],
                        help="the sizes at which the budgeted chooser runs too")
    parser.add_argument("--eager", nargs="*", type=int, default=[1024, 2048],
                        help="the sizes at which the estimate also runs on eager attention (as before SDPA)")
    parser.add_argument("--explain", nargs="*", type=int, default=[8192])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--steps", nargs="*", default=["forward"],
                        help="'forward' (default): with the eager forward pass; without it (a loaded box: 8,192 tokens "
                             "take minutes per pass) times are multiples of the SDPA forward pass")
    parser.add_argument("--out", default=RESULTS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        with open(args.child) as f:
            job = json.load(f)
        print(json.dumps(explain_child(job) if job.get("explain") else child(job)))
        return
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    print(f"SmolLM2-135M, torch threads: {args.threads}; machine memory {memory:.1f} GiB; "
          f"load average before (1/5/15 min): {load()}")
    print("peak GB = resident memory above the loaded model (VmHWM after a reset), each size in its own process; "
          "x forward = the step's time over one eager forward pass in the same process\n", flush=True)
    header = f"{'tokens':>6} {'step':<14} {'peak GB':>8} {'wall s':>8} {'x forward':>9} {'cpu x fwd':>9}  notes"
    print(header)
    print("-" * len(header))
    results: dict = {"model": "smollm2", "threads": args.threads, "load_before": load(), "sizes": {}}
    for n in args.sizes:
        got = run_child({"n": n, "threads": args.threads, "budgeted": n in args.budgeted, "eager": n in args.eager,
                         "steps": args.steps})
        got["load_after"] = load()
        results["sizes"][str(n)] = got
        if "forward sdpa" not in got:
            print(f"{n:>6} failed: {got.get('error')}", flush=True)
            continue
        base = got.get("forward") or got["forward sdpa"]
        for step in STEPS:
            if step not in got:
                continue
            s = got[step]
            notes = ", ".join(f"{k} {v}" for k, v in s.items() if k not in ("peak_gb", "wall_s", "cpu_s"))
            print(f"{got['n']:>6} {step:<14} {s['peak_gb']:>8.2f} {s['wall_s']:>8.1f} "
                  f"{s['wall_s'] / base['wall_s']:>9.2f} {s['cpu_s'] / base['cpu_s']:>9.2f}  {notes}", flush=True)
        print(f"{'':>6} (load average after: {got['load_after']})", flush=True)
    for n in args.explain:
        got = run_child({"n": n, "threads": args.threads, "explain": True})
        got["load_after"] = load()
        results[f"explain {n}"] = got
        what = got.get("error") or (f"methods {got.get('methods')}; the budgeted chooser re-scored "
                                    f"{got.get('budgeted_exact')} tokens exactly at {got.get('budgeted_cost')} passes")
        peak = f"{got['peak_gb']:.2f} GB" if "peak_gb" in got else "-"
        wall = f"{got['wall_s']:.0f} s" if "wall_s" in got else "-"
        print(f"\nattnflow.explain(..., method='ablated-flow-estimate') at {got.get('n', n)} tokens: peak {peak} above "
              f"the loaded model, {wall}; {what} (load average after: {got['load_after']})", flush=True)
        if got.get("timeline"):
            print("  resident GB above the model over time (s: GB): "
                  + ", ".join(f"{t}: {g}" for t, g in got["timeline"][::max(1, len(got["timeline"]) // 40)]))
    results["load_after"] = load()
    print(f"\nload average after: {results['load_after']}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    import fcntl

    with open(args.out, "a+") as f:  # runs of some sizes only (or two at once) add to what is there
        fcntl.flock(f, fcntl.LOCK_EX)
        f.seek(0)
        try:
            kept = json.loads(f.read() or "{}")
        except ValueError:
            kept = {}
        kept.update({k: v for k, v in results.items() if k != "sizes"})
        kept.setdefault("sizes", {}).update(results["sizes"])
        f.seek(0)
        f.truncate()
        json.dump(kept, f, indent=1)
    print(f"results: {os.path.relpath(args.out)}")


if __name__ == "__main__":
    main()
