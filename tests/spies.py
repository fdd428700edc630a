"""Counting calls of functions while a block runs, by code object (a profile hook: patched names would miss
callers that imported the function before the patch)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def calls_counted(codes: dict, counts: dict) -> Iterator[dict]:
    """For the block, add 1 to ``counts[codes[code]]`` at every call of a function whose code is a key of
    ``codes``; the profile hook before the block is put back after it."""

    def profile(frame, event, arg):
        if event == "call" and frame.f_code in codes:
            counts[codes[frame.f_code]] += 1

    old = sys.getprofile()
    sys.setprofile(profile)
    try:
        yield counts
    finally:
        sys.setprofile(old)
