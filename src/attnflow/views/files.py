"""Writing output files so that an error or Ctrl-C never leaves a half-written file behind."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from attnflow.errors import AttnflowError


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[str]:
    """Yield a temporary path beside ``path``; on success it is renamed onto ``path``, on any error
    (or KeyboardInterrupt) it is removed and ``path`` is untouched."""
    target = Path(path)
    if not target.parent.exists():
        raise AttnflowError(f"cannot write {str(target)!r}: the folder {str(target.parent)!r} does not exist")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=target.suffix, dir=target.parent)
    os.close(fd)
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
