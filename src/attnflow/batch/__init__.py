"""Batch: explain a whole data set, one Parquet row per input and method, on Dask or in this process
(the batch system's own room, beside the app and the CLI, over the api).

- ``run``: ``batch`` itself (``attnflow.batch(...)``, ``attnflow batch``), ``BatchRun``;
- ``inputs``: reading the input; ``plan``: cutting it into shards; ``shard``: computing a shard
  where it runs (its ``BatchJob`` holds the real
  ``attnflow.Settings``); ``engine``: running shards in this process or on Dask; ``store``:
  the output folder.

Names load on first use: ``import attnflow`` imports this package, not Dask or pyarrow.
"""

from __future__ import annotations

from attnflow.config.lazy import lazy

_LAZY = {"batch": "attnflow.batch.run", "BatchRun": "attnflow.batch.run", "BatchInterrupted": "attnflow.batch.run"}

__all__ = list(_LAZY)
__getattr__, _ = lazy(__name__, _LAZY)
