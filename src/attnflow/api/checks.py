"""What an entry point refuses before any model loads, in one place: ``attnflow.explain`` and
``attnflow.batch`` (and the ``batch`` command, before it imports torch) call these same functions.

- The settings' values are checked by ``attnflow.config.Settings`` (its one ``check``).
- ``check_text_model``: a model folder against those settings, from its ``config.json`` alone (a
  refused family, an encoder-decoder where text is explained, the norm weighting on a family whose
  value projections the architecture table does not know, receptive-field normalisation for a model
  that is no decoder).
- Where a call runs is checked beside what resolves it: devices in ``attnflow.api.devices``, a Dask
  scheduler in ``attnflow.api.scheduler``.

Nothing here imports torch: a refusal takes well under a second.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnflow.errors import AttnflowError
from attnflow.hf.kind import carried_kind, kind_name


def _config(name: str) -> dict | None:
    path = Path(name) / "config.json"
    if not path.is_file():
        return None  # a hub id: checked once loaded
    from attnflow.hf.load import read_config

    return read_config(path)


def check_text_model(name: Any, *, weighting: str = "attention", causal_norm: str | None = None,
                     what: str = "explain") -> None:
    """Refuse a model folder (or a hub id, as far as its name tells; or the
    ``ModelInfo`` an entry point inspected) that cannot give text results
    with these settings."""
    from attnflow.hf.architectures import PROJECTIONS, refuse_unsupported
    from attnflow.hf.load import ModelInfo, check_model_path
    from attnflow.hf.kind import kind_of

    if isinstance(name, ModelInfo):
        config, kind, name = name.config or None, name.model_kind, name.path
    else:
        check_model_path(name)
        config = _config(name)
        kind = kind_of(config) if config else None
    if config is None:
        return
    refuse_unsupported(config)
    model_type = kind.model_type
    if config.get("is_encoder_decoder"):
        raise AttnflowError(f"{name!r} is an encoder-decoder model ({model_type or 'no model_type'}); "
                            f"{what} takes encoder-only and decoder-only models. Explain an encoder-decoder "
                            "one input at a time with a target text: attnflow explain SOURCE --target-text "
                            "OUTPUT --model ...")
    if kind.vision:
        raise AttnflowError(f"{name!r} is a vision model ({model_type}); {what} takes text models here: "
                            "use explain-image (or batch --images) for images")
    if weighting == "norm" and model_type not in PROJECTIONS:
        raise AttnflowError(f"the norm weighting needs each attention layer's value and output projections, and "
                            f"the architecture table does not name them for {model_type or 'no model_type'!r} "
                            f"models ({name!r}); use weighting 'attention' (--weighting attention), or a family it "
                            f"covers ({', '.join(sorted(PROJECTIONS)[:6])}, ...)")
    refuse_causal_norm(causal_norm, kind, repr(name))


def refuse_causal_norm(causal_norm: str | None, kind: Any, name: str) -> None:
    """The one refusal of receptive-field normalisation (``causal_norm``) for a model whose queries see the
    whole input (a known ``ModelKind`` that is not causal), named ``name``."""
    if causal_norm is not None and kind.known and not kind.causal:
        raise AttnflowError(f"causal_norm (--causal-norm) is for decoders; {name} is not one "
                            "(its queries see the whole input): drop --causal-norm")


def refuse_unsupported_folder(name: str) -> None:
    """A model folder of a refused family (Mamba, Swin, ...), from its ``config.json``: the app lists no
    model it would refuse when a job runs."""
    from attnflow.hf.architectures import refuse_unsupported_path

    refuse_unsupported_path(name)


# ------------------------------------------------------------------------------ methods against a model

_PLURAL = {"encoder": "encoders", "classifier": "classifiers", "decoder": "decoders (causal language models)",
           "encoder-decoder": "encoder-decoders", "vision": "image classifiers"}


_NOUN = {"encoder": "an encoder", "classifier": "a classifier", "decoder": "a decoder", "encoder-decoder":
         "an encoder-decoder", "vision": "an image classifier (a vision transformer)"}


def _label(model: Any) -> str:
    """How a user names ``model`` on the command line (its folder or hub id where known)."""
    name = getattr(model, "path", None) or getattr(model, "name", None) or getattr(model, "name_or_path", None)
    return str(name) if name and " " not in str(name) else "MODEL"


def why_not(method: Any, kind: str | None, family: str | None = None) -> str | None:
    """Why the registry record ``method`` cannot run on a model of ``kind`` and ``model_type`` ``family``
    (None: it can, or they are unknown): its record's ``models``, and for a method whose rules are
    checked family by family (``needs_row``), whether the family's architecture row sets that column."""
    if kind is not None and kind not in method.models:
        wanted = " and ".join(_PLURAL[k] for k in method.models)
        return f"{method.name} runs on {wanted} only, and this model is {_NOUN[kind]}"
    if method.needs_row and family:
        from attnflow.hf.architectures import ARCHITECTURES

        row = ARCHITECTURES.get(family)
        if row is None or getattr(row, method.needs_row) is None:
            checked = ", ".join(t for t, r in ARCHITECTURES.items() if getattr(r, method.needs_row) is not None)
            return (f"{method.name} runs on the families its rules are checked for ({checked}: "
                    f"{method.needs_row} in the architecture table) only, and this model is {family!r}")
    return None


def _short(value: Any) -> str:
    """A value as a refusal quotes it: never a model's or a long list's whole repr."""
    import reprlib

    shown = reprlib.Repr()
    shown.maxlist = shown.maxtuple = 4
    shown.maxstring = shown.maxother = 40
    return shown.repr(value)


def check_options(given: dict[str, Any], named: Any, computed: Any = None, kind: str | None = None, *,
                  named_only: bool = False, computed_only: bool = False) -> None:
    """The one check of where an option applies, generated from the option rows
    (``attnflow.config.settings.OPTIONS`` and ``ENTRY_OPTIONS``: ``scope``, ``models``) and the
    registry records (``reads``): refuse, in one sentence, a value away from its default that would
    change nothing, so that a result never records a setting that was not applied.

    given: option name -> value (what the call was given); named: the methods the user chose (or the
    entry point's default); computed: every method the call will compute (default: ``named``); kind:
    the model's kind when known (None: not checked by kind). ``named_only``: what the methods named and
    the kind decide (an entry point that decides its defaults later checks the rest then, with
    ``computed_only``: whether an option changes any method the call computes)."""
    from attnflow.config import registry
    from attnflow.config.settings import ANY, EVERY, is_default, rule

    named = [m if isinstance(m, str) else m.name for m in named]
    computed = named if computed is None else [m if isinstance(m, str) else m.name for m in computed]
    for name, value in given.items():
        option = rule(name)
        if option is None or is_default(name, value):
            continue
        flag = option.spelled
        readers = [r.name for r in registry.REGISTRY.values() if name in r.reads]
        if computed_only:
            if option.scope == ANY and not any(name in registry.get(m).reads for m in computed):
                _changes_none(name, value, flag, computed, readers)
            continue
        if option.models is not None and kind is not None and kind not in option.models:
            raise AttnflowError(f"{name} ({flag}) is for {' and '.join(_PLURAL[k] for k in option.models)} only, "
                                f"and this model is {_NOUN[kind]}: drop {flag}")
        if option.scope == EVERY:
            unread = [m for m in named if name not in registry.get(m).reads]
            if unread:
                raise AttnflowError(f"{name}={_short(value)} ({flag}) does not change {unread[0]} (it applies to "
                                    f"{', '.join(readers)} only), so the result would record a setting that was "
                                    f"not applied; drop {flag} or compute {unread[0]} separately")
        elif option.scope == ANY and not named_only and not any(name in registry.get(m).reads for m in computed):
            _changes_none(name, value, flag, computed, readers)


def _changes_none(name: str, value: Any, flag: str, computed: list[str], readers: list[str]) -> None:
    raise AttnflowError(f"{name}={_short(value)} ({flag}) changes none of the methods this call computes "
                        f"({', '.join(computed)}): it applies to {', '.join(readers)} only, so the result "
                        f"would record a setting that was not applied; drop {flag} or choose "
                        f"--method {readers[0]}")


def check_methods(methods: Any, settings: Any = None, model: Any = None, *, what: str = "explain",
                  computed: Any = None, spans: Any = None, decided_later: bool = False, **given: Any) -> None:
    """Refuse, before any work, a method or setting that cannot apply: the one check every entry point
    (explain, explain_maps, generate, faithfulness, batch, the CLI and the app) makes.

    methods: the chosen method names (or registry records); settings: the
    ``Settings`` (None: not checked); model: a ModelInfo, a Loaded, a loaded
    model or None (its kind unknown: not checked); computed: every method the call will compute (the
    decoder defaults added; default ``methods``); spans and ``given``: the entry point's own checked
    keywords (``attnflow.config.settings.ENTRY_OPTIONS``: ``spans=``, ``target_class=``). Refused, in one sentence
    each: a method whose record does not list the model's kind (``Method.models``); a gradient-weighted
    method with the norm weighting; an option away from its default where it changes nothing
    (``check_options``). ``decided_later``: the call decides what it computes beside ``methods``
    later (``attnflow.explain``, once it knows the token count): whether an option changes any of
    those is checked then, once, by ``check_computed``."""
    from attnflow.config import registry

    records = [m if isinstance(m, registry.Method) else registry.get(m) for m in methods]
    if not records:
        raise AttnflowError(f"choose at least one method ({', '.join(registry.REGISTRY)}); got none")
    found = carried_kind(model)
    kind, family = kind_name(found), found.model_type or None
    for record in records:
        reason = why_not(record, kind, family)
        if reason is not None and kind == "vision" and "image" not in record.kinds:
            raise AttnflowError(f"{reason}; explain an image with `attnflow explain-image IMAGE --model "
                                f"{_label(model)}` (attnflow.explain_image), whose methods are "
                                f"{', '.join(registry.names('image'))}")
        if reason is not None:
            raise AttnflowError(f"{reason}, so {what} cannot compute it; `attnflow methods --model {_label(model)}` "
                                "lists what this model can run, and why not the others")
    given = {"spans": spans, **given}
    if settings is not None:
        weighed = [r.name for r in records if r.gradients]
        if weighed and settings.weighting != "attention":
            raise AttnflowError(f"{weighed[0]} weighs attention by its gradients and has no norm weighting; "
                                "use weighting='attention' for it")
        given.update(settings.as_dict())
    check_options(given, [r.name for r in records], computed, kind, named_only=decided_later)


def check_computed(methods: Any, settings: Any, computed: Any, *, spans: Any = None, **given: Any) -> None:
    """The rest of ``check_methods`` for a call that decided what it computes after checking the
    methods named (``decided_later``): an option that changes none of the ``computed`` methods."""
    given = {"spans": spans, **given, **settings.as_dict()}
    check_options(given, [m if isinstance(m, str) else m.name for m in methods], computed, computed_only=True)


def runnable(model: Any, kind: str | None = None) -> list[tuple[Any, str | None]]:
    """Every registered method with why ``model`` cannot run it (None: it can), from the same facts
    ``check_methods`` refuses by: ``[(Method, reason or None), ...]`` in registry order. ``model``:
    a ModelInfo, a Loaded or a loaded model (``kind``: its kind when already known)."""
    from attnflow.config import registry

    found = carried_kind(model)
    kind, family = kind or kind_name(found), found.model_type or None
    return [(m, why_not(m, kind, family)) for m in registry.REGISTRY.values()]


_MOVED = {"check_device": "devices", "pick_device": "devices", "check_model_device": "devices",
          "scheduler_address": "scheduler", "check_scheduler": "scheduler", "row_capture": "capture_plan",
          "capture_path": "capture_plan"}


def model_kind_of(model: Any) -> str | None:
    """Deprecated: ``attnflow.hf.kind.kind_name``."""
    _moved("model_kind_of", "attnflow.hf.kind.kind_name")
    return kind_name(model)


def model_type_of(model: Any) -> str | None:
    """Deprecated: ``attnflow.hf.kind.carried_kind(model).model_type``."""
    _moved("model_type_of", "attnflow.hf.kind.carried_kind(model).model_type")
    return carried_kind(model).model_type or None


def named_info(model: Any, task: str = "auto") -> Any:
    """The record the checks read a named model's kind from before it loads
    (``attnflow.hf.load.named_info``), for the CLI, which reaches models through the api."""
    from attnflow.hf.load import named_info as record

    return record(model, task)


def _moved(name: str, where: str) -> None:
    import warnings

    warnings.warn(f"attnflow.api.checks.{name} is deprecated: use {where}", DeprecationWarning, stacklevel=3)


def __getattr__(name: str) -> Any:
    if name in _MOVED:  # deprecated here: they live in modules named for what they hold
        import importlib
        import warnings

        where = f"attnflow.api.{_MOVED[name]}"
        warnings.warn(f"attnflow.api.checks.{name} is deprecated: use {where}.{name}", DeprecationWarning,
                      stacklevel=2)
        return getattr(importlib.import_module(where), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
