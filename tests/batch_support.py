"""Shared by the batch tests: small agreement inputs and the oracle, ``attnflow.explain`` on each text alone."""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import numpy as np

import attnflow
from attnflow.data.agreement import SEEN_TEMPLATES, generate

SRC = str(Path(attnflow.__file__).resolve().parents[1])


def sentences(n: int, seed: int = 1) -> list[str]:
    return [e.text for e in generate(n, SEEN_TEMPLATES, random.Random(seed), set())]


def rows_of(out) -> list[dict]:
    import pyarrow.dataset as ds

    files = sorted(str(p) for p in (Path(out) / "rows").glob("part-*.parquet"))
    return ds.dataset(files, format="parquet").to_table().to_pylist() if files else []


def check_against_explain(rows: list[dict], texts: dict, model, tokenizer, target="cls", tol: float = 1e-6) -> float:
    """Every row equals attnflow.explain on its text alone (tokens, prediction, scores within ``tol``);
    returns the largest difference seen."""
    worst = 0.0
    for row in rows:
        alone = attnflow.explain(texts[row["id"]], model, tokenizer=tokenizer, method=row["method"], target=target)
        assert row["tokens"] == alone.sources
        assert row["prediction"] == alone.prediction
        assert row["target"] == alone.target
        diff = float(np.abs(np.asarray(row["scores"]) - alone.row(row["method"])).max())
        assert diff <= tol, (row["id"], row["method"], diff)
        worst = max(worst, diff)
    return worst


def exactly_once(rows: list[dict], ids, methods) -> None:
    seen = sorted((r["id"], r["method"]) for r in rows)
    assert seen == sorted((i, m) for i in ids for m in methods)


def subprocess_env() -> dict:
    """Child processes (CLI runs, Dask workers) import this checkout's attnflow."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false",
               PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = SRC + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "attnflow", *args]
