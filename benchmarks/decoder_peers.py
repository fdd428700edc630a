"""Ablated flow through a generation vs what users run instead: inseq 0.7.1's value_zeroing.

    nice -n 10 env PYTHONPATH=src python benchmarks/decoder_peers.py [--new 20] [--inseq /work/venvs/inseq/bin/python]

SmolLM2-135M on the CPU, one torch thread in every process, greedy decoding of ``--new`` tokens
(EOS held off with ``min_new_tokens``, so every run decodes the same number) after a short prompt
(9 tokens) and a long one (213 tokens). Per prompt, in one run:

- **plain generate**: ``model.generate`` alone, the baseline, measured in this process (transformers
  5.x) and again in inseq's process (transformers 4.53.3), so each method's ratio is against the
  plain generate of its own interpreter;
- **attnflow.generate(method=["rollout", "ablated-flow"])**: what a user runs: the generation with
  rollout tracked and ablated flow (value zeroing of each source token in every layer at once, logit
  readout) for every generated token, reusing the generation's key/value cache and logits;
- **generate + ablated_flow**: for reference, plain generate then
  ``attnflow.interventions.ablation.ablated_flow`` on the generated sequence from scratch (no reuse);
- **inseq value_zeroing**: ``inseq.load_model(model, "value_zeroing").attribute(prompt,
  generation_args=...)`` in a separate interpreter (``/work/venvs/inseq``, see
  benchmarks/peers/inseq_value_zeroing.py), which also decodes the tokens itself.

Both score every generated token against every earlier token (prompt and generated). CPU seconds
are ``time.process_time`` around the measured call (the child reports its own); the child's whole
CPU (interpreter start, imports, model load included) is read with ``getrusage(RUSAGE_CHILDREN)``
and shown beside it. Wall seconds beside CPU; the load average with every row (the box is shared).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

import attnflow
from attnflow.interventions.ablation import ablated_flow
from attnflow.hf.pypi_models import smollm2_path

SHORT = "My name is Putin, I am from the"
LONG = ("The old lighthouse stood at the northern end of the island, where the cliffs fell straight into the "
        "grey water. For more than a century its keepers had lived in the small stone house beside it, "
        "climbing the spiral stairs every evening to light the lamp and every morning to put it out. The last "
        "keeper, a quiet woman named Ingrid, had taken the post after her father retired. She kept a logbook "
        "in which she wrote the weather, the ships that passed, and the birds that rested on the gallery "
        "during storms. When the lamp was automated, the authorities asked her to leave, but she refused, "
        "saying that a machine could light a lamp but could not watch the sea. For three years she stayed on "
        "without pay, repairing the roof with her own hands and rowing to the mainland once a month for flour "
        "and oil. The villagers brought her letters and newspapers, and children came in summer to hear her "
        "stories about the wrecks she had seen. One winter night a fishing boat lost its engine near the "
        "rocks, and it was Ingrid, not the machine, who saw its small light and called the rescue team. After "
        "that night nobody asked her to leave again, and when she finally died, the island was named after")
LONG_TOKENS = 213


def prompt_ids(tokenizer, text: str, length: int | None) -> list[int]:
    """The prompt's ids, cut to ``length`` where the cut survives decode + encode (inseq takes text)."""
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    if length is None:
        return ids
    for cut in range(length, len(ids) + 1):
        if tokenizer(tokenizer.decode(ids[:cut]), add_special_tokens=False)["input_ids"] == ids[:cut]:
            return ids[:cut]
    raise SystemExit(f"the long prompt has only {len(ids)} tokens; {length} asked")


def timed(fn):
    cpu, wall = time.process_time(), time.perf_counter()
    out = fn()
    return out, time.process_time() - cpu, time.perf_counter() - wall


def load() -> str:
    a, b, c = os.getloadavg()
    return f"{a:.2f} {b:.2f} {c:.2f}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--new", type=int, default=20)
    parser.add_argument("--inseq", default="/work/venvs/inseq/bin/python", help="the inseq venv's python")
    parser.add_argument("--json", default=None)
    parser.add_argument("--prompts", default="short,long", help="which prompts: short, long or both")
    parser.add_argument("--no-inseq", action="store_true", help="attnflow and plain generate only")
    args = parser.parse_args()
    torch.set_num_threads(1)
    model, tokenizer = attnflow.load_model("smollm2")
    child = Path(__file__).resolve().parent / "peers" / "inseq_value_zeroing.py"
    rows = []
    for name, text, length in (("short", SHORT, None), ("long", LONG, LONG_TOKENS)):
        if name not in args.prompts.split(","):
            continue
        ids = prompt_ids(tokenizer, text, length)
        m = len(ids)
        x = torch.tensor([ids])
        gen_args = {"max_new_tokens": args.new, "min_new_tokens": args.new, "do_sample": False}
        with torch.no_grad():
            model.generate(x, attention_mask=torch.ones_like(x), **gen_args)  # warm-up: first-call costs
            out, plain_cpu, plain_wall = timed(lambda: model.generate(x, attention_mask=torch.ones_like(x), **gen_args))
        generated = out[0, m:].tolist()
        full = out[0, :-1]
        targets = list(range(m - 1, m - 1 + args.new))
        found, abl_cpu, abl_wall = timed(lambda: ablated_flow(model, full, targets, layers="all", readout="logit",
                                                             tokens=generated))
        assert found.scores.shape == (args.new, 1, len(full))
        text_prompt = tokenizer.decode(ids)
        result, api_cpu, api_wall = timed(lambda: attnflow.generate(model, tokenizer, text_prompt, args.new,
                                                                    method=["rollout", "ablated-flow"],
                                                                    min_new_tokens=args.new))
        same_api = list(result.meta["generated_ids"]) == generated
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        command = [args.inseq, str(child), str(smollm2_path()), json.dumps(ids), str(args.new)]
        proc = subprocess.run(["true"] if args.no_inseq else command, capture_output=True, text=True,
                              env={**os.environ, "OMP_NUM_THREADS": "1"})
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        child_cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
        child_wall = time.perf_counter() - started
        row = {"prompt": name, "prompt_tokens": m, "new": args.new, "plain_cpu": plain_cpu, "plain_wall": plain_wall,
               "ablated_cpu": abl_cpu, "ablated_wall": abl_wall, "api_cpu": api_cpu, "api_wall": api_wall,
               "api_same_tokens": same_api, "child_cpu": child_cpu, "child_wall": child_wall,
               "load": load()}
        if args.no_inseq:
            row["inseq_error"] = "not run (--no-inseq)"
        elif proc.returncode != 0:
            row["inseq_error"] = (proc.stderr.strip().splitlines() or ["(no message)"])[-1]
        else:
            peer = json.loads(proc.stdout.strip().splitlines()[-1])
            row.update({f"peer_{k}": v for k, v in peer.items()})
            row["same_tokens"] = peer["generated"] == generated and peer["inseq_generated"] == generated
        rows.append(row)
        print(json.dumps({k: v for k, v in row.items() if not k.endswith("generated")}), flush=True)
    print()
    print(f"SmolLM2-135M, 1 torch thread per process, {args.new} new tokens, greedy; CPU s (wall s); load average "
          "after each prompt")
    print("| prompt | plain generate (attnflow's process) | attnflow.generate(ablated-flow) | ratio to plain "
          "| generate + ablated_flow, no reuse | ratio to plain "
          "| plain generate (inseq's process) | inseq value_zeroing | ratio to plain | inseq child, all CPU "
          "| inseq / attnflow.generate (CPU) | same tokens | load |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        ours, ref = r["api_cpu"], r["plain_cpu"] + r["ablated_cpu"]
        head = (f"| {r['prompt']} ({r['prompt_tokens']}) | {r['plain_cpu']:.2f} ({r['plain_wall']:.2f}) | {ours:.2f} "
                f"({r['api_wall']:.2f}) | {ours / r['plain_cpu']:.1f}x | {ref:.2f} ({r['plain_wall'] + r['ablated_wall']:.2f}) "
                f"| {ref / r['plain_cpu']:.1f}x ")
        if "inseq_error" in r:
            print(f"{head}| – | inseq failed: {r['inseq_error']} | – | {r['child_cpu']:.1f} | – | – | {r['load']} |")
            continue
        print(f"{head}| {r['peer_plain_cpu']:.2f} ({r['peer_plain_wall']:.2f}) "
              f"| {r['peer_inseq_cpu']:.2f} ({r['peer_inseq_wall']:.2f}) | {r['peer_inseq_cpu'] / r['peer_plain_cpu']:.1f}x "
              f"| {r['child_cpu']:.1f} | {r['peer_inseq_cpu'] / ours:.1f}x | {r['same_tokens'] and r['api_same_tokens']} | {r['load']} |")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    sys.exit(0)


if __name__ == "__main__":
    main()
