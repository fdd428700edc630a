"""Flow on long inputs: the up-front estimate, per-layer progress, the cancellable worker thread
(same numbers as on the caller's thread), the warning, and Ctrl-C that stops a long run and leaves
no file behind.

No timing is asserted: the estimate is checked for what it reports and how it is made, cancelling
by what is left undone when it returns, and the interrupted runs only for their exit and what they
leave (the latency is measured in benchmarks/long_flow.py and reported in docs/long-inputs.md).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import pytest
import torch
from oracles import random_attention

import attnflow
from attnflow.api import flowrun
from attnflow.core.flow import SOLVERS, FlowCancelled, FlowJob, certified, engine, oracle
from attnflow.core.flow import estimate as estimates
from attnflow.core.flow.estimate import FlowEstimate, format_duration, subgraph
from attnflow.errors import LongFlowWarning

torch.set_num_threads(1)
SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


class Recorder:
    def __init__(self):
        self.calls: list[tuple[int, int]] = []
        self.estimates: list[FlowEstimate] = []

    def __call__(self, done: int, total: int) -> None:
        self.calls.append((done, total))

    def estimate(self, found: FlowEstimate) -> None:
        assert not self.calls, "the estimate comes before any row is solved"
        self.estimates.append(found)


def test_subgraph_keeps_causality_and_stochastic_rows():
    a = np.tril(np.random.default_rng(0).random((3, 50, 50)))
    sub, q = subgraph(a, 16, 37)
    assert sub.shape == (3, 16, 16) and (np.triu(sub, 1) == 0).all()
    np.testing.assert_allclose(sub.sum(-1), 1.0)
    assert q < 16 and np.isclose(sub[0, q].sum(), 1.0)


def test_format_duration():
    assert [format_duration(s) for s in (0.42, 42, 312, 3 * 3600 + 6 * 60, 5 * 86400, 3 * 365.25 * 86400)] == \
        ["0.4 s", "42 s", "5.2 min", "3.1 h", "5.0 days", "3.0 years"]


def test_calibrated_estimate_counts_the_work_and_says_how(monkeypatch):
    monkeypatch.setattr(estimates, "CALIBRATE_ABOVE", 0.0)  # always measure
    rng = np.random.default_rng(1)
    a = np.stack([0.5 * w + 0.5 * np.eye(200) for w in rng.dirichlet(np.ones(200), size=(4, 200)).transpose(0, 1, 2)])
    found = estimates.estimate(engine.solve, a, [0, 1, 2, 3], [5, 9], graphs=3)
    assert (found.rows, found.tokens, found.max_flows) == (4 * 2 * 3, 200, 4 * 2 * 3 * 200)
    assert "timed on" in found.how and "of the 200 tokens" in found.how and found.seconds > 0
    assert "24 rows x 200 tokens = 4,800 max-flows, estimated" in str(found)
    small = estimates.estimate(engine.solve, a[:, :40, :40] / a[:, :40, :40].sum(-1, keepdims=True), [3], [0])
    assert small.how == "3 rows timed" or small.how == "1 rows timed" or small.how.endswith("rows timed")


def test_the_estimate_times_six_layers_of_three_inner_positions(monkeypatch):
    # A row's cost is not monotone in its layer and differs between positions: a full map's
    # estimate from three layers of the middle position was up to 2x short (issue 31).
    monkeypatch.setattr(estimates, "CALIBRATE_ABOVE", 0.0)
    rng = np.random.default_rng(4)
    n = 40
    a = np.stack([0.5 * w + 0.5 * np.eye(n) for w in rng.dirichlet(np.full(n, 0.3), size=(12, n))])
    seen = []

    def solve(a, layers, positions, progress=None, cancel=None):
        seen.append((a.shape[-1], int(layers[0]), int(positions[0])))
        return engine.solve(a, layers, positions)

    found = estimates.estimate(solve, a, list(range(12)), list(range(n)))
    own_size = [(layer, q) for size, layer, q in seen if size == n]
    assert sorted(own_size) == sorted((layer, q) for layer in (0, 2, 4, 7, 9, 11) for q in (10, 20, 29))
    assert found.how == "18 rows timed" and len(found.layer_seconds) == 12 and found.positions == n
    one = estimates.estimate(solve, a, [3, 5], [7])  # one position, two layers: both timed
    assert one.how == "2 rows timed"


def test_the_longest_row_is_the_slowest_position_not_the_mean(monkeypatch):
    # longest_row decides whether a job runs where Ctrl-C can stop it: the slowest timed row counts.
    monkeypatch.setattr(estimates, "CALIBRATE_ABOVE", 0.0)
    n = 20
    a = np.stack([np.full((n, n), 1.0 / n)] * 3)
    slow = estimates._spread(range(n), estimates.SAMPLE_POSITIONS, ends=False)[1]

    def solve(a, layers, positions, progress=None, cancel=None):
        if a.shape[-1] == n and int(positions[0]) == slow:
            time.sleep(0.06)
        return np.zeros((len(layers), len(positions), a.shape[-1]))

    found = estimates.estimate(solve, a, [0, 1, 2], list(range(n)))
    assert found.how == "9 rows timed"
    assert found.longest_row >= 0.06 > max(found.layer_seconds)


def test_progress_gets_the_estimate_first_then_ticks_per_layer():
    att = random_attention(np.random.default_rng(2), layers=4, heads=2, n=12)
    rec = Recorder()
    flow = attnflow.flow(att, positions=[0, 3, 5], progress=rec)
    assert len(rec.estimates) == 1 and rec.estimates[0].rows == 12
    assert [done for done, _ in rec.calls] == [3, 6, 9, 12] and {t for _, t in rec.calls} == {12}
    np.testing.assert_allclose(flow, attnflow.flow(att, positions=[0, 3, 5], solver="networkx"), atol=1e-9)


def test_worker_thread_gives_the_same_numbers(monkeypatch):
    """Forced onto the worker thread: the same rows as the networkx oracle, ticks included."""
    att = random_attention(np.random.default_rng(3), layers=3, heads=2, n=10, causal=True)
    mask = np.ones((2, 10), dtype=bool)
    mask[1, 7:] = False
    batch = np.stack([att, att[..., ::-1, ::-1].copy()])
    monkeypatch.setattr(flowrun, "INTERRUPT_SECONDS", -1.0)
    started = []
    real = flowrun.in_thread
    monkeypatch.setattr(flowrun, "in_thread", lambda job: started.append(1) or real(job))
    rec = Recorder()
    got = attnflow.flow(batch, positions=[0, 6], mask=mask, progress=rec)
    assert started == [1] and rec.calls[-1] == (12, 12)
    expected = attnflow.flow(batch, positions=[0, 6], mask=mask, solver="networkx")
    np.testing.assert_allclose(got, expected, atol=1e-9)


def test_worker_thread_keeps_the_callers_numba_threads(monkeypatch):
    """numba's thread count is per thread and a new thread starts with every core: a shard or a
    benchmark that set 1 must not get all cores on a long flow."""
    import numba

    seen = []

    def probe(a, layers, positions, progress=None, cancel=None):
        seen.append((threading.current_thread().name, numba.get_num_threads()))
        return np.zeros((len(layers), len(positions), a.shape[-1]))

    monkeypatch.setitem(SOLVERS, "probe", probe)
    monkeypatch.setattr(flowrun, "INTERRUPT_SECONDS", -1.0)
    before = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        attnflow.flow(random_attention(np.random.default_rng(4), layers=2, heads=1, n=6), solver="probe")
    finally:
        numba.set_num_threads(before)
    assert seen and all(name == "attnflow-flow" and threads == 1 for name, threads in seen), seen


def test_ctrl_c_inside_a_compiled_call_on_the_calling_thread_is_a_keyboard_interrupt(monkeypatch):
    """A short flow runs on the calling thread; Ctrl-C landing inside a numba call there comes out
    of the call as SystemError caused by KeyboardInterrupt (seen in CI on the SmolLM2 CLI flow),
    which must reach the caller as KeyboardInterrupt (the CLI's exit 130, nothing written)."""

    def interrupted(a, layers, positions, progress=None, cancel=None):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise SystemError("CPUDispatcher(<function sums>) returned a result with an exception set") from exc

    monkeypatch.setitem(SOLVERS, "interrupted", interrupted)
    monkeypatch.setattr(flowrun, "INTERRUPT_SECONDS", 1e9)  # the calling thread
    with pytest.raises(KeyboardInterrupt):
        attnflow.flow(random_attention(np.random.default_rng(5), layers=2, heads=1, n=6), solver="interrupted")

    def broken(a, layers, positions, progress=None, cancel=None):
        raise SystemError("a SystemError of its own")

    monkeypatch.setitem(SOLVERS, "broken", broken)
    with pytest.raises(SystemError, match="of its own"):
        attnflow.flow(random_attention(np.random.default_rng(5), layers=2, heads=1, n=6), solver="broken")


def test_worker_failure_is_raised_in_the_caller(monkeypatch):
    monkeypatch.setattr(flowrun, "INTERRUPT_SECONDS", -1.0)
    att = random_attention(np.random.default_rng(4), layers=2, heads=1, n=6)

    def explode(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setitem(SOLVERS, "engine", explode)
    with pytest.raises(RuntimeError, match="boom"):
        attnflow.flow(att, positions=[0], solver="engine")
    monkeypatch.undo()
    # and a good run afterwards is unaffected
    assert np.asarray(attnflow.flow(att, positions=[0])).shape == (2, 1, 6)


@pytest.mark.parametrize("solve", [engine.solve, certified.solve, oracle.solve])
def test_a_set_cancel_flag_stops_a_solver_before_any_sink(solve):
    """The compiled solvers read the flag between sinks: set before the call, no sink is solved."""
    a = random_attention(np.random.default_rng(6), layers=5, heads=1, n=40)[:, 0]
    a = 0.5 * a + 0.5 * np.eye(40)
    flag = np.ones(1, np.bool_)
    got = solve(a, np.array([4]), np.array([0, 3]), cancel=flag)
    assert (got == 0).all()
    np.testing.assert_allclose(solve(a, np.array([4]), np.array([0])), oracle.solve(a, np.array([4]), np.array([0])),
                               atol=1e-9)


class Stop(Exception):
    pass


def test_cancel_from_the_waiting_thread_stops_the_worker_between_sinks(monkeypatch):
    """A progress callback that raises (the app's cancel) is called by the waiting thread; the
    worker stops at its next sink: the call raises, and rows after the cancel are never solved."""
    monkeypatch.setattr(flowrun, "INTERRUPT_SECONDS", -1.0)
    monkeypatch.setattr(flowrun, "SLICE_SECONDS", 0.01)
    att = random_attention(np.random.default_rng(7), layers=6, heads=1, n=30)
    done = []
    jobs: list[FlowJob] = []
    real = flowrun.in_thread
    monkeypatch.setattr(flowrun, "in_thread", lambda job: jobs.append(job) or real(job))

    def progress(k: int, total: int) -> None:
        if done and k == done[-1]:  # no new row: the waiting thread's call
            raise Stop()
        done.append(k)

    with pytest.raises(Stop):  # networkx: seconds a layer, so the cancel lands mid-run
        attnflow.flow(att, positions=list(range(30)), solver="networkx", progress=progress)
    job = jobs[0]
    assert job.cancel[0] and done and done[-1] < 6 * 30
    solved_rows = int((job.out.reshape(-1, 30).sum(axis=-1) > 0).sum())
    assert solved_rows < 6 * 30 - 1  # the worker did not run on to the end


def test_cancelled_job_raises_flow_cancelled():
    att = random_attention(np.random.default_rng(8), layers=3, heads=1, n=8)

    def runner(job: FlowJob) -> None:
        job.cancel[0] = True
        job.run()

    with pytest.raises(FlowCancelled):
        attnflow.flow(att, positions=[0], runner=runner)


def test_warmup_compiles_every_path_and_the_cache_then_holds_it():
    from attnflow.core.flow import warmup

    warmup.compile_all()
    assert warmup.compiled()
    assert all(kernel.signatures for kernel in warmup.kernels())


def test_the_one_thread_warmup_covers_every_kernel_compiled_checks():
    """NUMBA_NUM_THREADS=1 (a one-core container): the solvers take their one-thread paths, yet the
    warm-up must still compile (or load) every kernel compiled() checks, or every process would print
    the compile notice on its first flow."""
    import os
    import subprocess
    import sys

    code = ("from attnflow.core.flow import warmup\nwarmup.compile_all()\n"
            "missing = [k.py_func.__name__ for k in warmup.kernels() if not k.signatures]\n"
            "assert not missing, missing")
    done = subprocess.run([sys.executable, "-c", code], env={**os.environ, "NUMBA_NUM_THREADS": "1"},
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]


def test_an_empty_numba_cache_is_announced_once(monkeypatch, capsys):
    from attnflow.core.flow import warmup

    monkeypatch.setattr(warmup, "compiled", lambda: False)
    monkeypatch.setattr(flowrun, "_noticed", False)
    att = random_attention(np.random.default_rng(9), layers=3, heads=1, n=6)
    attnflow.flow(att, positions=[0])
    attnflow.flow(att, positions=[1])
    lines = [line for line in capsys.readouterr().err.splitlines() if "compiling the flow solvers" in line]
    assert len(lines) == 1 and "once per machine" in lines[0] and "minute" in lines[0]
    monkeypatch.setattr(flowrun, "_noticed", False)
    attnflow.flow(att, positions=[0], solver="networkx")  # nothing compiled for the oracle: no line
    assert "compiling" not in capsys.readouterr().err


def test_no_estimate_is_timed_when_nobody_reads_it(monkeypatch):
    """A short run without a progress.estimate reader skips the timed estimate (it costs a good
    part of a short run); with a reader it is made and handed over first."""
    calls = []
    real = flowrun.estimate
    monkeypatch.setattr(flowrun, "estimate", lambda *a, **k: calls.append(1) or real(*a, **k))
    att = random_attention(np.random.default_rng(10), layers=3, heads=1, n=12)
    attnflow.flow(att, positions=[0])
    assert calls == []
    rec = Recorder()
    attnflow.flow(att, positions=[0], progress=rec)
    assert calls == [1] and len(rec.estimates) == 1


def test_core_imports_no_process_machinery():
    import ast
    import pathlib

    root = pathlib.Path(SRC) / "attnflow" / "core"
    for path in root.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else \
                [node.module or ""] if isinstance(node, ast.ImportFrom) else []
            for name in names:
                assert name.split(".")[0] not in {"subprocess", "signal", "ctypes", "multiprocessing"}, (path, name)


def test_long_run_warns_with_the_estimate(monkeypatch):
    att = random_attention(np.random.default_rng(5), layers=2, heads=2, n=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        attnflow.flow(att, positions=[1])  # short: no warning at the default threshold
    monkeypatch.setattr(flowrun, "WARN_SECONDS", 0.0)
    with pytest.warns(LongFlowWarning, match=r"attention flow: 2 rows x 8 tokens = 16 max-flows, estimated .*"
                                             r"pass progress=\.\.\. to follow it; Ctrl-C stops it"):
        attnflow.flow(att, positions=[1])
    # a caller who passed a progress callback already follows it: no advice to pass one
    with pytest.warns(LongFlowWarning) as caught:
        attnflow.flow(att, positions=[1], progress=lambda done, total: None)
    message = str(caught[0].message)
    assert "estimated" in message and message.endswith("; Ctrl-C stops it") and "progress=" not in message


def _interrupt(cmd: list[str], ready: bytes, env: dict) -> tuple[int, str]:
    """Start ``cmd``, wait until its stderr shows ``ready``, send SIGINT, return (status, stderr)."""
    # A shell starting pytest in the background leaves SIGINT ignored, and children inherit that:
    # give the command the default disposition a terminal's Ctrl-C meets.
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    seen = b""
    os.set_blocking(proc.stderr.fileno(), False)
    deadline = time.monotonic() + 240
    def shown() -> bool:  # the CLI wraps its lines at the terminal's width: compare words
        return b" ".join(ready.split()) in b" ".join(seen.split())

    while not shown() and proc.poll() is None and time.monotonic() < deadline:
        chunk = proc.stderr.read() or b""
        seen += chunk
        time.sleep(0.1)
    assert shown(), f"never got ready: {seen.decode(errors='replace')[-500:]}"
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)  # generous: the latency itself is measured in the benchmark, not here
    finally:
        if proc.poll() is None:
            proc.kill()
    os.set_blocking(proc.stderr.fileno(), True)
    seen += proc.stderr.read()
    return proc.returncode, seen.decode(errors="replace")


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=SRC, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1", NUMBA_NUM_THREADS="1")


def test_cancelling_a_long_cli_flow_leaves_no_file(tmp_path, smollm2_dir):
    # ~300 tokens through SmolLM2's 30 layers: minutes here, surely long on a much faster machine
    text = " ".join(["the quick brown fox jumps over the lazy dog near the river bank"] * 23)
    out = tmp_path / "flow.json"
    status, err = _interrupt([sys.executable, "-m", "attnflow", "explain", text, "--model", smollm2_dir,
                              "--method", "flow", "--json", str(out)], b"Ctrl-C stops it", _env())
    assert status == 130, err
    assert "estimated" in err and "attnflow: interrupted; no output file was written" in err
    assert list(tmp_path.iterdir()) == []  # neither the file nor a temporary beside it


def test_interrupting_python_flow_raises_keyboard_interrupt(tmp_path):
    script = tmp_path / "run.py"
    script.write_text(
        "import sys, warnings, numpy as np\n"
        f"sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})\n"
        "from oracles import random_attention\n"
        "import attnflow\n"
        "from attnflow.api import flowrun\n"
        "flowrun.WARN_SECONDS = 0.0; flowrun.INTERRUPT_SECONDS = -1.0  # any machine: warn, use the worker thread\n"
        "att = random_attention(np.random.default_rng(0), 8, 2, 600)\n"
        "warnings.simplefilter('always')\n"
        "try:\n"
        "    attnflow.flow(att, positions=[0])\n"
        "except KeyboardInterrupt:\n"
        "    print('interrupted', file=sys.stderr)\n"
        "    sys.exit(3)\n")
    proc_env = _env()
    status, err = _interrupt([sys.executable, str(script)], b"Ctrl-C stops it", proc_env)
    assert status == 3, err
    assert "LongFlowWarning" in err and "interrupted" in err


def test_oracle_contract_is_what_the_estimate_times():
    """The estimate times solvers through the shared ``solve(a, layers, positions)`` contract."""
    a = np.stack([0.5 * np.eye(5) + 0.5 / 5] * 3)
    found = estimates.calibrate(oracle.solve, a, [2], 0, 1)
    assert found.rows == 1 and found.tokens == 5 and found.how.endswith("rows timed")


def test_seconds_for_follows_the_solving_order():
    """Rows are solved graph by graph, layer by layer; the costlier top layer comes last."""
    found = FlowEstimate(rows=2 * 3 * 2, tokens=10, max_flows=120, seconds=2 * (1 + 2 + 3) * 2, longest_row=3,
                         how="", layer_seconds=(1.0, 2.0, 3.0), positions=2)
    assert [found.seconds_for(k) for k in (0, 1, 2, 4, 6, 12)] == [0, 1, 2, 6, 12, 24]
    assert found.seconds_for(12) == found.seconds


def test_cli_eta_weights_rows_by_the_estimate():
    """The bar's ETA before any row (the estimate counted down) and after (the estimate of what is
    left, scaled by how the done rows compared with theirs)."""
    from types import SimpleNamespace

    from attnflow.cli.progress import _Eta

    found = FlowEstimate(rows=3, tokens=10, max_flows=30, seconds=60.0, longest_row=30, how="",
                         layer_seconds=(10.0, 20.0, 30.0), positions=1)
    task = SimpleNamespace(completed=0, elapsed=5.0, total=3, fields={"estimate": found})
    assert _Eta().render(task).plain == "ETA ~0:00:55 (estimated)"
    task.completed, task.elapsed = 1, 20.0  # the first row took twice its estimate: 50 s left -> 100 s
    assert _Eta().render(task).plain == "ETA 0:01:40"
    task.fields = {}
    assert _Eta().render(task).plain == "ETA 0:00:40"  # no estimate: the plain rate
