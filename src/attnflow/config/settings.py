"""Every setting of an explanation in one frozen record: its default (the paper's), its allowed values
and one check.

    settings = Settings(residual=0.3, head_fusion="max")      # checked here, once
    attnflow.explain(text, settings=settings)                 # keywords stay as sugar:
    attnflow.explain(text, residual=0.3, head_fusion="max")   # the same Settings, built for you
    result.params                                             # settings.as_dict() + what the entry point adds

A new setting is one ``Option`` row in ``OPTIONS`` and one field of ``Settings``: the CLI's
options (``attnflow.cli.options``) and the app's menus (``attnflow.app.options``) are generated from
these rows, so no other module spells a setting's default or allowed values.
"""

from __future__ import annotations

import dataclasses
import numbers
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

from attnflow.errors import AttnflowError

F = TypeVar("F", bound=Callable[..., Any])


@dataclass(frozen=True)
class Option:
    """One setting: its name, default, allowed values (a tuple of choices, or ``(low, high)`` for a
    number), and the help line the CLI and the app show."""

    name: str
    default: Any
    help: str
    choices: tuple[Any, ...] | None = None   # the allowed values, for a choice
    bounds: tuple[float, float] | None = None  # inclusive range, for a number
    cli: bool = True                          # offered as a command-line option
    labels: tuple[str, ...] = ()              # what a menu shows for each choice (default: its name)
    # Where a value away from the default changes a result (one generic check refuses it elsewhere, before any
    # work: attnflow.api.checks.check_options; the table of commands x options: attnflow.cli.option_table):
    scope: str | None = None                  # ANY: a computed method reads it; EVERY: each named method does
    models: tuple[str, ...] | None = None     # the kinds of model it applies to (None: every kind)
    flag: str = ""                            # its command-line spelling (default: --name-with-dashes)

    @property
    def spelled(self) -> str:
        """How the command line spells it (``--causal-norm``)."""
        return self.flag or "--" + self.name.replace("_", "-")

    def menu(self) -> list[dict[str, Any]]:
        """``[{"name", "label"}]`` per choice, for the app's option menus (None is named "none")."""
        labels = self.labels or tuple("none" if c is None else str(c) for c in self.choices or ())
        return [{"name": "none" if c is None else c, "label": label} for c, label in zip(self.choices or (), labels)]


# An option's scope (Option.scope): which methods must read it (their registry record's ``reads``) for it to
# apply: ANY one method the call computes, or EVERY method the user named (the result records it for each).
ANY, EVERY = "any", "every"

# The paper's settings (Abnar & Zuidema 2020): mean over heads, residual 0.5 ((W + I) / 2), attention weights.
OPTIONS: dict[str, Option] = {o.name: o for o in (
    Option("residual", 0.5, "Weight of the residual connection: A = (1-r)W + rI.", bounds=(0.0, 1.0), scope=ANY),
    Option("head_fusion", "mean", "How heads are combined in each layer.", choices=("mean", "max", "min"),
           scope=ANY),
    Option("weighting", "attention",
           "How much each key contributes to a query in each layer: 'attention' (the weights, the paper's) or "
           "'norm' (weight x length of the key's transformed value vector, Kobayashi et al. 2020; see "
           "docs/decoders.md).", choices=("attention", "norm"),
           labels=("attention weights",
                   "norm-based: weight x length of the transformed value vector (Kobayashi et al. 2020)"), scope=EVERY),
    Option("causal_norm", None, "Decoders: receptive-field normalisation ('keys' or 'sink'; see docs/decoders.md). "
           "Off by default.", choices=(None, "keys", "sink"), scope=EVERY, models=("decoder",)),
    Option("solver", "auto", "Max-flow solver for flow (auto picks the fastest exact one).",
           choices=("auto", "certified", "engine", "torch", "scipy", "networkx"), cli=False),
    Option("target", None, "Position to explain: 'cls', 'last', or a token index (negative counts from the end). "
           "Default: 'last' for decoders, 'cls' otherwise.", cli=False),
    Option("truncate", False, "Cut texts longer than the model's maximum instead of refusing them.", cli=False),
    Option("device", "auto", "Where a model given by name runs: auto (a GPU when torch sees one), cpu, cuda, cuda:N "
           "or mps. A loaded model stays where it is.", cli=False),
    Option("dtype", "auto", "The dtype a model given by name is loaded in: auto (its checkpoint's), float32, bfloat16 or "
           "float16. A loaded model keeps its own. Scores are accumulated in float32 or wider whatever it is.",
           choices=("auto", "float32", "bfloat16", "float16"), cli=False),
    Option("budget", 5.0, "ablated-flow-budgeted: the most the whole call may spend, in forward passes of the input "
           "predicting the next token (compute counted from the model's shapes: the capture pass 1, the estimate's "
           "forward and backward passes, the exact re-runs as batched; in time, such a pass on SDPA). Exact ablated "
           "flow when it fits, else the one-pass estimate with its latest and its top sources re-scored exactly. "
           "Left at its default, it rises to what the estimate costs where that is more (a long input), and by span "
           "to that plus one pass of re-runs.",
           bounds=(3.0, 100000.0), scope=ANY),
)}

# What an entry point takes beside the settings whose reach is checked the same way (a keyword of explain, not a
# field of Settings: it describes the input, and results record it in meta["spans"]).
ENTRY_OPTIONS: dict[str, Option] = {o.name: o for o in (
    Option("spans", None, "Decoders: what ablated flow, its estimate, the budgeted method and AttnLRP remove at once: "
           "'token', 'word', 'sentence', passages of the text, character ranges or a file of passages.", cli=False,
           scope=ANY, flag="--by/--spans"),
    Option("target_class", None, "Images: the class grad-rollout explains (index or label; default the predicted one).",
           cli=False, scope=ANY, flag="--class"),
)}


def rule(name: str) -> Option | None:
    """The ``Option`` of a setting or an entry point's checked keyword (None: neither)."""
    return OPTIONS.get(name) or ENTRY_OPTIONS.get(name)


def is_default(name: str, value: Any) -> bool:
    """Whether ``value`` leaves option ``name`` as if not given (spans: None or "token")."""
    if name == "spans":
        return value is None or (isinstance(value, str) and value == "token")
    return value == rule(name).default

TARGET_NAMES = ("cls", "last")


class _Unset:
    """The default of an entry point's setting keywords: "not given", so that ``settings=`` decides."""

    def __repr__(self) -> str:
        return "<from settings>"


UNSET: Any = _Unset()


def choices(name: str, *, none: bool = True) -> tuple[Any, ...]:
    """The allowed values of setting ``name`` (without None when ``none`` is False)."""
    allowed = OPTIONS[name].choices or ()
    return allowed if none else tuple(v for v in allowed if v is not None)


def _spelled(values: tuple[Any, ...]) -> str:
    shown = [repr(v) if v is not None else "None" for v in values]
    return ", ".join(shown[:-1]) + f" or {shown[-1]}" if len(shown) > 1 else shown[0]


def check_choice(name: str, value: Any, allowed: tuple[Any, ...] | None = None) -> Any:
    """``value`` if it is one of setting ``name``'s choices (or of ``allowed``), else a refusal that
    says what was expected and what was given."""
    allowed = OPTIONS[name].choices if allowed is None else allowed
    if value not in allowed:
        raise AttnflowError(f"{name} must be {_spelled(allowed)}; got {value!r}")
    return value


def check_number(name: str, value: Any) -> float:
    low, high = OPTIONS[name].bounds
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not low <= float(value) <= high:
        raise AttnflowError(f"{name} must be a number in [{low:g}, {high:g}]; got {value!r}")
    return float(value)


def check_target(target: Any) -> Any:
    """'cls', 'last', a token position (an int, or a digit string from a command line or a form:
    returned as an int) or None (each model's default)."""
    if isinstance(target, str) and target.lstrip("-").isdigit() and target.lstrip("-"):
        return int(target)
    if target is None or target in TARGET_NAMES or (isinstance(target, numbers.Integral)
                                                   and not isinstance(target, bool)):
        return target if not isinstance(target, numbers.Integral) or target is None else int(target)
    raise AttnflowError(f"target must be 'cls', 'last' or a token position; got {target!r}")


def check_device_name(device: Any) -> str:
    """"auto", "cpu", "cuda", "cuda:N" or "mps" (whether this machine has it is checked when a model
    loads, ``attnflow.api.devices.check_device``)."""
    import re

    if not isinstance(device, str) or not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", device):
        raise AttnflowError(f"device must be auto, cpu, cuda, cuda:N or mps; got {device!r}")
    return device


@dataclass(frozen=True)
class Settings:
    """The settings of one explanation: one frozen record, checked once when built.

    Every entry point takes one (``settings=``); its setting keywords are sugar on top
    (``explain(text, residual=0.3)`` builds ``Settings(residual=0.3)``), and a keyword left out keeps
    the value ``settings`` holds. A result records ``settings.as_dict()`` in ``params``. Each
    setting's allowed values and help line are its row of ``attnflow.config.settings.OPTIONS``, from
    which the CLI's options and the app's menus are made. The defaults are the paper's.

    Args:
        residual: Weight of the identity in ``A = (1 - residual) W + residual I`` (0.5: the paper's
            ``(W + I) / 2``).
        head_fusion: "mean" (the paper's), "max" or "min" over heads.
        weighting: "attention" (the paper's) or "norm" (Kobayashi et al. 2020).
        causal_norm: None, "keys" or "sink" (decoders; see ``attnflow.core.causal``).
        solver: The max-flow solver for flow: "auto", "certified", "engine", "torch", "scipy" or
            "networkx".
        target: "cls", "last", a position, or None (decoders: "last"; others: "cls"). A digit string
            becomes an int.
        truncate: Cut inputs longer than the model's maximum instead of refusing them.
        device: Where a model given by name is loaded ("auto": a CUDA GPU, else Apple's mps, when
            torch sees one; "cpu", "cuda", "cuda:N", "mps"); a loaded model is used where it is.
        dtype: What a model given by name is loaded in ("auto": its checkpoint's; "float32",
            "bfloat16", "float16"); a loaded model keeps its own (another is refused).
        budget: What ``ablated-flow-budgeted`` may spend, in forward passes of the input
            (``attnflow.interventions.compute``).

    Raises:
        AttnflowError: A value outside a setting's allowed values (one line: expected, given).

    Examples:
        >>> import attnflow
        >>> settings = attnflow.Settings(residual=0.3, head_fusion="max")
        >>> settings.replace(head_fusion="min").as_dict()["head_fusion"]
        'min'
        >>> attnflow.Settings(residual=1.5)
        Traceback (most recent call last):
            ...
        attnflow.errors.AttnflowError: residual must be a number in [0, 1]; got 1.5
    """

    residual: float = OPTIONS["residual"].default
    head_fusion: str = OPTIONS["head_fusion"].default
    weighting: str = OPTIONS["weighting"].default
    causal_norm: str | None = OPTIONS["causal_norm"].default
    solver: str = OPTIONS["solver"].default
    target: Any = field(default=OPTIONS["target"].default)
    truncate: bool = OPTIONS["truncate"].default
    device: str = OPTIONS["device"].default
    dtype: str = OPTIONS["dtype"].default
    budget: float = OPTIONS["budget"].default

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """Refuse a value outside a setting's allowed values (one line: expected, given).

        A digit-string target becomes an int and a residual a float.

        Raises:
            AttnflowError: The first value outside its setting's allowed values.
        """
        object.__setattr__(self, "residual", check_number("residual", self.residual))
        object.__setattr__(self, "budget", check_number("budget", self.budget))
        for name in ("head_fusion", "weighting", "causal_norm", "solver", "dtype"):
            check_choice(name, getattr(self, name))
        object.__setattr__(self, "target", check_target(self.target))
        if not isinstance(self.truncate, bool):
            raise AttnflowError(f"truncate must be True or False; got {self.truncate!r}")
        check_device_name(self.device)

    def as_dict(self) -> dict[str, Any]:
        """The settings as a result records them in ``params``.

        Returns:
            Every field by name.
        """
        return dataclasses.asdict(self)

    def replace(self, **changes: Any) -> Settings:
        """A copy with some settings changed (checked).

        Args:
            **changes: Settings by name.

        Returns:
            A new ``Settings``.

        Raises:
            AttnflowError: A value outside its setting's allowed values.
        """
        return dataclasses.replace(self, **changes)

    @classmethod
    def build(cls, settings: Settings | None = None, **keywords: Any) -> Settings:
        """The one Settings of an entry point: ``settings`` with the keywords the caller passed on top.

        Keywords left at their ``UNSET`` default (not passed) are left out.

        Args:
            settings: The base; None: the paper's defaults.
            **keywords: Settings by name.

        Returns:
            The ``Settings`` (``settings`` itself when nothing is passed on top).

        Raises:
            AttnflowError: ``settings`` that is no ``Settings``, a keyword that is no setting, or a value
                outside its setting's allowed values.
        """
        if settings is not None and not isinstance(settings, Settings):
            raise AttnflowError(f"settings must be an attnflow.Settings; got {type(settings).__name__}")
        keywords = {k: v for k, v in keywords.items() if v is not UNSET}
        unknown = sorted(set(keywords) - set(OPTIONS))
        if unknown:
            raise AttnflowError(f"{unknown[0]!r} is not a setting; the settings are {', '.join(OPTIONS)}")
        base = settings if settings is not None else cls()
        return dataclasses.replace(base, **keywords) if keywords else base

    @staticmethod
    def keywords(function: F) -> F:
        """Mark ``function``'s keywords that default to ``UNSET`` as settings, for its signature.

        Its signature (what ``inspect.signature``, ``help()`` and the docs show) gives each one the
        default of its setting, which is what a call that leaves it out and passes no ``settings`` gets.
        The keywords keep ``UNSET`` as their real default, so that one left out defers to ``settings=``
        (``Settings.build``); the function is returned itself, not wrapped.

        Args:
            function: An entry point whose setting keywords default to ``UNSET``.

        Returns:
            ``function``, with ``__signature__`` set.

        Raises:
            AttnflowError: A keyword defaulting to ``UNSET`` that is no setting.
        """
        import inspect

        signature = inspect.signature(function)
        shown = []
        for parameter in signature.parameters.values():
            if parameter.default is UNSET:
                if parameter.name not in OPTIONS:
                    raise AttnflowError(f"{function.__qualname__}'s keyword {parameter.name!r} defaults to UNSET but "
                                        f"is no setting; the settings are {', '.join(OPTIONS)}")
                parameter = parameter.replace(default=OPTIONS[parameter.name].default)
            shown.append(parameter)
        function.__signature__ = signature.replace(parameters=shown)  # type: ignore[attr-defined]
        return function
