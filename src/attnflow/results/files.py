"""Writing output files so that an error or Ctrl-C never leaves a half-written file behind.

Used for result files here and, through ``attnflow.views.files``, for every figure and report.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from attnflow.errors import AttnflowError


def check_output(path: str | os.PathLike, suffixes: tuple[str, ...] | None = None) -> None:
    """Refuse, before any work is done, an output path that could not be written.

    Commands check every output first so that a bad second path never leaves the first one written.
    """
    target = Path(path)
    if suffixes is not None and target.suffix.lower().lstrip(".") not in suffixes:
        raise AttnflowError(f"{str(target)!r} must end in one of {', '.join('.' + s for s in suffixes)}")
    if target.is_dir():
        raise AttnflowError(f"cannot write {str(target)!r}: it is a folder")
    if not target.parent.exists():
        raise AttnflowError(f"cannot write {str(target)!r}: the folder {str(target.parent)!r} does not exist")
    if not target.parent.is_dir():
        raise AttnflowError(f"cannot write {str(target)!r}: {str(target.parent)!r} is a file, not a folder")
    check_writable(target.parent, f"cannot write {str(target)!r}")


def check_writable(folder: str | os.PathLike, what: str) -> None:
    """Refuse a folder no file can be created in (permissions, a read-only file system), by creating
    one: permission bits alone say nothing for root or on read-only mounts."""
    try:
        fd, probe = tempfile.mkstemp(prefix=".attnflow-probe-", dir=folder)
    except OSError as exc:
        raise AttnflowError(f"{what}: {exc.strerror or type(exc).__name__} in {str(folder)!r}") from exc
    os.close(fd)
    os.remove(probe)


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path beside ``path``; on success it is renamed onto ``path``, on any error
    (or KeyboardInterrupt) it is removed and ``path`` is untouched."""
    target = Path(path)
    check_output(target)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=target.suffix, dir=target.parent)
    os.close(fd)
    # mkstemp makes the file private (0600); an output file (a report to share or serve) should get
    # the permissions any new file gets here.
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o666 & ~umask)
    try:
        yield tmp
        os.replace(tmp, target)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def write_text(path: str | os.PathLike, text: str) -> str:
    with atomic_path(path) as tmp:
        Path(tmp).write_text(text, encoding="utf-8")
    return str(path)


def write_with(path: str | os.PathLike, writer: Callable[[str], None]) -> str:
    """Call ``writer(tmp_path)`` and move the result onto ``path`` atomically."""
    with atomic_path(path) as tmp:
        writer(tmp)
    return str(path)
