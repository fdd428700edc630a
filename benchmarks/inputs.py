"""The benchmark corpus for attention flow: real attention of three models on four kinds of natural text,
peaky random graphs like real heads, and the smooth random graphs earlier benchmarks used.

    PYTHONPATH=src python benchmarks/inputs.py [--n 128]     # describe the corpus at one size

Every flow goal is reported on every input kind and judged on the worst (issue 31). Kinds:

- ``bundled/<text>``: attnflow's default model (the bundled agreement classifier: 6 layers, 8 heads,
  at most 64 positions; its word-level vocabulary maps most words of free text to ``[UNK]``).
- ``minilm/<text>``: all-MiniLM-L6-v2 (6 layers, 12 heads, up to 512 tokens).
- ``smollm2/<text>``: SmolLM2-135M-Instruct (30 layers, 9 heads, causal); its first ``layers``
  layers (12 in the 12 x n cases) and the last token's row (a decoder has no CLS).
- ``<text>`` is ``prose``, ``dialogue``, ``code`` or ``list`` (benchmarks/texts.py), cut to ``n`` tokens.
- ``peaky a=0.1`` .. ``peaky a=0.3``: Dirichlet(a) rows, mean of 4 heads (a few keys take most of a
  row, as in real heads); ``smooth``: Dirichlet(1) rows, mean of 12 heads (close to uniform: the easy case).

Real attention is captured once per (model, text, n) and kept in ``.cache/inputs/`` (ignored by git):
loading SmolLM2 costs half a minute.
"""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import texts  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
CACHE = ROOT / ".cache" / "inputs"
MODELS = ("bundled", "minilm", "smollm2")
MAX_TOKENS = {"bundled": 64, "minilm": 512, "smollm2": 8192}
PEAKY = (0.1, 0.2, 0.3)


@dataclass
class Input:
    """One graph of the corpus: ``w`` ``(layers, heads, n, n)`` float64 attention (row = query),
    ``target`` the row a user asks for first (0 = ``[CLS]`` for encoders, the last token for decoders)."""

    name: str
    family: str  # "real", "peaky" or "smooth"
    w: np.ndarray
    target: int

    @property
    def size(self) -> str:
        return f"{self.w.shape[0]}x{self.w.shape[-1]}"


_loaded: dict = {}


def _model(name: str):
    if name not in _loaded:
        from attnflow.hf.load import default_model_path, load_model, quiet_transformers

        quiet_transformers()
        _loaded[name] = load_model(default_model_path() if name == "bundled" else name)
    return _loaded[name]


def attention(model, tokenizer, kind: str, n: int) -> np.ndarray:
    """``(layers, heads, n, n)`` float32 attention of a loaded model on the first ``n`` tokens of text
    ``kind`` (special tokens included)."""
    import torch

    enc = tokenizer(texts.text(kind), truncation=True, max_length=n, return_tensors="pt")
    if enc["input_ids"].shape[1] != n:
        raise ValueError(f"text {kind!r} gives {enc['input_ids'].shape[1]} tokens, fewer than {n}")
    if getattr(model.config, "type_vocab_size", 0) == 0:
        enc.pop("token_type_ids", None)
    with torch.no_grad():
        att = model(**enc, output_attentions=True).attentions
    return torch.stack(att)[:, 0].float().numpy()


def real_attention(model: str, kind: str, n: int) -> np.ndarray:
    """``(layers, heads, n, n)`` float64 attention of ``model`` (a name of ``MODELS``) on the first
    ``n`` tokens of text ``kind``, from the cache when it was captured before."""
    path = CACHE / f"{model}-{kind}-{n}.npy"
    if path.exists():
        return np.load(path).astype(np.float64)
    w = attention(*_model(model), kind, n)
    CACHE.mkdir(parents=True, exist_ok=True)
    np.save(path, w)
    return w.astype(np.float64)


def peaky(rng: np.random.Generator, layers: int, n: int, alpha: float, heads: int = 4) -> np.ndarray:
    return rng.dirichlet(np.full(n, alpha), size=(layers, heads, n))


def smooth(rng: np.random.Generator, layers: int, n: int) -> np.ndarray:
    return rng.dirichlet(np.ones(n), size=(layers, 12, n))


def corpus(layers: int, n: int, *, models: tuple[str, ...] = MODELS, kinds: tuple[str, ...] = texts.KINDS,
           peaks: tuple[float, ...] = PEAKY, random: bool = True, seed: int = 0) -> list[Input]:
    """Every input kind at ``layers x n`` (real models at ``min(layers, their depth)`` layers; a model
    that cannot take ``n`` tokens is left out)."""
    out = []
    for model in models:
        if n > MAX_TOKENS[model]:
            continue
        for kind in kinds:
            w = real_attention(model, kind, n)[:layers]
            out.append(Input(f"{model}/{kind}", "real", w, n - 1 if model == "smollm2" else 0))
    if random:
        rng = np.random.default_rng(seed)
        for alpha in peaks:
            out.append(Input(f"peaky a={alpha}", "peaky", peaky(rng, layers, n, alpha), 0))
        out.append(Input("smooth", "smooth", smooth(rng, layers, n), 0))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--layers", type=int, default=12)
    args = parser.parse_args()
    for item in corpus(args.layers, args.n):
        w = item.w.mean(axis=1)
        top = np.sort(w, axis=-1)[..., ::-1]
        print(f"{item.name:<18} {item.size:>8}  mean largest weight {top[..., 0].mean():.2f}, "
              f"mean weight of the 4 largest {top[..., :4].sum(-1).mean():.2f} (fused over heads)")


if __name__ == "__main__":
    main()
