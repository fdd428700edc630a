"""`attnflow explain` (rollout, the default model) imports only what that command needs (issue 31).

The command runs in a fresh interpreter; afterwards the test reads which of the heavy or unrelated
modules are in ``sys.modules``. A second run imports one of them eagerly first, to show the check
sees an eager import (a check that cannot fail is no check).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
# heavy or unrelated to a rollout explain: statistics, the flow oracle, the flow compiler, batch
# workers, and the faithfulness code (api and evaluation)
FORBIDDEN = ("scipy.stats", "networkx", "numba", "dask", "attnflow.api.faithfulness",
             "attnflow.evaluation.faithfulness")

HARNESS = r"""
import importlib, json, runpy, sys
for name in sys.argv[2:]:
    importlib.import_module(name)  # an eager import, to prove the check can fail
sys.argv = ["attnflow", "explain", "the keys to the cabinet"]
try:
    runpy.run_module("attnflow", run_name="__main__", alter_sys=True)
except SystemExit as stop:
    if stop.code:
        raise
print("MODULES " + json.dumps(sorted(m for m in sys.modules if m in json.loads(sys.argv_forbidden))))
"""


def imported_after_explain(*eager: str) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               TOKENIZERS_PARALLELISM="false")
    code = HARNESS.replace("sys.argv_forbidden", repr(json.dumps(FORBIDDEN)))
    proc = subprocess.run([sys.executable, "-c", code, "-", *eager], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("MODULES "))
    assert "the" in proc.stdout  # the command really ran and printed its table
    return json.loads(line[len("MODULES "):])


def test_rollout_explain_imports_none_of_the_heavy_modules() -> None:
    assert imported_after_explain() == []


@pytest.mark.parametrize("eager", ["attnflow.api.faithfulness"])
def test_the_check_sees_an_eager_import(eager: str) -> None:
    # api.faithfulness pulls the evaluation code with it, as api.honest's top-level import did
    found = imported_after_explain(eager)
    assert eager in found and "attnflow.evaluation.faithfulness" in found


def test_numpy_rankdata_equals_scipy() -> None:
    # the numpy ranks that replaced scipy.stats.rankdata in the table's position note
    from hypothesis import given, settings
    from hypothesis import strategies as st
    from hypothesis.extra import numpy as hnp
    from scipy.stats import rankdata as scipy_ranks

    from attnflow.evaluation.correlation import rankdata

    # ties, NaN (a slice holding one is all NaN), empty axes; every slice of a stack is ranked at once
    values = st.sampled_from([0.0, 1.0, 2.5, -1.0, 3.0, np.nan])

    @settings(max_examples=120, deadline=None)
    @given(hnp.arrays(float, hnp.array_shapes(min_dims=1, max_dims=3, min_side=0, max_side=6), elements=values),
           st.sampled_from(["average", "dense"]))
    def check(x, method):
        for axis in range(-x.ndim, 0):
            np.testing.assert_array_equal(rankdata(x, axis=axis, method=method),
                                          scipy_ranks(x, axis=axis, method=method))

    check()


HELP = r"""
import importlib, runpy, sys
for name in sys.argv[1:]:
    importlib.import_module(name)  # an eager import, to prove the check can fail
sys.argv = ["attnflow", "--help"]
try:
    runpy.run_module("attnflow", run_name="__main__", alter_sys=True)
except SystemExit as stop:
    if stop.code:
        raise
print("HEAVY " + " ".join(sorted(m for m in ("numpy", "torch", "transformers", "matplotlib") if m in sys.modules)))
"""


def heavy_after_help(*eager: str) -> list[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT / "src"))
    proc = subprocess.run([sys.executable, "-c", HELP, *eager], capture_output=True, text=True, env=env, cwd=ROOT,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "explain" in proc.stdout  # the help really printed its commands
    line = next(x for x in proc.stdout.splitlines() if x.startswith("HEAVY"))
    return line.split()[1:]


def test_help_imports_no_numpy_torch_or_matplotlib() -> None:
    # `attnflow --help` reads the command table only; the results package's names load on first use
    assert heavy_after_help() == []
    assert heavy_after_help("attnflow.results.attribution") == ["numpy"]  # the check sees an eager import
