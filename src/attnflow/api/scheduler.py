"""Where a batch runs on a cluster: a Dask scheduler's address checked before any work (one connection
attempt, not Dask's retries for 20 s)."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path
from typing import Any

from attnflow.errors import AttnflowError


def scheduler_address(scheduler: str) -> str:
    """The address a ``--scheduler`` value names: ``tcp://HOST:PORT`` (or ``HOST:PORT``) as given, or the
    ``address`` a scheduler file (``dask scheduler --scheduler-file FILE``) records."""
    text = str(scheduler)
    path = Path(text).expanduser()
    if path.is_file() or text.endswith(".json"):
        if not path.is_file():
            raise AttnflowError(f"scheduler file {text!r} does not exist; pass the file `dask scheduler "
                                "--scheduler-file FILE` wrote, or an address like tcp://HOST:8786")
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise AttnflowError(f"{text!r} is not a Dask scheduler file (not readable JSON: {exc}); pass the file "
                                "`dask scheduler --scheduler-file FILE` wrote, or an address like "
                                "tcp://HOST:8786") from None
        address = data.get("address") if isinstance(data, dict) else None
        if not isinstance(address, str) or not address:
            raise AttnflowError(f"{text!r} is not a Dask scheduler file (a JSON object with an 'address'); pass the "
                                "file `dask scheduler --scheduler-file FILE` wrote, or an address like "
                                "tcp://HOST:8786")
        return address
    if not re.fullmatch(r"(?:[a-z][a-z0-9+]*://)?[^\s/:]+(?::\d+)?/?|(?:[a-z][a-z0-9+]*://)?\[[0-9a-fA-F:]+\](?::\d+)?/?",
                        text) or ":" not in text:
        raise AttnflowError(f"scheduler (--scheduler) must be an address like tcp://HOST:8786 or the path of a "
                            f"scheduler file; got {text!r}")
    return text


def check_scheduler(scheduler: Any, timeout: float = 3.0) -> None:
    """Refuse a scheduler that cannot be reached: a malformed address, a file that is not a scheduler file,
    or a TCP address where nothing listens (one connection attempt of at most ``timeout`` seconds, instead
    of Dask's retries for 20 s). A ``distributed.Client`` passes as it is."""
    if scheduler is None or not isinstance(scheduler, (str, Path)):
        return
    address = scheduler_address(str(scheduler))
    scheme, _, rest = address.rpartition("://")
    if scheme not in ("", "tcp", "tls"):
        return  # inproc://, ucx://, ws://: left to Dask
    host, _, port = rest.rstrip("/").rpartition(":")
    host = host.strip("[]")
    if not host or not port.isdigit():
        raise AttnflowError(f"scheduler address {address!r} names no port; expected tcp://HOST:PORT "
                            "(a Dask scheduler listens on 8786 by default)")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            pass
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        shown = address if address == str(scheduler) else f"{address} (from {str(scheduler)!r})"
        raise AttnflowError(f"cannot reach the Dask scheduler at {shown}: {reason}; start it (dask scheduler) "
                            "or pass the address it prints, or drop --scheduler to run on this machine") from None
