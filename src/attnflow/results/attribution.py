"""Attribution: the one result type of attnflow.

Every explanation attnflow makes (one target of a text, every target of a text, a generation, an
image) is one labelled tensor per method::

    scores[method][target, layer, source]

- ``method``: "raw", "rollout", "flow", "grad-rollout", ...
- ``target``: what is explained. Text: a token position (targets are the tokens themselves).
  Generation: a generated token, explained by the position that predicted it
  (``target_positions[i] = m - 1 + i`` for an ``m``-token prompt). Image: the classifier's read-out
  (the CLS token, or the mean of the patch rows for mean-pooled models). Seq2seq (encoder-decoder):
  a target token, explained by the decoder position that predicted it (``target_positions[i] = S + i``
  for ``S`` source tokens).
- ``layer``: 0-based; layer ``l`` is the output of the ``(l+1)``-th Transformer layer (rollout's
  ``R_{l+1}``).
- ``source``: what the target draws on. Text: the input tokens. Generation: the prompt tokens
  followed by the generated tokens (``sources[:input_length]`` is the prompt). Image: the patches in
  row-major order of ``grid``. Seq2seq: the source tokens, the decoder's start token, then the target
  tokens (``sources[:input_length]`` is the source); layers are the decoder's.

Methods differ in cost (flow needs one max-flow per target, source and layer), so a method may be
computed for some targets and layers only: those cells are NaN in ``scores[method]``, and
``computed[method]`` says which targets and layers exist. Internally only the computed block is
stored, so one target of a 4,096-token input costs ``layers x 4,096`` numbers, not ``4,096^2``.

Presentation (``plot``, ``to_html``, ``table``, ``print``) is provided by ``attnflow.views``,
which registers itself here when attnflow is imported (results never import views; see
``attnflow.results.presenter``). Reading and writing files is ``attnflow.results.schema``.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from attnflow.errors import AttnflowError
from attnflow.results.block import Block, Computed
from attnflow.results.presenter import presenter
from attnflow.results.ranking import ranked
from attnflow.results.words import is_content

KINDS = ("text", "generation", "image", "seq2seq")


def label_index(labels: Sequence[str], target: Any, default: int) -> int:
    """``target`` as an index into ``labels``: an index (negative counts from the end; digits as text
    allowed), a label (first match, surrounding spaces ignored), or None for ``default``."""
    n = len(labels)
    if target is None:
        return default
    if isinstance(target, str) and target.strip().lstrip("-").isdigit():
        target = int(target.strip())
    if isinstance(target, (int, np.integer)) and not isinstance(target, bool):
        if not -n <= target < n:
            raise AttnflowError(f"target {target} is outside the {n} targets")
        return int(target) % n
    if isinstance(target, str):
        for i, label in enumerate(labels):
            if label.strip() == target.strip():
                return i
        shown = ", ".join(repr(t) for t in labels[:20])
        raise AttnflowError(f"no target {target!r}; the targets are {shown}")
    raise AttnflowError(f"target must be an index or a target's label; got {target!r}")


class _DenseScores(Mapping):
    """``attribution.scores[method]``: the full ``(targets, layers, sources)`` array, NaN where not computed."""

    def __init__(self, owner: Attribution) -> None:
        self._owner = owner

    def __getitem__(self, method: str) -> np.ndarray:
        return self._owner.dense(method)

    def __iter__(self) -> Iterator[str]:
        return iter(self._owner.blocks)

    def __len__(self) -> int:
        return len(self._owner.blocks)


@dataclass(eq=False)
class Attribution:
    """Scores of one or more methods for one input; see the module docstring for the axes.

    kind: "text", "generation", "image" or "seq2seq".
    sources, targets: labels of the source and target axes; ``target_positions[i]`` is the position
        in the model's sequence whose rows explain target ``i`` (None for a mean-pooled read-out).
    blocks: method -> ``Block`` (use ``scores``, ``row()``, ``top()`` to read them).
    n_layers: the model's number of layers.
    target: the default target (index into ``targets``); method: the default method.
    input: the text, the prompt, or the image's name; input_length: how many leading sources are the
        input (the prompt of a generation), the rest being generated tokens.
    prediction: the model's output (a class label) when there is one; model: the model's name or path.
    params: every setting that produced the scores (residual, head_fusion, causal_norm, solver, ...).
    grid: image patch grid (rows, cols); image: the image as the model saw it, ``(H, W[, 3])`` in [0, 1].
    meta: kind-specific extras (a generation's completion and token ids, special-token positions).
    original: images: the image as given (colours kept, at most 256 pixels on its longer side), for
        figures that show the scores over the user's own picture.
    """

    kind: str
    sources: list[str]
    targets: list[str]
    target_positions: list[int | None]
    blocks: dict[str, Block]
    n_layers: int
    target: int = 0
    method: str | None = None
    input: Any = None
    input_length: int | None = None
    prediction: str | None = None
    model: str | None = None
    params: dict[str, Any] = field(default_factory=dict)
    grid: tuple[int, int] | None = None
    image: np.ndarray | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    original: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise AttnflowError(f"kind must be one of {', '.join(KINDS)}; got {self.kind!r}")
        self.sources = [str(s) for s in self.sources]
        self.targets = [str(t) for t in self.targets]
        self.target_positions = [None if p is None else int(p) for p in self.target_positions]
        s, t = len(self.sources), len(self.targets)
        if s == 0 or t == 0:
            raise AttnflowError("an attribution needs at least one source and one target")
        if len(self.target_positions) != t:
            raise AttnflowError(f"{t} targets but {len(self.target_positions)} target positions")
        if not isinstance(self.n_layers, (int, np.integer)) or self.n_layers < 1:
            raise AttnflowError(f"n_layers must be a positive integer; got {self.n_layers!r}")
        self.n_layers = int(self.n_layers)
        if not self.blocks:
            raise AttnflowError("an attribution needs the scores of at least one method")
        for name, block in self.blocks.items():
            self._check_block(name, block)
        if self.method is None:
            self.method = next(iter(self.blocks))
        if self.method not in self.blocks:
            raise AttnflowError(f"method {self.method!r} is not among the computed methods {self.methods}")
        if isinstance(self.target, bool) or not isinstance(self.target, (int, np.integer)) or not 0 <= self.target < t:
            raise AttnflowError(f"target must be an index into the {t} targets; got {self.target!r}")
        self.target = int(self.target)
        if self.input_length is None:
            self.input_length = s
        if not 0 < int(self.input_length) <= s:
            raise AttnflowError(f"input_length must lie in [1, {s}]; got {self.input_length}")
        self.input_length = int(self.input_length)
        if self.grid is not None:
            self.grid = (int(self.grid[0]), int(self.grid[1]))
            if self.grid[0] * self.grid[1] != s:
                raise AttnflowError(f"a {self.grid[0]}x{self.grid[1]} grid needs {self.grid[0] * self.grid[1]} "
                                    f"sources; got {s}")
        if self.image is not None:
            self.image = np.asarray(self.image)
        if self.original is not None:
            self.original = np.asarray(self.original)

    def _check_block(self, name: str, block: Block) -> None:
        values = block.values
        shape = (len(block.targets), len(block.layers), len(self.sources))
        if values.shape != shape:
            raise AttnflowError(f"the {name!r} scores have shape {values.shape}; expected {shape} "
                                f"(computed targets, computed layers, {len(self.sources)} sources)")
        for what, index, size in (("target", block.targets, len(self.targets)), ("layer", block.layers, self.n_layers)):
            if len(set(index)) != len(index) or any(not 0 <= i < size for i in index):
                raise AttnflowError(f"the {name!r} {what} indices must be distinct and in [0, {size}); got {list(index)}")
        if not np.isfinite(values).all():
            raise AttnflowError(f"the {name!r} scores contain NaN or infinite values where they were computed")

    # ----------------------------------------------------------------------------------- reading

    @property
    def methods(self) -> list[str]:
        return list(self.blocks)

    @property
    def scores(self) -> Mapping[str, np.ndarray]:
        """method -> ``(targets, layers, sources)``, NaN where not computed (built on access)."""
        return _DenseScores(self)

    @property
    def computed(self) -> dict[str, Computed]:
        """method -> which targets and layers hold scores."""
        return {m: Computed(b.targets, b.layers) for m, b in self.blocks.items()}

    @property
    def n_sources(self) -> int:
        return len(self.sources)

    @property
    def n_targets(self) -> int:
        return len(self.targets)

    def block(self, method: str | None = None) -> Block:
        method = self.method if method is None else method
        if method not in self.blocks:
            raise AttnflowError(f"this result holds the methods {self.methods}; got {method!r}")
        return self.blocks[method]

    def dense(self, method: str | None = None) -> np.ndarray:
        """``(targets, layers, sources)`` for ``method``, NaN where not computed."""
        block = self.block(method)
        out = np.full((self.n_targets, self.n_layers, self.n_sources), np.nan)
        out[np.ix_(block.targets, block.layers)] = block.values
        return out

    def target_index(self, target: Any = None) -> int:
        """A target by index (negative counts from the end; digits as text allowed) or by its label
        (first match, surrounding spaces ignored); None is the default target."""
        return label_index(self.targets, target, self.target)

    def row(self, method: str | None = None, target: Any = None) -> np.ndarray:
        """``(layers, sources)``: how ``target`` draws on every source at every layer."""
        block = self.block(method)
        t = self.target_index(target)
        if t not in block.targets:
            raise AttnflowError(f"{method or self.method} was computed for targets {list(block.targets)} only; got {t}")
        if len(block.layers) != self.n_layers:
            out = np.full((self.n_layers, self.n_sources), np.nan)
            out[list(block.layers)] = block.values[block.targets.index(t)]
            return out
        return block.values[block.targets.index(t)]

    def layer_scores(self, method: str | None = None, target: Any = None, layer: int | str | None = None) -> np.ndarray:
        """``(sources,)`` at one ``layer`` (0-based, negative from the top) or averaged over the
        computed layers (``"mean"``). None: the kind's default, the top layer for text and images
        and the mean over layers for generations (the refined method's bar chart)."""
        rows = self.row(method, target)
        if layer is None:
            layer = "mean" if self.kind == "generation" else -1
        if layer == "mean":
            return np.nanmean(rows, axis=0) if np.isnan(rows).any() else rows.mean(axis=0)
        if isinstance(layer, bool) or not isinstance(layer, (int, np.integer)) or not -self.n_layers <= layer < self.n_layers:
            raise AttnflowError(f"layer must be an integer in [{-self.n_layers}, {self.n_layers}) or 'mean'; got {layer!r}")
        values = rows[int(layer)]
        if np.isnan(values).all():
            raise AttnflowError(f"{method or self.method} was not computed at layer {int(layer) % self.n_layers}")
        return values

    def top(self, k: int = 5, *, method: str | None = None, target: Any = None, layer: int | str | None = None,
            skip: Sequence[int] = (), content_only: bool = False) -> list[tuple[int, str, float]]:
        """The ``k`` highest ``(source position, label, score)`` among the input sources (the prompt
        of a generation), at ``layer`` (see ``layer_scores``), leaving out ``skip`` and, with
        ``content_only``, punctuation and very common words (see ``attnflow.results.words``)."""
        values = self.layer_scores(method, target, layer)[: self.input_length]
        skipped = set(int(s) for s in skip)
        keep = (lambda j: j not in skipped and is_content(self.sources[j])) if content_only \
            else (lambda j: j not in skipped)
        return ranked(values, self.sources, k, keep=keep)

    @property
    def M(self) -> np.ndarray:  # noqa: N802 (the paper's name)
        """``(targets, input sources, layers)`` of the default method: the refined method's
        ``M[n_generated, m_prompt, layers]`` for a generation (the raw share of each generated
        token's row on each prompt token, not re-normalised over the prompt)."""
        return self.dense()[:, :, : self.input_length].transpose(0, 2, 1)

    def grid_scores(self, method: str | None = None, layer: int | str | None = -1, target: Any = None) -> np.ndarray:
        """Images: ``(rows, cols)`` patch scores at ``layer`` (default the top layer)."""
        if self.grid is None:
            raise AttnflowError("grid_scores is for image results; this one has no patch grid")
        return self.layer_scores(method, target, layer).reshape(self.grid)

    def select(self, methods: Any = None, targets: Any = None) -> Attribution:
        """The same result restricted to ``methods`` (names) and the computed rows of ``targets``
        (indices or labels); the axes and labels stay as they are. The default method and target
        follow the selection; a faithfulness record is kept while it measured only kept methods."""
        names = self.methods if methods is None else [methods] if isinstance(methods, str) else list(methods)
        for name in names:
            self.block(name)
        keep = None if targets is None else {self.target_index(t) for t in targets}
        blocks = {}
        for name in names:
            block = self.blocks[name]
            rows = [i for i, t in enumerate(block.targets) if keep is None or t in keep]
            if not rows:
                raise AttnflowError(f"{name} was not computed for any of the targets {sorted(keep or [])}")
            blocks[name] = Block(block.values[rows], tuple(block.targets[i] for i in rows), block.layers)
        method = self.method if self.method in blocks else names[0]
        target = self.target if keep is None or self.target in keep else min(keep)
        meta = dict(self.meta)
        # a faithfulness record that ranks methods the selection left out would name a best method it lacks
        if set(((meta.get("faithfulness") or {}).get("methods") or {})) - set(blocks):
            del meta["faithfulness"]
        return replace(self, blocks=blocks, method=method, target=target, params=dict(self.params), meta=meta)

    def with_target(self, target: Any) -> Attribution:
        """The same result with another default target (nothing is recomputed)."""
        return replace(self, target=self.target_index(target))

    # -------------------------------------------------------------------------- files and views

    def to_dict(self) -> dict[str, Any]:
        """The versioned JSON form (see ``attnflow.results.schema``)."""
        from attnflow.results.schema import to_dict

        return to_dict(self)

    def to_json(self, path: Any = None, indent: int | None = None) -> str:
        """The JSON text; also written atomically to ``path`` when given."""
        from attnflow.results.schema import to_json

        return to_json(self, path, indent=indent)

    @classmethod
    def from_dict(cls, data: Any) -> Attribution:
        """From the JSON form, including every form written by attnflow 0.1 (see schema)."""
        from attnflow.results.schema import from_dict

        return from_dict(data, cls)

    @classmethod
    def from_json(cls, text: str) -> Attribution:
        from attnflow.results.schema import from_json

        return from_json(text, cls)

    def save(self, path: Any) -> str:
        """Write ``.json`` or ``.npz`` (binary, exact) by the path's suffix, atomically."""
        from attnflow.results.schema import save

        return save(self, path)

    @classmethod
    def load(cls, path: Any) -> Attribution:
        """Read a ``.json`` (any version) or ``.npz`` result file."""
        from attnflow.results.schema import load

        return load(path, cls)

    def to_xarray(self, method: str | None = None) -> Any:
        """``scores[method]`` as an ``xarray.DataArray`` with dims (target, layer, source) and the
        labels as coordinates (needs the optional xarray package)."""
        try:
            import xarray as xr
        except ImportError as exc:
            raise AttnflowError("to_xarray needs xarray: pip install xarray") from exc
        method = self.method if method is None else method
        return xr.DataArray(self.dense(method), dims=("target", "layer", "source"), name=method,
                            coords={"target": np.arange(self.n_targets), "target_label": ("target", self.targets),
                                    "layer": np.arange(1, self.n_layers + 1), "source": np.arange(self.n_sources),
                                    "source_label": ("source", self.sources)},
                            attrs={"kind": self.kind, "model": self.model or "", "method": method})

    def plot(self, path: Any = None, **options: Any) -> Any:
        """The kind's figure: layers x tokens panels for text, bars + prompt x layers map for a
        generated token, overlays for images. With ``path``: written there (PNG/SVG/PDF by suffix),
        returns the path. Without: returns the matplotlib Figure (text results draw into ``ax=``, one
        Axes per method, as captum's visualisers take an axis)."""
        return presenter().plot(self, path, **options)

    def to_html(self, path: Any = None, title: str | None = None) -> str:
        """The self-contained interactive HTML report (no network): written to ``path`` (the path is
        returned, so a notebook cell does not print 40 KB of HTML), or returned as text without one."""
        return presenter().html(self, path, title=title)

    def _repr_html_(self) -> str:
        return presenter().notebook(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        """A notebook's view: the interactive report, a PNG of the figure and the table as text."""
        return presenter().mimebundle(self)

    def table(self, k: int = 5, **options: Any) -> Any:
        """A rich table of the top ``k`` sources (per layer for one method, per method for several)."""
        return presenter().table(self, k, **options)

    def print(self, k: int = 5, **options: Any) -> None:
        """Print ``table`` to the terminal."""
        presenter().print(self, k, **options)

    def __str__(self) -> str:
        return presenter().text(self)

    def __repr__(self) -> str:
        return (f"Attribution(kind={self.kind!r}, methods={self.methods}, targets={self.n_targets}, "
                f"layers={self.n_layers}, sources={self.n_sources}, model={self.model!r})")


load = Attribution.load  # attnflow.load / attnflow.results.load: read a saved result
