"""Jobs: one explanation or generation asked for by one page, run on a worker thread.

A job records what a page needs to follow it (its state, a status line, the tokens generated so
far, the progress of long work with an estimate of the time left) and ends done (with an
``Attribution``), failed (with a one-line message) or cancelled. Each job has
an unguessable id, so pages see only their own. Cancelling sets a flag that the job's progress
callbacks check, so flow stops between two batches of rows and generation before the next token.
"""

from __future__ import annotations

import secrets
import sys
import threading
import time
import traceback
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from attnflow.errors import AttnflowError

TERMINAL = ("done", "error", "cancelled")
# A first look (flow for the explained target, the rest still running) reaches the page once it has
# stood this long unreplaced: a rest that follows within a second would only make the report flicker.
PREVIEW_AFTER = 1.0


class Cancelled(Exception):
    """Raised inside a job's work when its page cancelled it (or the server is stopping)."""


class Job:
    """One page's request. ``abandon_after``: seconds without a page following its event stream
    (once one did) after which the job cancels itself, so a closed tab's long flow or generation
    stops taking CPU and holding its model. Jobs nobody streams (scripts polling the state) never do."""

    def __init__(self, kind: str, model: str, abandon_after: float = 15.0) -> None:
        self.id = secrets.token_urlsafe(12)
        self.kind = kind
        self.model = model
        self.state = "queued"
        self.status = "waiting for a free worker"
        self.tokens: list[str] = []
        self.progress: dict[str, Any] | None = None
        self.result: Any = None
        self.preview: Any = None  # a first look at the result while the rest runs (see ``show``)
        self.error: str | None = None
        self.finished_at: float | None = None
        self.version = 0  # bumped on every change, so a stream knows when to send
        self._cancel = threading.Event()
        self._abandon_after = abandon_after
        self._seen: float | None = None  # when a page last followed the event stream
        self._lock = threading.Lock()
        self._report: str | None = None
        self._preview_report: str | None = None
        self._preview_at = 0.0

    # ------------------------------------------------------------------------------- from the work

    def check(self) -> None:
        if self._seen is not None and time.monotonic() - self._seen > self._abandon_after:
            self._cancel.set()
        if self._cancel.is_set():
            raise Cancelled()

    def say(self, status: str) -> None:
        self.check()
        with self._lock:
            self.status = status
            self.version += 1

    def add_token(self, token: str) -> None:
        self.check()
        with self._lock:
            self.tokens.append(token)
            self.version += 1

    def show(self, result: Any) -> None:
        """A first look at the result (an ``Attribution`` with flow for the
        explained target alone) while the rest is computed; kept if the job is then cancelled."""
        self.check()
        with self._lock:
            self.preview, self._preview_report = result, None
            self._preview_at = time.monotonic()
            self.version += 1

    def progress_callback(self, what: str, unit: str = "rows") -> Callable[[int, int], None]:
        """A ``progress(done, total)`` callback for the api (flow, image flow), with a time estimate;
        it raises ``Cancelled`` once the job is cancelled, which stops the work between rows."""
        started = time.perf_counter()

        def progress(done: int, total: int) -> None:
            self.check()
            elapsed = time.perf_counter() - started
            eta = elapsed / done * (total - done) if done > 0 else None
            with self._lock:
                self.progress = {"what": what, "unit": unit, "done": int(done), "total": int(total),
                                 "eta_s": None if eta is None else round(eta, 1)}
                self.version += 1

        return progress

    # -------------------------------------------------------------------------------- from pages

    def cancel(self) -> None:
        self._cancel.set()

    def seen(self) -> None:
        """A page is following this job (called by its event stream, many times a second)."""
        self._seen = time.monotonic()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {"id": self.id, "kind": self.kind, "model": self.model, "state": self.state,
                    "status": self.status, "tokens": list(self.tokens), "progress": self.progress,
                    "error": self.error, "version": self.version}

    def preview_due(self) -> bool:
        """Whether a page following the job should be sent its first look now (``PREVIEW_AFTER``)."""
        with self._lock:
            return self.preview is not None and self.state == "running" \
                and time.monotonic() - self._preview_at >= PREVIEW_AFTER

    @property
    def size(self) -> int:
        """Bytes its result (or first look) and report hold (0 without either)."""
        shown = self.result if self.result is not None else self.preview
        if shown is None:
            return 0
        scores = sum(block.values.nbytes for block in shown.blocks.values())
        return scores + len(self._report or "") + len(self._preview_report or "")

    def report(self, preview: bool = False) -> str:
        """The result's self-contained HTML report (made once); ``preview``: the first look's, which
        the whole result may replace while it is being made (then a one-line error)."""
        if preview:
            with self._lock:
                shown, made = self.preview, self._preview_report
            if shown is None:
                raise AttnflowError(f"the job is {self.state}; it has no first look")
            if made is None:
                made = shown.to_html()
                with self._lock:
                    if self.preview is shown:
                        self._preview_report = made
            return made
        if self._report is None:
            self._report = self.result.to_html()
        return self._report

    def _finish(self, state: str, result: Any = None, error: str | None = None) -> None:
        with self._lock:
            self.state, self.result, self.error = state, result, error
            if state == "done":  # the whole result replaces the first look
                self.preview, self._preview_report = None, None
            self.status = {"done": "done", "cancelled": "cancelled", "error": "failed"}[state]
            self.finished_at = time.monotonic()
            self.version += 1


class JobStore:
    """Runs jobs on a few worker threads and keeps the latest finished ones for their pages: at most
    ``keep`` of them, and only while their results (and reports) fit in ``keep_bytes`` (a 512-token
    text with four methods is ~60 MB; a long generation on a 30-layer model more)."""

    def __init__(self, workers: int = 4, keep: int = 32, keep_bytes: int = 1 << 30) -> None:
        self._pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="attnflow-job")
        self._jobs: OrderedDict[str, Job] = OrderedDict()
        self._keep, self._keep_bytes = keep, keep_bytes
        self._lock = threading.Lock()

    def submit(self, job: Job, work: Callable[[Job], Any]) -> Job:
        with self._lock:
            self._jobs[job.id] = job
            finished = [j for j in self._jobs.values() if j.state in TERMINAL]  # oldest first
            total = sum(j.size for j in finished)
            while finished and (len(finished) > self._keep or total > self._keep_bytes):
                old = finished.pop(0)
                del self._jobs[old.id]
                total -= old.size
        self._pool.submit(self._run, job, work)
        return job

    def get(self, job_id: str) -> Job | None:
        with self._lock:
            return self._jobs.get(job_id)

    def cancel_all(self) -> None:
        with self._lock:
            jobs = list(self._jobs.values())
        for job in jobs:
            job.cancel()

    def shutdown(self) -> None:
        self.cancel_all()
        self._pool.shutdown(wait=False, cancel_futures=True)

    @staticmethod
    def _run(job: Job, work: Callable[[Job], Any]) -> None:
        try:
            job.check()
            with job._lock:
                job.state = "running"
                job.version += 1
            result = work(job)
            job.check()  # cancelled after the last callback: the page asked for nothing
        except Cancelled:
            job._finish("cancelled")
        except AttnflowError as exc:
            job._finish("error", error=str(exc))
        except Exception as exc:  # noqa: BLE001  (a page gets one line; the server's log gets the traceback)
            traceback.print_exc(file=sys.stderr)
            first = (str(exc).strip().splitlines() or [""])[0]
            job._finish("error", error=f"internal error ({type(exc).__name__}: {first}); see the server's log")
        else:
            job._finish("done", result=result)
