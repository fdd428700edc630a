"""A griffe extension for the API reference (mkdocs.yml): show the defaults a call really gets.

griffe reads signatures from the source, where defaults may be named constants (``PAPER_ONLY``,
``registry.ALL``) and an entry point's setting keywords default to the ``UNSET`` sentinel (left out,
``settings=`` decides; ``Settings.keywords`` gives the function a signature with each setting's
default). A public function's default spelled by a name is shown as a plain literal when one can be
had: the constant's value read from the source, else the default ``inspect.signature`` gives at run
time (``0.5``, ``'mean'``). The signature and the parameter tables then agree with ``help()``.
"""

from __future__ import annotations

import ast
import inspect
from typing import Any

import griffe


def _literal(text: str) -> bool:
    try:
        ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False
    return True


def _constant(default: Any, loader: griffe.GriffeLoader) -> str | None:
    """The literal value of the module-level constant ``default`` names, from the source (no import)."""
    try:
        found = loader.modules_collection[default.canonical_path]
        value = (found.final_target if found.is_alias else found).value
    except (AttributeError, KeyError, griffe.AliasResolutionError, griffe.CyclicAliasError):
        return None
    return str(value) if value is not None and _literal(str(value)) else None


class RealDefaults(griffe.Extension):
    """Runs once the package is loaded, after the dataclasses extension (mkdocs.yml lists that first),
    so that a dataclass's ``__init__`` (``Settings``, ``Method``) is there to be read."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        self._visit(pkg, loader)

    def _visit(self, obj: griffe.Object, loader: griffe.GriffeLoader) -> None:
        for member in list(obj.members.values()):
            if member.is_alias:
                continue
            if member.is_function:
                self._function(member, loader)
            elif member.is_class or member.is_module:
                self._visit(member, loader)

    def _function(self, func: griffe.Function, loader: griffe.GriffeLoader) -> None:
        if func.name.startswith("_") and func.name != "__init__":
            return
        named = [p for p in func.parameters if p.default is not None and not _literal(str(p.default))]
        left = []
        for parameter in named:
            value = _constant(parameter.default, loader)
            if value is None:
                left.append(parameter)
            else:
                parameter.default = value
        if not left:
            return
        try:  # the package itself, from the paths the docs read (mkdocs.yml's paths)
            shown = inspect.signature(griffe.dynamic_import(func.path, loader.finder.search_paths)).parameters
        except (ImportError, TypeError, ValueError):
            return  # left as the source spells it; the docs test refuses an UNSET on the reference page
        for parameter in left:
            found = shown.get(parameter.name)
            if found is not None and found.default is not inspect.Parameter.empty and _literal(repr(found.default)):
                parameter.default = repr(found.default)
