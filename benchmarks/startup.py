"""First use and start-up: what a user waits for before the first flow, cold and warm.

    PYTHONPATH=src .venv/bin/python benchmarks/startup.py [--repeats 3] [--quick]

0. (issue 31) ``attnflow explain "the keys to the cabinet"`` (rollout, the bundled model) against plain
   transformers doing the same work in a fresh interpreter (import, load the model and tokenizer, one
   forward pass with attentions), runs alternated, the least CPU of ``--repeats`` each; goal: at
   most 1.1x. Then ``-X importtime`` of the command: which of scipy.stats, networkx, numba, dask and
   the faithfulness code it imports (goal: none), and what its imports cost by package; and
   ``attnflow --help``. ``--quick`` stops here.

Every command runs in a fresh interpreter (a child process), timed in wall time beside CPU time
(the child's, from ``resource.getrusage(RUSAGE_CHILDREN)``), with the load average:

1. ``attnflow explain "the keys to the cabinet are on the table" --method flow`` with numba's cache
   as it is (warm), with an empty cache (``NUMBA_CACHE_DIR`` pointing at an empty folder: a new
   machine that skipped the set-up), and with a cache filled by the set-up's warm-up
   (``python -m attnflow.core.flow.warmup``, what ``make setup`` runs) in a fresh folder. Goal
   (issue 25): the first command after the set-up takes at most 1.5x the warm one.
2. The warm CLI start broken down in one child: importing torch, transformers and attnflow's api,
   the first ``attnflow.explain(..., method="flow")`` (loads the bundled model), the second
   (compute only), against ``attnflow --help``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

SENTENCE = "the keys to the cabinet are on the table"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

BREAKDOWN = r"""
import json, time, resource
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
out = {}
def step(name, fn):
    w, c = time.perf_counter(), cpu()
    fn()
    out[name] = (time.perf_counter() - w, cpu() - c)
step("import torch", lambda: __import__("torch"))
step("import transformers", lambda: __import__("transformers"))
import importlib
step("import attnflow + attnflow.api.text", lambda: importlib.import_module("attnflow.api.text"))
import attnflow
import torch
torch.set_num_threads(1)
step("first explain, flow (model load + numba cache load + compute)",
     lambda: attnflow.explain(%r, method="flow"))
step("second explain, flow (compute only)", lambda: attnflow.explain(%r, method="flow"))
step("explain, rollout (compute only)", lambda: attnflow.explain(%r, method="rollout"))
print("BREAKDOWN " + json.dumps(out))
""" % (SENTENCE, SENTENCE, SENTENCE)


def load() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


def env(cache: str | None) -> dict:
    e = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "src"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
             TOKENIZERS_PARALLELISM="false")
    if cache is not None:
        e["NUMBA_CACHE_DIR"] = cache
    return e


def timed(cmd: list[str], cache: str | None = None) -> tuple[float, float, str]:
    """(wall, child CPU, stdout + stderr) of ``cmd`` in a fresh interpreter."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env(cache), cwd=ROOT)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:4])} ... failed:\n{proc.stderr[-2000:]}")
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, proc.stdout + proc.stderr


ISSUE31 = "the keys to the cabinet"
PLAIN = r"""
import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer
path = %r
tokenizer = AutoTokenizer.from_pretrained(path)
model = AutoModelForSequenceClassification.from_pretrained(path, attn_implementation="eager").eval()
with torch.no_grad():
    out = model(**tokenizer(%r, return_tensors="pt"), output_attentions=True)
print(len(out.attentions), int(out.logits.argmax()))
""" % (os.path.join(ROOT, "src", "attnflow", "models", "agreement"), ISSUE31)
FORBIDDEN = ("scipy.stats", "networkx", "numba", "dask", "attnflow.api.faithfulness",
             "attnflow.evaluation.faithfulness")


def import_costs(text: str) -> tuple[list[str], dict[str, float]]:
    """From ``-X importtime`` output: the forbidden modules imported, and the cumulative seconds of
    each top-level package (self time summed over its modules)."""
    found, by_package = set(), {}
    for line in text.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        parts = line.split("|")
        try:
            own = int(parts[0].split(":")[1])
        except ValueError:
            continue
        name = parts[2].strip()
        if name in FORBIDDEN or name.split(".")[0] in ("networkx", "numba", "dask"):
            found.add(name if name in FORBIDDEN else name.split(".")[0])
        by_package[name.split(".")[0]] = by_package.get(name.split(".")[0], 0.0) + own / 1e6
    return sorted(found), by_package


def issue31(repeats: int) -> None:
    cli = [sys.executable, "-m", "attnflow", "explain", ISSUE31]
    plain = [sys.executable, "-c", PLAIN]
    timed(cli), timed(plain)  # page caches
    runs = {"cli": [], "plain": []}
    for _ in range(repeats):  # alternated, so that a change of load hits both
        runs["cli"].append(timed(cli))
        runs["plain"].append(timed(plain))
    ours = min(runs["cli"], key=lambda r: r[1])
    theirs = min(runs["plain"], key=lambda r: r[1])
    ratio = ours[1] / theirs[1]
    print(f"attnflow explain {ISSUE31!r} (rollout): {ours[0]:6.2f} s wall, {ours[1]:6.2f} s cpu "
          f"(least cpu of {repeats})")
    print(f"plain transformers, same work:        {theirs[0]:6.2f} s wall, {theirs[1]:6.2f} s cpu; load {load()}")
    _, _, text = timed([sys.executable, "-X", "importtime", *cli[1:]])
    found, by_package = import_costs(text)
    top = sorted(by_package.items(), key=lambda kv: -kv[1])[:8]
    print("its imports by package (-X importtime, s): " + ", ".join(f"{k} {v:.2f}" for k, v in top))
    helped = min((timed([sys.executable, "-m", "attnflow", "--help"]) for _ in range(repeats)), key=lambda r: r[1])
    print(f"attnflow --help: {helped[0]:.2f} s wall, {helped[1]:.2f} s cpu")
    print(f"\ngoals (issue 31; load average now {load()}):")
    print(f"  explain (rollout) cpu <= 1.1x plain transformers: {ratio:.2f}x ({ours[1]:.2f} s vs {theirs[1]:.2f} s) -> "
          f"{'met' if ratio <= 1.1 else 'missed'}")
    verdict = "none imported -> met" if not found else f"imports {', '.join(found)} -> missed"
    print(f"  imports none of {', '.join(FORBIDDEN)}: {verdict}")
    print(f"  attnflow --help unchanged (0.34 s cpu on the quiet machine of issue 31): {helped[1]:.2f} s cpu here")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="warm runs (the best is kept)")
    parser.add_argument("--quick", action="store_true", help="only the issue-31 start-up goals")
    args = parser.parse_args()
    cli = [sys.executable, "-m", "attnflow", "explain", SENTENCE, "--method", "flow"]
    print(f"python {sys.version.split()[0]}; {os.cpu_count()} cores; load average before: {load()}", flush=True)
    issue31(args.repeats)
    if args.quick:
        return
    print()

    timed(cli)  # fills the default cache if this checkout never ran flow
    warm = min((timed(cli) for _ in range(args.repeats)), key=lambda r: r[0])
    print(f"warm CLI flow (numba cache filled):       {warm[0]:6.1f} s wall, {warm[1]:6.1f} s cpu; load {load()}",
          flush=True)
    with tempfile.TemporaryDirectory(prefix="attnflow-numba-cold-") as cold_dir:
        cold = timed(cli, cold_dir)
        notice = [line for line in cold[2].splitlines() if "compiling the flow solvers" in line]
        print(f"cold CLI flow (empty numba cache):         {cold[0]:6.1f} s wall, {cold[1]:6.1f} s cpu; load {load()}",
              flush=True)
        print(f"  its notice: {notice[0] if notice else '(none printed)'}")
    with tempfile.TemporaryDirectory(prefix="attnflow-numba-setup-") as setup_dir:
        setup = timed([sys.executable, "-m", "attnflow.core.flow.warmup"], setup_dir)
        print(f"set-up warm-up (make setup's step):        {setup[0]:6.1f} s wall, {setup[1]:6.1f} s cpu; load {load()}",
              flush=True)
        after = timed(cli, setup_dir)
        print(f"first CLI flow after the set-up:           {after[0]:6.1f} s wall, {after[1]:6.1f} s cpu; "
              f"load {load()}", flush=True)
    helped = timed([sys.executable, "-m", "attnflow", "--help"])
    print(f"attnflow --help:                           {helped[0]:6.1f} s wall, {helped[1]:6.1f} s cpu")

    _, _, text = timed([sys.executable, "-c", BREAKDOWN])
    steps = json.loads(next(line for line in text.splitlines() if line.startswith("BREAKDOWN "))[len("BREAKDOWN "):])
    print(f"\nwarm start broken down (one interpreter, in order; load {load()}):")
    for name, (wall, cpu) in steps.items():
        print(f"  {name:<62} {wall:6.2f} s wall {cpu:6.2f} s cpu")

    print(f"\ngoals (issue 25; load average now {load()}):")
    ratio, cpu_ratio = after[0] / warm[0], after[1] / warm[1]
    print(f"  first flow after the set-up <= 1.5x the warm run: {ratio:.2f}x wall ({after[0]:.1f} s vs "
          f"{warm[0]:.1f} s), {cpu_ratio:.2f}x cpu ({after[1]:.1f} s vs {warm[1]:.1f} s) -> "
          f"{'met' if ratio <= 1.5 and cpu_ratio <= 1.5 else 'met on cpu only' if cpu_ratio <= 1.5 else 'missed'}")
    print(f"  (without the set-up: {cold[0] / warm[0]:.1f}x wall, {cold[1] / warm[1]:.1f}x cpu the warm run)")
    print(f"  a user who skips the set-up sees one line saying what compiles and for how long: "
          f"{'met' if notice else 'missed'}")
    print(f"  warm CLI start <= 3 s on a quiet machine: {warm[0]:.1f} s wall here under load {load()} -> "
          f"{'met' if warm[0] <= 3 else 'missed (this machine is not quiet: see the load)'}")


if __name__ == "__main__":
    main()
