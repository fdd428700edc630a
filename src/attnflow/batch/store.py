"""The output folder of a batch run: nothing half-written, nothing twice.

- Each shard is ONE Parquet file, ``rows/part-NNNNN.parquet``, written to a temporary name and renamed:
  it holds the shard's rows and, in its metadata, the shard's failed rows with their reasons. A shard
  is finished exactly when that file exists, so an interrupted run leaves finished shards and nothing
  else (full maps, when asked, are written first to ``maps/``; a map file without its rows file is
  simply rewritten).
- ``batch.json`` records the settings and the shard plan (each shard's rows, fingerprinted). A rerun
  with the same settings and input skips the finished shards; a rerun with other settings or another
  input is refused, so rows of two different runs never mix.
- ``errors.jsonl`` gathers every failed row (from the shards' metadata) at the end of each run.
- One run at a time per folder (an advisory lock on ``.lock``).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from attnflow.batch.shard import ShardOutput
from attnflow.hf.load import read_config
from attnflow.errors import AttnflowError
from attnflow.results.files import write_text, write_with
from attnflow.results.rows import ERRORS, MANIFEST, MAPS, ROWS, SCHEMA, VERSION

SHARD_KEY = b"attnflow.shard"


class Store:
    def __init__(self, out: Path, manifest: dict) -> None:
        self.out, self.manifest = out, manifest
        self._lock: Any = None
        self.new = self.had_lock = False
        self.made_folders: list[Path] = []

    # ---------------------------------------------------------------------------- opening

    @classmethod
    def open(cls, out: Any, settings: dict, source: str, rows: int, shards: list[dict]) -> Store:
        """Create ``out`` (or reopen a finished or interrupted run of the same batch in it)."""
        out = Path(out)
        if out.exists() and not out.is_dir():
            raise AttnflowError(f"--out {str(out)!r} is a file; give a folder (new, or one an earlier run of the "
                                "same batch wrote)")
        manifest_path = out / MANIFEST
        if manifest_path.is_file():
            manifest = _read_manifest(manifest_path)
            _same_run(out, manifest, settings, shards)
        elif out.is_dir() and any(p.name != ".lock" for p in out.iterdir()):
            raise AttnflowError(f"--out {str(out)!r} is a folder with other files in it; give a new or empty folder")
        else:
            manifest = {"schema": SCHEMA, "version": VERSION, "settings": settings,
                        "input": {"source": source, "rows": rows}, "shards": shards, "runs": []}
        store = cls(out, manifest)
        store.new = not manifest_path.is_file()
        store.made_folders = [p for p in (out, *out.parents) if not p.exists()]  # deepest first
        store.had_lock = (out / ".lock").exists()
        try:
            out.mkdir(parents=True, exist_ok=True)
            (out / ROWS).mkdir(exist_ok=True)
            if settings.get("maps"):
                (out / MAPS).mkdir(exist_ok=True)
        except OSError as exc:
            raise AttnflowError(f"cannot write {str(out)!r}: {exc.strerror}") from exc
        store._take_lock()
        remove_stale_temporaries(out)
        store._save_manifest()
        return store

    def discard_if_empty(self) -> None:
        """Undo ``open`` for a new run that wrote no shard (it failed or was stopped before its first):
        remove the manifest, the empty folders, the lock file and ``out`` itself when this run made it,
        so that the corrected rerun starts afresh. A run continuing an earlier one leaves its folder as
        it found it."""
        if not self.new or any((self.out / ROWS).glob("part-*.parquet")):
            return
        for path in (self.out / MANIFEST, self.out / ERRORS):
            path.unlink(missing_ok=True)
        remove_stale_temporaries(self.out)
        for folder in (self.out / MAPS, self.out / ROWS):
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()
        if not self.had_lock:
            (self.out / ".lock").unlink(missing_ok=True)
        for folder in self.made_folders:
            if folder.is_dir() and not any(folder.iterdir()):
                folder.rmdir()

    def _take_lock(self) -> None:
        try:
            import fcntl
        except ImportError:  # Windows: no advisory locks; one run at a time is then up to the user
            return
        self._lock = open(self.out / ".lock", "a")  # noqa: SIM115  held for the whole run
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            self._lock.close()
            self._lock = None
            raise AttnflowError(f"another attnflow batch is writing to {str(self.out)!r}; wait for it to end") from exc

    def close(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing the file releases the lock
            self._lock = None

    def _save_manifest(self) -> None:
        write_text(self.out / MANIFEST, json.dumps(self.manifest, indent=1, allow_nan=False))

    # --------------------------------------------------------------------------- shards

    def rows_file(self, name: str) -> Path:
        return self.out / ROWS / f"{name}.parquet"

    def finished(self) -> set[str]:
        """Names of the shards whose rows file exists."""
        names = {s["name"] for s in self.manifest["shards"]}
        return {n for n in names if self.rows_file(n).is_file()}

    def write(self, output: ShardOutput) -> None:
        """The shard's map file (if any), then its rows file (the commit): each atomically."""
        import pyarrow.parquet as pq

        if output.maps is not None:
            write_with(self.out / MAPS / f"{output.name}.parquet", lambda tmp: pq.write_table(output.maps, tmp))
        info = {"errors": output.errors, "seconds": round(output.seconds, 4), "where": output.where}
        metadata = dict(output.rows.schema.metadata or {})
        metadata[SHARD_KEY] = json.dumps(info, allow_nan=False, default=str).encode("utf-8")
        table = output.rows.replace_schema_metadata(metadata)
        write_with(self.rows_file(output.name), lambda tmp: pq.write_table(table, tmp))

    def shard_errors(self, name: str) -> list[dict]:
        import pyarrow.parquet as pq

        metadata = pq.read_schema(self.rows_file(name)).metadata or {}
        return json.loads(metadata.get(SHARD_KEY, b"{}")).get("errors", [])

    # --------------------------------------------------------------------------- the end

    def finish(self, run: dict) -> dict:
        """Gather the errors of every finished shard into errors.jsonl; count rows; record the run."""
        import pyarrow.parquet as pq

        errors, explained = [], 0
        for name in sorted(self.finished()):
            errors.extend(self.shard_errors(name))
            explained += pq.read_metadata(self.rows_file(name)).num_rows
        methods = max(1, len(self.manifest["settings"].get("methods", [])))
        errors.sort(key=lambda e: e["row"])
        write_text(self.out / ERRORS, "".join(json.dumps(e, ensure_ascii=False, default=str) + "\n" for e in errors))
        totals = {"rows": self.manifest["input"]["rows"], "explained": explained // methods, "failed": len(errors),
                  "shards": len(self.manifest["shards"]), "finished_shards": len(self.finished())}
        self.manifest["runs"].append({**run, "ended": time.strftime("%Y-%m-%dT%H:%M:%S%z")})
        self.manifest["totals"] = totals
        self._save_manifest()
        return totals


def _read_manifest(path: Path) -> dict:
    manifest = read_config(path)
    if manifest.get("schema") != SCHEMA:
        raise AttnflowError(f"{str(path)!r} is not an attnflow batch manifest")
    if not isinstance(manifest.get("version"), int) or manifest["version"] > VERSION:
        raise AttnflowError(f"{str(path)!r} has batch schema version {manifest.get('version')!r}; this attnflow "
                            f"reads versions up to {VERSION} (upgrade attnflow)")
    return manifest


def _same_run(out: Path, manifest: dict, settings: dict, shards: list[dict]) -> None:
    """Refuse to continue a run in ``out`` with other settings or another input."""
    before = manifest.get("settings", {})
    changed = [k for k in sorted(set(before) | set(settings)) if before.get(k) != settings.get(k)]
    if changed:
        shown = "; ".join(f"{k}: {before.get(k)!r} then, {settings.get(k)!r} now" for k in changed[:3])
        raise AttnflowError(f"{str(out)!r} holds a batch run with other settings ({shown}); use another --out, "
                            "or delete that folder to start over")
    if manifest.get("shards") != shards:
        raise AttnflowError(f"{str(out)!r} holds a batch run over another input (or another --shard-size); use "
                            "another --out, or delete that folder to start over")


def remove_stale_temporaries(out: Path) -> None:
    """Temporary files of a run that was killed outright (SIGKILL, power loss) before it could clean up."""
    for folder in (out / ROWS, out / MAPS, out):
        if folder.is_dir():
            for p in folder.glob(".*.*"):
                if p.name != ".lock" and p.is_file():
                    os.remove(p)
