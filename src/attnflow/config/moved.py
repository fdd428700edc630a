"""Modules that moved to another room keep their old path for one release (the 0.3 release drops them).

Issue 43 split ``attnflow.capture`` into the rooms it held: loading and kinds (``attnflow.hf``),
observing (``attnflow.capture``), editing and pricing (``attnflow.interventions``, with the cost model
that was ``attnflow.api.costs``) and text units (``attnflow.units``, with ``attnflow.api.spans``).
Importing an old path gives the moved module itself (the same object, so a monkeypatch through either
path is seen by both) and a ``DeprecationWarning`` naming the new path, from one finder on
``sys.meta_path`` that ``attnflow`` installs when it is imported.

    import attnflow.capture.ablation   # DeprecationWarning: ... use attnflow.interventions.ablation
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import warnings
from types import ModuleType
from typing import Any

# old module path -> new module path
MODULES = {
    **{f"attnflow.capture.{m}": f"attnflow.hf.{m}" for m in ("architectures", "load", "pypi_models")},
    **{f"attnflow.capture.{m}": f"attnflow.interventions.{m}"
       for m in ("ablation", "attnlrp", "attribution_patching", "budgeted", "compute", "efficient_attention",
                 "logit_paths", "span_ablation")},
    "attnflow.api.costs": "attnflow.interventions.costs",
    **{f"attnflow.capture.{m}": f"attnflow.units.{m}" for m in ("segments", "vocabulary")},
    "attnflow.api.spans": "attnflow.units.spans",
}

# package -> {old name: module that defines it now}: names a package exported that moved with their module
NAMES = {"attnflow.capture": {"default_model_path": "attnflow.hf.load", "load_model": "attnflow.hf.load"}}


def _warn(old: str, new: str, stacklevel: int) -> None:
    # the warning names the user's line: the import machinery's own frames are skipped by warnings
    warnings.warn(f"{old} is deprecated: use {new}", DeprecationWarning, stacklevel=stacklevel + 1)


class _MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path of ``MODULES`` and loads it as the new module: ``exec_module`` puts the new
    module in ``sys.modules`` under the old name, which the import system then returns (the new
    module's own ``__spec__`` and ``__name__`` are left as they are)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        return importlib.util.spec_from_loader(name, self) if name in MODULES else None

    def exec_module(self, module: ModuleType) -> None:
        old = module.__name__
        _warn(old, MODULES[old], stacklevel=2)
        sys.modules[old] = importlib.import_module(MODULES[old])


def install() -> None:
    """Put the finder first on ``sys.meta_path`` (once)."""
    if not any(isinstance(finder, _MovedFinder) for finder in sys.meta_path):
        sys.meta_path.insert(0, _MovedFinder())


def moved_name(package: str, name: str) -> Any:
    """``package``'s attribute ``name`` where it moved (``NAMES``), with the warning; else the
    ``AttributeError`` a module raises for a name it does not have."""
    module = NAMES.get(package, {}).get(name)
    if module is None:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    _warn(f"{package}.{name}", f"{module}.{name}", stacklevel=3)  # past the package's __getattr__
    return getattr(importlib.import_module(module), name)
