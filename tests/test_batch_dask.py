"""attnflow batch on Dask: the embedded LocalCluster, and a real cluster (`dask scheduler` and two
`dask worker` processes on 127.0.0.1) that loses a worker to SIGKILL in the middle of a run. Every
process a test starts is ended by its PID, whatever happens in the test."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from batch_support import check_against_explain, cli, exactly_once, rows_of, sentences, subprocess_env

import attnflow

distributed = pytest.importorskip("distributed")  # the scale extra; `make test` installs it
pq = pytest.importorskip("pyarrow.parquet")
DASK = str(Path(sys.executable).with_name("dask"))


@pytest.fixture(scope="module")
def agreement():
    return attnflow.load_model(None)


def test_local_cluster_rows_equal_explain(tmp_path, agreement):
    texts = sentences(16, seed=21)
    texts[5] = ""
    run = attnflow.batch(texts, out=tmp_path / "out", methods="rollout,flow", target="cls", engine="dask",
                         workers=2, shard_size=4, batch_size=3)
    assert run.engine == "dask LocalCluster, 2 worker processes"
    assert (run.explained, run.failed, run.written) == (15, 1, 4)
    rows = rows_of(run.out)
    ids = [i for i in range(16) if i != 5]
    exactly_once(rows, ids, ["rollout", "flow"])
    check_against_explain(rows, dict(enumerate(texts)), *agreement)
    where = [json.loads(pq.read_schema(p).metadata[b"attnflow.shard"])["where"].split(":")[1]
             for p in (run.out / "rows").glob("*.parquet")]
    assert str(os.getpid()) not in where  # engine="dask": every shard in a worker process


def test_auto_stays_here_for_a_short_job_and_hands_a_long_one_to_a_local_cluster(tmp_path, agreement, monkeypatch):
    from attnflow.batch import engine

    texts = sentences(24, seed=25)
    short = attnflow.batch(texts, out=tmp_path / "short", methods="rollout", shard_size=4)
    assert short.engine == "local (this process; quicker than starting a cluster)" and short.written == 6
    # As if a worker started instantly: after one shard here, the cluster is worth starting.
    monkeypatch.setattr(engine, "WORKER_START_S", 0.0)
    long = attnflow.batch(texts, out=tmp_path / "long", methods="rollout,flow", shard_size=4, workers=2)
    assert long.engine.startswith("dask LocalCluster, 2 worker processes") and "1 shard in this process before" \
        in long.engine, long.engine
    rows = rows_of(long.out)
    exactly_once(rows, range(24), ["rollout", "flow"])
    check_against_explain(rows, dict(enumerate(texts)), *agreement)
    where = [json.loads(pq.read_schema(p).metadata[b"attnflow.shard"])["where"].split(":")[1]
             for p in (long.out / "rows").glob("*.parquet")]
    assert 1 <= where.count(str(os.getpid())) <= 4 and len(set(where)) >= 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def started(logs: Path):
    """Start processes (Popen args) and end every one of them by PID on the way out."""
    processes: list[subprocess.Popen] = []

    def start(name: str, *args: str) -> subprocess.Popen:
        log = open(logs / f"{name}.log", "w")  # noqa: SIM115  closed with the process below
        process = subprocess.Popen(list(args), env=subprocess_env(), stdout=log, stderr=subprocess.STDOUT)
        process.log = log
        processes.append(process)
        return process

    try:
        yield start
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
            process.log.close()


def test_a_real_cluster_loses_a_worker_mid_run_and_loses_no_row(tmp_path, agreement):
    texts = sentences(60, seed=23)
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": f"t{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    out = tmp_path / "out"
    port = free_port()
    address = f"tcp://127.0.0.1:{port}"
    with started(tmp_path) as start:
        start("scheduler", DASK, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard")
        workers = [start(f"worker{i}", DASK, "worker", address, "--host", "127.0.0.1", "--nworkers", "1",
                         "--nthreads", "1", "--no-nanny", "--no-dashboard") for i in range(2)]
        client = distributed.Client(address, timeout="60s")
        try:
            client.wait_for_workers(2, timeout=90)
            pids = client.run(os.getpid)  # worker address -> PID: exactly the processes started above
            assert sorted(pids.values()) == sorted(w.pid for w in workers)
            batch = start("batch", *cli("batch", str(data), "--out", str(out), "--scheduler", address,
                                        "--methods", "rollout,flow", "--shard-size", "2", "--batch-size", "1"))
            deadline = time.time() + 180
            victim = None
            while victim is None and batch.poll() is None and time.time() < deadline:
                written = list((out / "rows").glob("part-*.parquet"))
                busy = [a for a, keys in client.processing().items() if keys]
                if written and busy:
                    victim = busy[0]
                    written_before = len(written)
                    os.kill(pids[victim], signal.SIGKILL)
                time.sleep(0.01)
            assert victim is not None, "the run ended before a worker could be killed in the middle of it"
            killed = next(w for w in workers if w.pid == pids[victim])
            assert killed.wait(timeout=10) == -signal.SIGKILL
            assert batch.wait(timeout=240) == 0, (tmp_path / "batch.log").read_text()
            assert written_before < 30  # the kill came before the last shard was written
            assert len(client.scheduler_info()["workers"]) == 1
        finally:
            client.close()
        log = (tmp_path / "batch.log").read_text()
        assert "rows: 60 of 60 explained, 0 failed; 30 shards, 30 written now" in log
        rows = rows_of(out)
        exactly_once(rows, [f"t{i}" for i in range(60)], ["rollout", "flow"])
        check_against_explain(rows, {f"t{i}": t for i, t in enumerate(texts)}, *agreement)
        before = {p.name: p.stat().st_mtime_ns for p in (out / "rows").glob("*.parquet")}
        again = subprocess.run(cli("batch", str(data), "--out", str(out), "--scheduler", address, "--methods",
                                   "rollout,flow", "--shard-size", "2", "--batch-size", "1"),
                               env=subprocess_env(), capture_output=True, text=True, timeout=120)
        assert again.returncode == 0, again.stderr
        assert "0 written now (30 finished by an earlier run)" in again.stdout
        assert {p.name: p.stat().st_mtime_ns for p in (out / "rows").glob("*.parquet")} == before
        exactly_once(rows_of(out), [f"t{i}" for i in range(60)], ["rollout", "flow"])
