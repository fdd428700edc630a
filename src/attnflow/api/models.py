"""One answer to "which model, and what kind?": ``resolve`` turns whatever a user passed (None, a
name, a folder, a ``pathlib.Path``, a ``.gguf`` file, an alias such as ``"smollm2"``, a hub id, or a
loaded model with its tokenizer) into a ``Loaded`` model, tokenizer, name, family and head.

The family and head come from the architecture table (``attnflow.hf.architectures``: the
row's ``family``; the class looked up exactly in the row's ``heads`` and transformers' auto-model
mappings), never from substrings of class names. A family attnflow does not know is added with
``attnflow.register_architecture``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from attnflow.hf.architectures import register_architecture
from attnflow.hf.load import (
    ModelInfo,
    cached_model,
    check_model_path,
    default_model_path,
    inspect_model,
    load_model,
    quiet_transformers,
    read_config,
    resolve_model,
)
from attnflow.hf.pypi_models import find as find_pypi_model
from attnflow.hf.pypi_models import smollm2_path
from attnflow.capture.text import max_length, token_strings
from attnflow.capture.vision import load_vision_model, open_image
from attnflow.errors import AttnflowError
from attnflow.hf.kind import ModelKind, kind_of

# What the CLI and the app need of the model-facing layer, so that they import the api only.
__all__ = ["Loaded", "ModelInfo", "check_model_path", "default_model_path", "describe", "find_pypi_model", "inspect",
           "is_name", "load_model", "load_vision_model", "max_length", "open_image", "quiet_transformers", "read_config",
           "register_architecture", "resolve", "smollm2_path", "token_strings", "unwrap"]


def is_name(model: Any) -> bool:
    """Whether ``model`` names a model to load (None: the default; a string, bytes or path; a
    ``ModelInfo`` already inspected) rather than being a loaded one."""
    return model is None or isinstance(model, (str, bytes, ModelInfo)) or hasattr(model, "__fspath__")


def inspect(model: Any = None, *, task: str = "auto") -> ModelInfo:
    """A model named by the user (anything ``resolve`` takes by name) -> ``ModelInfo``: the
    name resolved once, its ``config.json`` read once, its family and head, every refusal that needs
    no weights made. Entry points call it once and pass the record down."""
    return inspect_model(model, task=task)


def check_loaded(model: Any) -> None:
    """Refuse, in a sentence that says what to pass, what is not a loaded Hugging Face model."""
    if type(model).__name__ == "TransformerBridge":
        raise AttnflowError("a TransformerLens TransformerBridge is not a Hugging Face model: pass the Hugging Face "
                            "model it wraps (a fresh copy: booting a bridge rewires the model's modules) with its "
                            "tokenizer, or explain the bridge's patterns with "
                            "attnflow.explain_attentions(cache) after model.run_with_cache(...)")
    if not hasattr(model, "config") or not callable(model):
        # the type, never the value's repr: a model's is dozens of lines
        raise AttnflowError(f"model must be a name, a model folder, a .gguf file, a loaded Hugging Face model (with "
                            f"its tokenizer) or what attnflow.api.resolve returns; got a {type(model).__name__}")


@dataclass(frozen=True)
class Loaded:
    """A model ready to explain: the model, its tokenizer (None for image models), the name results
    record, its family ("encoder", "decoder", "encoder-decoder", "vision") and head ("base",
    "classification", "causal-lm", "seq2seq", "image-classification", or "" when unknown), and the
    ``ModelKind`` they come from (computed once, when the model was resolved;
    checks and methods read it here)."""

    model: Any
    tokenizer: Any
    name: str
    family: str = ""
    head: str = ""
    info: ModelInfo | None = None  # how it was named, when it was (not for a model passed loaded)
    model_kind: ModelKind | None = None

    def __post_init__(self) -> None:
        if self.model_kind is None:
            object.__setattr__(self, "model_kind", kind_of(self.model))
        if not self.family:
            object.__setattr__(self, "family", self.model_kind.family)
            object.__setattr__(self, "head", self.model_kind.head)

    @property
    def kind(self) -> str:
        """"encoder", "classifier", "decoder", "encoder-decoder" or "vision"."""
        return self.model_kind.name or self.family


def loaded_name(model: Any) -> str:
    """The name a result records for a loaded model: its folder or hub id, else its class."""
    return str(getattr(model, "name_or_path", "") or type(model).__name__)


def check_model_dtype(model: Any, dtype: str) -> None:
    """A loaded model keeps its own dtype: a ``dtype`` other than "auto" it is not in is refused (it would
    record a setting that was not applied)."""
    if dtype == "auto":
        return
    from attnflow.hf.weights import dtype_name

    current = dtype_name(model)
    if current is not None and current != dtype:
        raise AttnflowError(f"the loaded model is in {current} and keeps its own dtype; "
                            f"leave dtype (--dtype) at auto, or pass the model's name to load it in {dtype}")


def resolve(model: Any = None, tokenizer: Any = None, *, task: str = "auto", device: str = "auto",
            dtype: str = "auto") -> Loaded:
    """Whatever the user passed -> ``Loaded``. Names are loaded once and reused (see
    ``attnflow.hf.load.cached_model``; ``task`` as in ``attnflow.load_model``, "vision"
    for image classifiers) on ``device`` ("auto": a GPU when torch sees one) in ``dtype`` ("auto": the
    checkpoint's); a loaded text model needs its ``tokenizer`` and stays where and as it is (a ``device``
    it is not on, or a ``dtype`` it is not in, is refused)."""
    from attnflow.api.devices import check_model_device, pick_device
    from attnflow.config.settings import check_choice

    check_choice("dtype", dtype)

    if isinstance(model, Loaded):  # resolved once already: bind it and reuse it
        check_model_device(model.model, device)
        check_model_dtype(model.model, dtype)
        if tokenizer is not None and tokenizer is not model.tokenizer:
            return Loaded(model=model.model, tokenizer=tokenizer, name=model.name, family=model.family,
                          head=model.head, info=model.info, model_kind=model.model_kind)
        return model
    info = None
    if is_name(model):
        if task == "vision":
            from attnflow.capture.vision import cached_vision_model

            path = model.path if isinstance(model, ModelInfo) else model
            model, tokenizer = cached_vision_model(path, device=pick_device(device), dtype=dtype), None
        else:
            info = inspect_model(model, task=task)
            model, tokenizer = cached_model(info, device=pick_device(device), dtype=dtype)
    else:
        check_loaded(model)
        check_model_device(model, device)
        check_model_dtype(model, dtype)
        if tokenizer is None and task != "vision":
            raise AttnflowError("pass the tokenizer together with a loaded model")
    kind = kind_of(model)  # told by the config's record when it was read (cached_model remembers it)
    return Loaded(model=model, tokenizer=tokenizer, name=loaded_name(model), family=kind.family, head=kind.head,
                  info=info, model_kind=kind)


def unwrap(model: Any, tokenizer: Any = None) -> tuple[Any, Any]:
    """``(model, tokenizer)`` for an entry point: a ``Loaded`` (what ``resolve`` returns, bound
    once and passed again) gives its model and tokenizer (``tokenizer`` given wins); anything else is
    returned as it is."""
    if isinstance(model, Loaded):
        return model.model, tokenizer if tokenizer is not None else model.tokenizer
    return model, tokenizer


def describe(model: Any) -> tuple[str, str]:
    """(family, head) of a model folder from its ``config.json`` alone (no weights read), or of a
    loaded model."""
    if isinstance(model, ModelInfo):
        if not model.config:
            raise AttnflowError(f"{model.path!r} has no config.json; pass a model folder")
        return model.family, model.head
    if isinstance(model, Loaded):
        return model.family, model.head
    if not is_name(model):
        kind = kind_of(model)
        return kind.family, kind.head
    folder = Path(resolve_model(model))
    config_file = folder / "config.json"
    if not config_file.is_file():
        raise AttnflowError(f"{str(folder)!r} has no config.json; pass a model folder")
    kind = kind_of(read_config(config_file))
    return kind.family, kind.head
