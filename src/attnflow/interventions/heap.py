"""Freed heap memory handed back to the operating system between the layers of a long checkpointed pass.

torch's CPU tensors come from the C library's ``malloc``. glibc serves a request above its mmap
threshold with a mapping of its own, unmapped when freed, but it raises that threshold to the size of
each mapped block freed (up to 32 MiB), so after the first layers of a long pass the activations of
a few to a few tens of MiB (a layer's hidden states, queries, values) all come from the heap. A
checkpointed pass (``attnflow.interventions.attribution_patching``) keeps every layer's input, small
and long-lived, between one layer's short-lived activations; the freed stretches between the kept
inputs are too small for the next layer's larger requests, which grow the heap instead, and every
freed page stays resident. Measured on SmolLM2-135M, the estimate's pass alone at 4,096 tokens (one
thread, in a fresh process): 0.58 GB of live allocations above the loaded model, 1.83 GB resident.
Which requests land where depends on what ran before in the process, so ``attnflow.explain``'s peak
(in that pass) varied from call to call: 0.63 to 0.90 GB at 2,048 tokens over five runs of the
decoder defaults and ``spans="sentence"`` alike (whose live allocations there are the same), 1.90 GB
(defaults) against 2.42 GB (by sentence) at 8,192 (``docs/long-inputs.md``).

``release()`` returns the resident pages of freed heap blocks (glibc's ``malloc_trim(0)``: the whole
free pages inside each free block, not only the heap's top). Called before each checkpointed layer
runs (where a layer's input takes ``attribution_patching.RELEASE_FROM``, 8 MiB, or more), forward
and recomputed, the resident size stays near what is live: the estimate's pass at
4,096 tokens 0.62 GB (0.58 GB live, the same scores bit for bit); ``explain`` at 4,096 tokens 0.66 GB
by sentence and 0.68 GB with the decoder defaults, at 8,192 tokens 1.30 and 1.31 GB.
It changes no value, only which pages are resident; the pages reused afterwards are faulted in again
(zero-filled): ``explain``'s CPU time over a forward pass, by sentence and with the decoder defaults,
was 5.5 and 5.9 against 5.5 and 5.5 before at 4,096 tokens, 6.2 and 7.0 against 6.3 and 6.4 at 8,192
(up to about a tenth more, on a shared machine). Elsewhere (another C library, no ``malloc_trim``)
it does nothing.

API::

    release() -> bool   # True where the C library's free pages were handed back
"""

from __future__ import annotations

import ctypes
import functools
from typing import Any


@functools.cache
def _trim() -> Any:
    """glibc's ``malloc_trim`` from this process's own symbols, or None where there is none."""
    try:
        found = getattr(ctypes.CDLL(None), "malloc_trim", None)
    except (OSError, TypeError):  # TypeError: Windows takes no CDLL(None)
        return None
    if found is not None:
        found.argtypes, found.restype = [ctypes.c_size_t], ctypes.c_int
    return found


def release() -> bool:
    """Hand the resident pages of freed heap blocks back to the operating system (see the module
    docstring); False where the C library offers no way to."""
    trim = _trim()
    if trim is None:
        return False
    trim(0)
    return True
