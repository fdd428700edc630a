"""The oracle comparisons under every CPU kernel set torch can pick (issue 45): torch chooses its SIMD
kernels (``ATEN_CPU_CAPABILITY``: default, avx2, avx512) from the CPU it runs on, and the order of a
float32 sum changes with the SIMD width, so a tolerance that holds on the CI machine's kernels can fail
on a user's. Each kernel set other than the one this process already runs under re-runs the files whose
tests compare attnflow with an independent oracle, in a fresh process (the kernels are chosen at start)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

HERE = Path(__file__).parent
# the files whose tests compare a fast path (cached, batched re-runs; one-pass estimates; rollout
# products) with a plain oracle: where a kernel set's summation order shows first
ORACLE_FILES = ("test_spans.py", "test_budgeted.py", "test_ablation.py", "test_attribution_patching.py",
                "test_rollout.py")
CPU_FLAGS = {"avx2": "avx2", "avx512": "avx512f"}  # the /proc/cpuinfo flag each kernel set needs


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text(encoding="utf-8")
    except OSError:
        return set()
    return {flag for line in text.splitlines() if line.startswith("flags") for flag in line.split(":", 1)[1].split()}


@pytest.mark.parametrize("capability", ["default", "avx2", "avx512"])
def test_the_oracle_comparisons_pass_under_every_kernel_set(capability):
    flag = CPU_FLAGS.get(capability)
    if flag is not None and flag not in _cpu_flags():
        pytest.skip(f"this CPU has no {flag} (/proc/cpuinfo), so torch cannot run its {capability} kernels here")
    if torch.backends.cpu.get_cpu_capability().lower() == capability:
        pytest.skip(f"this process runs torch's {capability} kernels already: the files run in this suite as they are")
    env = {**os.environ, "ATEN_CPU_CAPABILITY": capability, "PYTHONPATH": os.pathsep.join(
        p for p in (str(HERE.parent / "src"), str(HERE.parent), os.environ.get("PYTHONPATH")) if p)}
    picked = subprocess.run([sys.executable, "-c", "import torch; print(torch.backends.cpu.get_cpu_capability())"],
                            env=env, capture_output=True, text=True, check=True).stdout.strip()
    assert picked.lower() == capability  # torch honours the request (else the run below proves nothing)
    run = subprocess.run([sys.executable, "-m", "pytest", "-q", "-x", "-p", "no:cacheprovider",
                          *(str(HERE / f) for f in ORACLE_FILES)], env=env, capture_output=True, text=True,
                         cwd=HERE.parent)
    assert run.returncode == 0, f"under ATEN_CPU_CAPABILITY={capability}:\n{run.stdout[-4000:]}{run.stderr[-2000:]}"
