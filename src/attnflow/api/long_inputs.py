"""Deprecated: renamed ``attnflow.interventions.costs`` (the time and memory of the methods that run
the model again), its ``prepare`` renamed ``fit_to_budget``; these names are kept for one release."""

from __future__ import annotations

import warnings
from typing import Any

from attnflow.interventions import costs as _costs

warnings.warn("attnflow.api.long_inputs is deprecated: use attnflow.interventions.costs "
              "(prepare is fit_to_budget there)", DeprecationWarning, stacklevel=2)


def __getattr__(name: str) -> Any:
    return getattr(_costs, "fit_to_budget" if name == "prepare" else name)
