"""Run ``attnflow app`` in a child process, for scripts, notebooks and tests::

    from attnflow.app.process import AppProcess

    with AppProcess(["--model", "smollm2"]) as app:   # a free port on 127.0.0.1
        print(app.url)                                 # ... drive it with a browser ...
    # stopped here (by its process id), even when the block raised

The child's stderr (load times, warnings, tracebacks of internal errors) goes to the file ``app.log``,
removed when the ``with`` block ends normally (kept when it raised).
"""

from __future__ import annotations

import os
import re
import select
import subprocess
import sys
import tempfile
import time
from typing import Any

from attnflow.errors import AttnflowError


class AppProcess:
    """``python -m attnflow app --port 0 ARGS`` as a child process; ``url`` once it listens."""

    def __init__(self, args: list[str] = (), *, timeout: float = 120.0, env: dict[str, str] | None = None) -> None:
        self.args = ["--port", "0", *args]
        self.timeout = timeout
        self.env = env
        self.url: str | None = None
        self.proc: subprocess.Popen | None = None
        self.log = tempfile.NamedTemporaryFile(prefix="attnflow-app-", suffix=".log", delete=False).name

    def start(self) -> AppProcess:
        env = {**os.environ, **(self.env or {})}
        with open(self.log, "w") as err:
            self.proc = subprocess.Popen([sys.executable, "-m", "attnflow", "app", *self.args], stdout=subprocess.PIPE,
                                         stderr=err, stdin=subprocess.DEVNULL, text=True, env=env)
        deadline = time.monotonic() + self.timeout
        out = self.proc.stdout
        while self.url is None:
            left = deadline - time.monotonic()
            if left <= 0 or self.proc.poll() is not None:
                self.stop()
                raise AttnflowError(f"attnflow app did not start: {self.stderr().strip()[-2000:] or 'timed out'}")
            ready, _, _ = select.select([out], [], [], min(left, 0.5))
            if ready:
                found = re.search(r"serving on (http://\S+)", out.readline())
                if found:
                    self.url = found.group(1)
        return self

    def stderr(self) -> str:
        with open(self.log, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self) -> int | None:
        """Stop the child (SIGTERM, then SIGKILL after 15 s); returns its exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(15)
        if self.proc.stdout is not None:
            self.proc.stdout.close()
        return self.proc.returncode

    def __enter__(self) -> AppProcess:
        return self.start()

    def __exit__(self, kind: Any, *exc: Any) -> None:
        self.stop()
        if kind is None:  # kept after a failure, for its traceback
            os.unlink(self.log)
