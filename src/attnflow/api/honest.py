"""Deprecated: renamed ``attnflow.api.defaults`` (what a call computes beyond the methods named);
this name is kept for one release."""

from __future__ import annotations

import warnings
from typing import Any

from attnflow.api import defaults as _defaults

warnings.warn("attnflow.api.honest is deprecated: use attnflow.api.defaults", DeprecationWarning, stacklevel=2)


def __getattr__(name: str) -> Any:
    return getattr(_defaults, name)
