"""Command-line options generated from ``attnflow.Settings`` and the method registry, so that a
command never spells a setting's default, its allowed values or a list of methods.

    residual: float = option("residual")
    head_fusion: HeadFusion = option("head_fusion")
    method: Method = method_option("text", "rollout")
"""

from __future__ import annotations

from enum import Enum
from typing import Any

import typer

from attnflow.config import registry
from attnflow.config.settings import OPTIONS, choices


def _choice_enum(name: str, values: tuple[str, ...]) -> type[Enum]:
    return Enum(name, {v.replace("-", "_"): v for v in values}, type=str)  # type: ignore[return-value]


def choice_enum(setting: str) -> type[Enum]:
    """An Enum of ``setting``'s allowed values (None left out: an unset option)."""
    return _choice_enum("".join(p.title() for p in setting.split("_")), choices(setting, none=False))


HeadFusion = choice_enum("head_fusion")
Weighting = choice_enum("weighting")
CausalNorm = choice_enum("causal_norm")


def option(setting: str, *names: str, help: str | None = None) -> Any:
    """A typer option for ``setting``: its default, its range or choices, its help (``help`` overrides)."""
    spec = OPTIONS[setting]
    default = spec.default
    enum = {"head_fusion": HeadFusion, "weighting": Weighting, "causal_norm": CausalNorm}.get(setting)
    if enum is not None and default is not None:
        default = enum(default)
    text = help or spec.help
    if spec.bounds:  # the range checked by the setting's own check (click's reads NaN as "should be <= high")
        text += f" In [{spec.bounds[0]:g}, {spec.bounds[1]:g}]."
    return typer.Option(default, *names, help=text, **({"callback": _in_bounds(setting)} if spec.bounds else {}))


def _in_bounds(setting: str) -> Any:
    """A callback refusing a number outside the setting's range, NaN included, in the setting's own
    words: ``--budget nan`` -> "budget must be a number in [3, 100000]; got nan"."""
    from attnflow.config.settings import check_number

    def check(value: Any) -> Any:
        from attnflow.errors import AttnflowError

        try:
            check_number(setting, value)
        except AttnflowError as refused:
            raise typer.BadParameter(str(refused)) from None
        return value

    return check


def device_option() -> Any:
    """``--device``: where a model given by name runs (the ``device`` setting's help)."""
    return typer.Option(OPTIONS["device"].default, "--device", help=OPTIONS["device"].help)


def dtype_option() -> Any:
    """``--dtype``: what a model given by name is loaded in (the ``dtype`` setting's help and choices)."""
    return typer.Option(OPTIONS["dtype"].default, "--dtype", help=OPTIONS["dtype"].help)


def model_option(help: str) -> Any:
    """``--model / -m``: a model folder, file, alias or hub id (None: the command's default)."""
    return typer.Option(None, "--model", "-m", help=help)


def method_enum(kind: str) -> type[Enum]:
    """The methods offered for results of ``kind`` (the registry), plus "all"."""
    return _choice_enum(f"{kind.title()}Method", (*registry.names(kind), registry.ALL))


def method_help(kind: str) -> str:
    """``raw, rollout, flow, grad-rollout (a classifier's predicted class), or all (raw, rollout, flow).``"""
    listed = ", ".join(m.name + (" (a classifier's predicted class)" if m.classifiers_only else "")
                       for m in registry.methods(kind))
    return f"{listed}, or {registry.ALL} ({', '.join(registry.paper_methods())}). See docs/methods.md."


def method_option(kind: str, default: str | None) -> Any:
    """``--method``; default None: the command's own default (``explain``: rollout, and a decoder's
    defaults beside it; a method named runs alone: ``attnflow.api.defaults``)."""
    if default is None:
        return typer.Option(None, help=method_help(kind) + " Default: rollout (a decoder's last position: rollout "
                            "beside ablated flow, or the budgeted method above 64 tokens); a method named runs alone.")
    return typer.Option(method_enum(kind)(default), help=method_help(kind))


def chosen_methods(method: Any, kind: str = "text") -> list[str]:
    """The methods a ``--method`` value asks for ("all": the paper's)."""
    return registry.resolve(getattr(method, "value", method), kind)[0]
