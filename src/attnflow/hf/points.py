"""Named hook points: the one way attnflow reaches into a user's model.

Every method that reads or edits a model while it runs (streaming capture, the norm weighting,
ablation and span edits, attribution patching, logit paths, AttnLRP's rules, gradients, the row
capture of long prompts) does it here, by name, in a scope::

    points = hook_points(model)                       # resolved once per model
    with receiving(model, {"layers.3.attn.value": keep, "embed": edit}, attention="eager") as scope:
        model(**inputs)                               # keep/edit run in this thread only

**The names** (``i`` counts the model's attention layers from 0, in the order transformers runs
them; an encoder-decoder's encoder layers come first):

==========================  =====================================  ==========================================
name                        where                                  a receiver is called as
==========================  =====================================  ==========================================
``embed``                   the input embeddings                   ``fn(module, args, output)``
``layers.i.attn``           the module returning the attention     ``fn(module, args, output)``
``layers.i.attn.value``     its value projection (table)           ``fn(module, args, output)``
``layers.i.attn.out``       its output projection (table), input   ``fn(module, args, kwargs)`` (before it)
``layers.i.mlp``            the feed-forward block (table)         ``fn(module, args, output)``
``layers.i.block``          the attention module's parent          ``fn(forward, args, kwargs)`` (around it)
``layers.i.attn.kernel``    the attention function's call          ``fn(module, query, key, value, mask, **kw)``
``layers.i.mlp.gate``       the gated product's factors (table)    ``fn(module, args, output)``
``layer_input``             the embeddings block (``embeddings``)  ``fn(module, args, output)``
``norms``                   every normalisation module             ``fn(module, args, output)``
``activations``             every activation module                ``fn(module, args, output)``
``fixes``                   the modules the table's fixes correct  ``fn(module, args, kwargs)`` (before them)
``unembed``                 the output embeddings                  ``fn(module, args, output)``
``output``                  the whole model                        ``fn(module, args, output)``
==========================  =====================================  ==========================================

``layer_input`` is what the first layer reads (BERT's ``embeddings``: word, position and segment
embeddings summed and normalised; ``embed`` is the word embeddings alone). ``layers.i.mlp.gate``
is both factors of a gated feed-forward product (the table's ``lrp_gate``, e.g. ``act_fn`` and
``up_proj``). ``norms``, ``activations`` and ``fixes`` are groups: one receiver for every module of
the group, which it tells apart by ``module``. Norms are ``torch.nn.LayerNorm`` and the classes
transformers names ``*RMSNorm``/``*LayerNorm``; activations are the modules of
``transformers.activations`` (``ACT2FN``) and torch's own; ``fixes`` are the modules the table's
``fixes`` name by class (Falcon's attention).

A ``fn(module, args, output)`` receiver may return a replacement output (an edit) or None; a
``fn(module, args, kwargs)`` one may return replacement ``(args, kwargs)`` or None; an around receiver
returns the block's output (it calls ``forward(*args, **kwargs)`` itself, e.g. under activation
checkpointing); a kernel receiver returns ``(output, weights)`` or None, and None lets the scope's
attention implementation run. Points are looked up from the architecture table (value, output, mlp)
and from the attention modules transformers itself records (``_can_record_outputs``); a name the model
does not have is refused with a sentence when a scope asks for it.

**Nothing is left behind.** The torch hooks of a point are added when the first scope in any thread
asks for it and removed when the last such scope ends (also when it raises); several threads may share
one model (the app's jobs do), and each receives only its own calls: receivers live in a context
variable, so a hook that finds none in the calling thread does nothing. No attribute is written onto
the model (what attnflow tracks per model lives in a weak dictionary here), no ``forward`` stays
replaced (an around point wraps the block's ``forward`` for the scope and restores the instance's own
``__dict__`` after), and the attention implementation comes back as it was.

**Attention.** ``attention="eager"`` (to receive weights) or ``"sdpa"`` (fast, no weights), or kernel
receivers, switch the model for the scope onto one attention function registered with transformers'
``AttentionInterface`` (and a mask function with ``AttentionMaskInterface``) that dispatches per
calling context: kernel receivers first, then the implementation this context asked for, else the
model's own. A thread using the model meanwhile without attnflow keeps getting the model's own
implementation. The registrations and the switch are counted and undone when the last scope ends.
"""

from __future__ import annotations

import sys
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

from attnflow.hf.architectures import FIXES, architecture
from attnflow.errors import AttnflowError

KINDS = ("forward", "pre", "around", "kernel")
_LAYER_POINTS = {"attn": "forward", "attn.value": "forward", "attn.out": "pre", "mlp": "forward",
                 "block": "around", "attn.kernel": "kernel", "mlp.gate": "forward"}
_MODEL_POINTS = {"embed": "forward", "unembed": "forward", "output": "forward", "layer_input": "forward",
                 "norms": "forward", "activations": "forward", "fixes": "pre"}


# ------------------------------------------------------------------------- the attention modules

@dataclass(frozen=True)
class AttentionModule:
    """One module whose forward output carries a layer's attention weights at ``output[index]``;
    ``owner`` is the dotted name of the (sub-)model that declared it (encoder and decoder of an
    encoder-decoder model are different owners)."""

    name: str
    module: Any
    index: int
    owner: str


def _specs(model: Any, key: str) -> list[tuple[Any, str | None, int, str | None]]:
    """``(target_class, class_name, index, layer_name)`` for ``key`` in a model class's
    ``_can_record_outputs`` (a class, a class-name string, an ``OutputRecorder``, or a list)."""
    declared = getattr(type(model), "_can_record_outputs", None) or {}
    entries = declared.get(key)
    if entries is None:
        return []
    out = []
    for entry in entries if isinstance(entries, list) else [entries]:
        if isinstance(entry, type):
            out.append((entry, None, 1, None))
        elif isinstance(entry, str):
            out.append((None, entry, 1, None))
        else:  # transformers' OutputRecorder
            out.append((getattr(entry, "target_class", None), getattr(entry, "class_name", None),
                        int(getattr(entry, "index", 1)), getattr(entry, "layer_name", None)))
    return out


def _matches(module: Any, name: str, spec: tuple[Any, str | None, int, str | None]) -> bool:
    target_class, class_name, _, layer_name = spec
    if not ((target_class is not None and isinstance(module, target_class))
            or (class_name is not None and name.endswith(class_name))):
        return False
    return layer_name is None or f".{layer_name.strip('.')}." in f"{name}."


def attention_modules(model: Any, key: str = "attentions") -> list[AttentionModule]:
    """The modules that produce ``key`` (``"attentions"``, ``"cross_attentions"``) in layer order,
    found as transformers finds them for ``output_attentions``, or, for a model that declares none,
    by the architecture table's ``attention_class``. Empty when neither names them."""
    from transformers import PreTrainedModel

    found: list[AttentionModule] = []
    seen: set[int] = set()

    def walk(module: Any, name: str, specs: list, owner: str) -> None:
        for spec in specs:
            if id(module) not in seen and _matches(module, name, spec):
                seen.add(id(module))
                found.append(AttentionModule(name.lstrip("."), module, spec[2], owner))
                break
        for child_name, child in module.named_children():
            child_path = f"{name}.{child_name}"
            if isinstance(child, PreTrainedModel):
                walk(child, child_path, _specs(child, key), child_path.lstrip("."))
            else:
                walk(child, child_path, specs, owner)

    walk(model, "", _specs(model, key), "")
    row = architecture(model)
    if not found and key == "attentions" and row is not None and row.attention_class:
        found = [AttentionModule(name, module, 1, "") for name, module in model.named_modules()
                 if type(module).__name__ == row.attention_class]
    return found


def submodule(model: Any, name: str, path: str) -> Any:
    """The sub-module at ``path`` from the module called ``name`` in ``model`` (``../`` climbs one)."""
    while path.startswith("../"):
        name, path = name.rpartition(".")[0], path[3:]
    return model.get_submodule(f"{name}.{path}" if name else path)


# ------------------------------------------------------------------------------- the points

@dataclass(frozen=True)
class Point:
    """One named place: ``module`` (the model itself for ``output``; a tuple of modules for a group
    point), ``kind`` (how a receiver is called, see the module docstring) and ``layer`` (None for the
    model-wide points)."""

    name: str
    module: Any
    kind: str
    layer: int | None = None

    @property
    def modules(self) -> tuple[Any, ...]:
        """The module(s) the point's hook goes on."""
        return self.module if isinstance(self.module, tuple) else (self.module,)


def is_norm(module: Any) -> bool:
    """A normalisation module: torch's LayerNorm, or a class transformers names ``*RMSNorm`` /
    ``*LayerNorm`` (each modelling file defines its own; no common base class)."""
    import torch

    name = type(module).__name__
    return isinstance(module, torch.nn.LayerNorm) or name.endswith(("RMSNorm", "LayerNorm", "RmsNorm"))


def is_activation(module: Any) -> bool:
    """An elementwise non-linearity module: transformers' activation classes (``ACT2FN``) and torch's."""
    import torch

    nn = torch.nn
    return (type(module).__module__ == "transformers.activations"
            or isinstance(module, (nn.SiLU, nn.GELU, nn.Tanh, nn.ReLU, nn.Sigmoid, nn.Mish, nn.Softplus)))


def _group(model: Any, name: str) -> tuple[Any, ...]:
    if name == "norms":
        return tuple(m for m in model.modules() if is_norm(m))
    if name == "activations":
        return tuple(m for m in model.modules() if not is_norm(m) and is_activation(m))
    row = architecture(model)
    suffixes = tuple(FIXES[fix][0] for fix in (row.fixes if row is not None else ()))
    return tuple(m for m in model.modules() if suffixes and type(m).__name__.endswith(suffixes))


def _layer_input(model: Any) -> Any:
    return getattr(getattr(model, "base_model", model), "embeddings", None)


class HookPoints:
    """The named points of one model, resolved on first use (see ``hook_points``)."""

    def __init__(self, model: Any) -> None:
        self._model = weakref.ref(model)
        self.attention = attention_modules(model)
        self.layers = len(self.attention)
        self._resolved: dict[str, Point] = {}
        self._layer_of = {id(m.module): i for i, m in enumerate(self.attention)}

    @property
    def model(self) -> Any:
        model = self._model()
        if model is None:  # pragma: no cover - the caller holds the model
            raise AttnflowError("the model these hook points belong to no longer exists")
        return model

    def names(self, suffix: str) -> list[str]:
        """Every layer's name for a per-layer point: ``names("attn.value")`` ->
        ``["layers.0.attn.value", ...]``."""
        if suffix not in _LAYER_POINTS:
            raise AttnflowError(f"{suffix!r} is not a per-layer hook point; one of {', '.join(_LAYER_POINTS)}")
        return [f"layers.{i}.{suffix}" for i in range(self.layers)]

    def layer_of(self, module: Any) -> int | None:
        """The layer index of an attention module (None for any other module)."""
        return self._layer_of.get(id(module))

    def has(self, name: str) -> bool:
        try:
            self[name]
        except AttnflowError:
            return False
        return True

    def __getitem__(self, name: str) -> Point:
        point = self._resolved.get(name)
        if point is None:
            point = self._resolved[name] = self._resolve(name)
        return point

    def _resolve(self, name: str) -> Point:
        model = self.model
        if name in ("norms", "activations", "fixes"):
            return Point(name, _group(model, name), _MODEL_POINTS[name])
        if name in _MODEL_POINTS:
            module = {"embed": lambda: model.get_input_embeddings(), "output": lambda: model,
                      "unembed": lambda: model.get_output_embeddings(), "layer_input": lambda: _layer_input(model),
                      }[name]()
            if module is None:
                raise AttnflowError(f"{type(model).__name__} has no {name} module for the hook point {name!r}")
            return Point(name, module, _MODEL_POINTS[name])
        head, _, rest = name.partition(".")
        index, _, suffix = rest.partition(".")
        if head != "layers" or not index.isdigit() or suffix not in _LAYER_POINTS:
            known = ", ".join([*_MODEL_POINTS, *(f"layers.N.{s}" for s in _LAYER_POINTS)])
            raise AttnflowError(f"{name!r} is not a hook point name; known: {known}")
        layer = int(index)
        if layer >= self.layers:
            raise AttnflowError(f"{name!r}: {type(model).__name__} has {self.layers} attention layers")
        found = self.attention[layer]
        kind = _LAYER_POINTS[suffix]
        if suffix in ("attn", "attn.kernel"):
            return Point(name, found.module, kind, layer)
        if suffix == "block":
            return Point(name, model.get_submodule(found.name.rpartition(".")[0]), kind, layer)
        row = architecture(model)
        path = None if row is None else {"attn.value": row.value, "attn.out": row.output, "mlp": row.mlp,
                                         "mlp.gate": row.lrp_gate}[suffix]
        if path is None:
            raise AttnflowError(f"the architecture table does not name the module of {name!r} for "
                                f"{type(model).__name__}")
        try:
            if isinstance(path, tuple):
                return Point(name, tuple(submodule(model, found.name, p) for p in path), kind, layer)
            return Point(name, submodule(model, found.name, path), kind, layer)
        except (AttributeError, ValueError) as exc:
            raise AttnflowError(f"{found.name} has no {path!r} module as the architecture table says ({exc})") from None


_POINTS: weakref.WeakKeyDictionary[Any, HookPoints] = weakref.WeakKeyDictionary()
_LOCK = threading.RLock()  # every install and removal of anything on a model


def hook_points(model: Any) -> HookPoints:
    """The ``HookPoints`` of ``model``, resolved once (kept beside the model, not on it)."""
    with _LOCK:
        points = _POINTS.get(model)
        if points is None:
            points = _POINTS[model] = HookPoints(model)
        return points


# ---------------------------------------------------------------------------- the receiving

@dataclass
class _Installed:
    """What is installed on one model now: per point name, its users and how to take it off."""

    users: dict[str, int] = field(default_factory=dict)
    removers: dict[str, Callable[[], None]] = field(default_factory=dict)
    attention_users: int = 0
    previous: str | None = None


_INSTALLED: weakref.WeakKeyDictionary[Any, _Installed] = weakref.WeakKeyDictionary()
# (id(points), name) -> receivers active in this context, innermost scope last
_ACTIVE: ContextVar[dict[Any, tuple[Callable, ...]]] = ContextVar("attnflow_receivers", default={})
# id(points) -> the attention implementation this context asked for that model
_ATTENTION: ContextVar[dict[int, str]] = ContextVar("attnflow_attention", default={})
# id(module) -> its model's points, while the model runs on the dispatching function
_KERNEL_OWNERS: dict[int, HookPoints] = {}
_REGISTERED: dict[str, int] = {}  # dispatching function name -> models switched onto it


def _receivers(points: HookPoints, name: str) -> tuple[Callable, ...]:
    return _ACTIVE.get().get((id(points), name), ())


def _forward_hook(points: HookPoints, name: str) -> Callable:
    def hook(module: Any, args: Any, output: Any) -> Any:
        changed = None
        for receiver in _receivers(points, name):
            replaced = receiver(module, args, output if changed is None else changed)
            if replaced is not None:
                changed = replaced
        return changed
    return hook


def _pre_hook(points: HookPoints, name: str) -> Callable:
    def hook(module: Any, args: Any, kwargs: Any) -> Any:
        changed = None
        for receiver in _receivers(points, name):
            replaced = receiver(module, *(changed or (args, kwargs)))
            if replaced is not None:
                changed = replaced
        return changed
    return hook


def _around(points: HookPoints, name: str, forward: Callable) -> Callable:
    def run(*args: Any, **kwargs: Any) -> Any:
        call = forward
        for receiver in _receivers(points, name):
            call = (lambda r, inner: lambda *a, **k: r(inner, a, k))(receiver, call)
        return call(*args, **kwargs)
    return run


def _install(points: HookPoints, point: Point) -> Callable[[], None]:
    """Put ``point``'s one dispatching hook on the model; returns what takes it off again."""
    if point.kind in ("forward", "pre"):
        hook = (_forward_hook if point.kind == "forward" else _pre_hook)(points, point.name)
        handles = [m.register_forward_hook(hook) if point.kind == "forward"
                   else m.register_forward_pre_hook(hook, with_kwargs=True) for m in point.modules]

        def remove() -> None:
            for handle in handles:
                handle.remove()
        return remove
    if point.kind == "around":
        block = point.module
        own = block.__dict__.get("forward", _MISSING)  # an instance's own forward (rare) is put back as it was
        block.forward = _around(points, point.name, block.forward)

        def restore() -> None:
            if own is _MISSING:
                del block.__dict__["forward"]
            else:
                block.forward = own
        return restore
    return lambda: None  # kernel points dispatch through the attention function (see _switch)


_MISSING = object()


# ------------------------------------------------------------------------------- attention

def implementation(model: Any) -> str:
    """The attention implementation ``model`` runs on now (as its config says)."""
    return str(getattr(getattr(model, "config", None), "_attn_implementation", None) or "eager")


def own_implementation(model: Any) -> str:
    """The implementation ``model`` was given by its user: ``implementation``, or, while a scope has it
    on the dispatching function, the one it had before (what calls without a scope of their own run on)."""
    with _LOCK:
        installed = _INSTALLED.get(model)
        previous = installed.previous if installed is not None else None
    return previous or implementation(model)


def can_switch(model: Any) -> bool:
    """Whether ``model`` can be switched to another attention implementation while it runs (older modelling
    code, e.g. Falcon's and Bloom's, picks its attention by its own flags and cannot)."""
    setter = getattr(model, "set_attn_implementation", None)
    can = getattr(model, "_can_set_attn_implementation", None)
    return callable(setter) and (not callable(can) or bool(can()))


def attention_function(name: str, module: Any) -> Callable:
    """The attention function ``name`` (``"eager"``: ``module``'s own modelling file's) that a kernel
    receiver may call itself, e.g. to run the model's own computation under ``torch.no_grad``."""
    return _implementation_function(name, module)


def _implementation_function(name: str, module: Any) -> Callable:
    if name == "eager":  # each modelling file has its own (Gemma 2's soft-caps, GPT-2's scales by layer, ...)
        eager = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
        if eager is None:
            raise AttnflowError(f"{type(module).__name__} has no eager attention function to fall back on")
        return eager
    from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

    return ALL_ATTENTION_FUNCTIONS[name]


def _dispatcher(base: str) -> tuple[Callable, Callable]:
    """The attention and mask functions registered for models whose own implementation is ``base``."""

    def attention(module: Any, query: Any, key: Any, value: Any, attention_mask: Any, **kwargs: Any) -> Any:
        points = _KERNEL_OWNERS.get(id(module))
        chosen = base
        if points is not None:
            layer = points.layer_of(module)  # None for a module no layer point names (cross-attention)
            for receiver in _receivers(points, f"layers.{layer}.attn.kernel") if layer is not None else ():
                out = receiver(module, query, key, value, attention_mask, **kwargs)
                if out is not None:
                    return out
            chosen = _ATTENTION.get().get(id(points), base)
        return _implementation_function(chosen, module)(module, query, key, value, attention_mask, **kwargs)

    def mask(*args: Any, **kwargs: Any) -> Any:
        from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

        # a mask is built once per forward pass, with no module in hand: the implementation this context
        # chose for a model (one model runs at a time in a context), else the model's own
        chosen = next(iter(_ATTENTION.get().values()), base)
        return ALL_MASK_ATTENTION_FUNCTIONS[chosen if chosen in ALL_MASK_ATTENTION_FUNCTIONS else "eager"](
            *args, **kwargs)

    return attention, mask


def _dispatch_name(base: str) -> str:
    return "attnflow_" + "".join(c if c.isalnum() else "_" for c in base).replace("flash", "fa")


def _switch(model: Any, points: HookPoints, installed: _Installed) -> None:
    """Put ``model`` on the dispatching function (first scope that needs it)."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    previous = implementation(model)
    name = _dispatch_name(previous)
    if not _REGISTERED.get(name):
        attention, mask = _dispatcher(previous)
        AttentionInterface.register(name, attention)
        AttentionMaskInterface.register(name, mask)
    _REGISTERED[name] = _REGISTERED.get(name, 0) + 1
    installed.previous = previous
    for module in model.modules():  # every attention call of the model (cross-attention too) finds its scope
        _KERNEL_OWNERS[id(module)] = points
    if can_switch(model):
        model.set_attn_implementation(name)
    if implementation(model) != name:
        _unswitch(model, points, installed)
        raise AttnflowError(f"{type(model).__name__} cannot switch its attention implementation while it runs "
                            f"(it runs on {previous!r}); load it with attn_implementation='eager'")


def _unswitch(model: Any, points: HookPoints, installed: _Installed) -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    previous = installed.previous or "eager"
    name = _dispatch_name(previous)
    try:
        if implementation(model) == name:
            model.set_attn_implementation(previous)
    finally:
        for module in model.modules():
            _KERNEL_OWNERS.pop(id(module), None)
        _REGISTERED[name] -= 1
        if not _REGISTERED[name]:
            del _REGISTERED[name]
            AttentionInterface._global_mapping.pop(name, None)
            AttentionMaskInterface._global_mapping.pop(name, None)
        installed.previous = None


@dataclass
class Scope:
    """What ``receiving`` did: ``attention`` is the implementation this scope's calls run on."""

    points: HookPoints
    attention: str


@contextmanager
def receiving(model: Any, receivers: Mapping[str, Callable | Any], *,
              attention: str | None = None) -> Iterator[Scope]:
    """For the block, call ``receivers[name]`` (a function, or a list of them) at each named point of
    ``model`` in this thread's calls; ``attention``: the implementation the model's attention runs on in
    those calls (``"eager"`` returns weights, ``"sdpa"`` is fast; None: the enclosing scope's, else the
    model's own). Scopes nest
    (an inner scope's receivers run after the outer's at the same point). Everything is taken off the
    model when the last scope using it ends (see the module docstring)."""
    points = hook_points(model)
    wanted: dict[str, tuple[Callable, ...]] = {}
    for name, given in receivers.items():
        point = points[name]  # refuses an unknown name before anything is installed
        functions = tuple(given) if isinstance(given, (list, tuple)) else (given,)
        if not all(callable(f) for f in functions):
            raise AttnflowError(f"the receiver of {point.name!r} must be a function")
        wanted[name] = functions
    kernel = any(points[name].kind == "kernel" for name in wanted)
    switch = kernel or (attention is not None and attention != implementation(model))
    with _LOCK:
        installed = _INSTALLED.get(model)
        if installed is None:
            installed = _INSTALLED[model] = _Installed()
        if switch:
            if not installed.attention_users:
                _switch(model, points, installed)
            installed.attention_users += 1
        try:
            for name in wanted:
                if not installed.users.get(name):
                    installed.removers[name] = _install(points, points[name])
                installed.users[name] = installed.users.get(name, 0) + 1
        except BaseException:
            _release(model, points, installed, [n for n in wanted if n in installed.users], switch)
            raise
    # None: the enclosing scope's choice for this model in this context, else the model's own (a scope
    # that only adds receivers must not put an enclosing SDPA scope's calls back on eager attention)
    chosen = (attention or _ATTENTION.get().get(id(points)) or (installed.previous if switch else None)
              or implementation(model))
    active = dict(_ACTIVE.get())
    for name, functions in wanted.items():
        active[(id(points), name)] = active.get((id(points), name), ()) + functions
    token = _ACTIVE.set(active)
    attention_token = _ATTENTION.set({**_ATTENTION.get(), id(points): chosen}) if switch else None
    try:
        yield Scope(points, chosen)
    finally:
        if attention_token is not None:
            _ATTENTION.reset(attention_token)
        _ACTIVE.reset(token)
        with _LOCK:
            _release(model, points, installed, list(wanted), switch)


def _release(model: Any, points: HookPoints, installed: _Installed, names: list[str], switch: bool) -> None:
    errors = []
    for name in names:
        installed.users[name] -= 1
        if not installed.users[name]:
            del installed.users[name]
            try:
                installed.removers.pop(name)()
            except Exception as exc:  # pragma: no cover - keep taking the rest off
                errors.append(exc)
    if switch:
        installed.attention_users -= 1
        if not installed.attention_users:
            _unswitch(model, points, installed)
    if not installed.users and not installed.attention_users:
        _INSTALLED.pop(model, None)
    if errors:  # pragma: no cover
        raise errors[0]


def installed_on(model: Any) -> dict[str, int]:
    """Point name -> scopes using it now on ``model`` (empty when attnflow has nothing on it)."""
    with _LOCK:
        installed = _INSTALLED.get(model)
        return dict(installed.users) if installed is not None else {}
