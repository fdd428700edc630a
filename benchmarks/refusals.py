"""How long ``attnflow batch`` takes to refuse settings that could never work (issue 24: 8-10 s before,
because torch, transformers and pyarrow were imported before anything was checked).

    python benchmarks/refusals.py [--repeat 3]

Each case runs the command line as a user would (a fresh interpreter), ``--repeat`` times; printed:
the median wall time and CPU time (user + system, of the child, RUSAGE_CHILDREN), the exit status,
whether anything was left in the working folder, and, as the baseline measured in the same run,
``attnflow --help`` (an interpreter start and the CLI's import, nothing else). The load average is
printed with every line: on a shared machine wall time follows it, CPU time much less.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _config(folder: Path, config: dict) -> str:
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="attnflow-refusals-"))
    inputs, work = root / "inputs", root / "work"
    work.mkdir()
    inputs.mkdir()
    data = inputs / "data.jsonl"
    data.write_text('{"text": "the keys to the cabinet"}\n')
    (inputs / "notes.json").write_text('{"hello": 1}')
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    batch = [sys.executable, "-m", "attnflow", "batch", str(data), "--out", "run"]
    cases = {
        "--help (baseline)": [sys.executable, "-m", "attnflow", "--help"],
        "--residual 2": [*batch, "--residual", "2"],
        "--weighting norm, Falcon config": [*batch, "--weighting", "norm", "--model", _config(
            inputs / "falcon", {"model_type": "falcon", "architectures": ["FalconForCausalLM"]})],
        "encoder-decoder (T5 config)": [*batch, "--model", _config(inputs / "t5", {"model_type": "t5",
                                                                                   "is_encoder_decoder": True})],
        "refused family (Mamba config)": [*batch, "--model", _config(
            inputs / "mamba", {"model_type": "mamba", "architectures": ["MambaForCausalLM"]})],
        "--device cuda (CPU-only torch)": [*batch, "--device", "cuda"],
        "--scheduler, nothing listening": [*batch, "--scheduler", f"tcp://127.0.0.1:{port}"],
        "--scheduler FILE, not one": [*batch, "--scheduler", str(inputs / "notes.json")],
    }
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    print(f"{'case':34} {'wall s':>7} {'CPU s':>6}  exit  left behind  load average", flush=True)
    for name, command in cases.items():
        walls, cpus, codes, left = [], [], set(), set()
        for _ in range(args.repeat):
            before = resource.getrusage(resource.RUSAGE_CHILDREN)
            started = time.perf_counter()
            done = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True)
            walls.append(time.perf_counter() - started)
            after = resource.getrusage(resource.RUSAGE_CHILDREN)
            cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
            codes.add(done.returncode)
            left.update(p.name for p in work.iterdir())
        load = tuple(round(x, 2) for x in os.getloadavg())
        print(f"{name:34} {statistics.median(walls):7.2f} {statistics.median(cpus):6.2f}  {sorted(codes)}  "
              f"{sorted(left) or 'nothing':11}  {load}", flush=True)


if __name__ == "__main__":
    main()
