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
    """Scores of one or more methods for one input: ``scores[method][target, layer, source]``.

    Every explanation attnflow makes (one target of a text, every target of a text, a generation, an
    image, an encoder-decoder pair) is this one labelled type:

    - ``target``: what is explained. Text: a token position. Generation: a generated token,
      explained by the position that predicted it (``target_positions[i] = m - 1 + i`` for an
      ``m``-token prompt). Image: the classifier's read-out (the CLS token, or the mean of the patch
      rows). Seq2seq: a target token, explained by the decoder position that predicted it.
    - ``layer``: 0-based; layer ``l`` is the output of the ``(l+1)``-th Transformer layer (rollout's
      ``R_{l+1}``).
    - ``source``: what the target draws on. Text: the input tokens. Generation: the prompt tokens
      followed by the generated tokens. Image: the patches in row-major order of ``grid``. Seq2seq:
      the source tokens, the decoder's start token, then the target tokens.

    A method may be computed for some targets and layers only (flow costs one max-flow per target,
    source and layer): those cells are NaN in ``scores[method]`` and ``computed[method]`` says which
    exist; only the computed block is stored. Figures, the report and tables (``plot``, ``to_html``,
    ``table``, ``print``) come from ``attnflow.views``; files from ``attnflow.results.schema``.

    Args:
        kind: "text", "generation", "image" or "seq2seq".
        sources: Labels of the source axis.
        targets: Labels of the target axis.
        target_positions: ``target_positions[i]`` is the position in the model's sequence whose rows
            explain target ``i`` (None for a mean-pooled read-out).
        blocks: Method name -> ``Block``, its computed scores (read them with ``scores``, ``row()``,
            ``top()``).
        n_layers: The model's number of layers.
        target: The default target (an index into ``targets``).
        method: The default method; None: the first of ``blocks``.
        input: The text, the prompt, or the image's name.
        input_length: How many leading sources are the input (the prompt of a generation), the rest
            being generated tokens; None: every source.
        prediction: The model's output (a class label) when there is one.
        model: The model's name or path.
        params: Every setting that produced the scores (residual, head_fusion, causal_norm, solver,
            ...).
        grid: Images: the patch grid (rows, cols).
        image: Images: the image as the model saw it, ``(H, W[, 3])`` in [0, 1].
        meta: Kind-specific extras (a generation's completion and token ids, special-token
            positions, the faithfulness numbers).
        original: Images: the image as given (colours kept, at most 256 pixels on its longer side),
            for figures that show the scores over the user's own picture.

    Raises:
        AttnflowError: Labels, positions and blocks that do not fit together (a block's shape, a
            target or layer index out of range, NaN where a block was computed).

    Examples:
        >>> import attnflow
        >>> result = attnflow.explain("the keys to the cabinet", method="all")
        >>> result.kind, result.sources[:3], result.n_layers
        ('text', ['[CLS]', 'the', 'keys'], 6)
        >>> result.scores["rollout"].shape  # (targets, layers, sources)
        (7, 6, 7)
        >>> result.computed["flow"].targets  # the explained target alone
        (0,)
        >>> result.row("rollout").shape  # (layers, sources) of [CLS]
        (6, 7)
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
        """The computed methods' names, in order."""
        return list(self.blocks)

    @property
    def scores(self) -> Mapping[str, np.ndarray]:
        """Method -> ``(targets, layers, sources)``, NaN where not computed (built on access)."""
        return _DenseScores(self)

    @property
    def computed(self) -> dict[str, Computed]:
        """Method -> which targets and layers hold scores."""
        return {m: Computed(b.targets, b.layers) for m, b in self.blocks.items()}

    @property
    def n_sources(self) -> int:
        """The length of the source axis."""
        return len(self.sources)

    @property
    def n_targets(self) -> int:
        """The length of the target axis."""
        return len(self.targets)

    def block(self, method: str | None = None) -> Block:
        """The computed scores of one method.

        Args:
            method: A computed method; None: the default method.

        Returns:
            Its ``Block``: ``values[i, k, :]`` is target ``targets[i]`` at layer ``layers[k]``.

        Raises:
            AttnflowError: A method this result does not hold.
        """
        method = self.method if method is None else method
        if method not in self.blocks:
            raise AttnflowError(f"this result holds the methods {self.methods}; got {method!r}")
        return self.blocks[method]

    def dense(self, method: str | None = None) -> np.ndarray:
        """One method's scores over every target, layer and source.

        Args:
            method: A computed method; None: the default method.

        Returns:
            ``(targets, layers, sources)``, NaN where not computed.
        """
        block = self.block(method)
        out = np.full((self.n_targets, self.n_layers, self.n_sources), np.nan)
        out[np.ix_(block.targets, block.layers)] = block.values
        return out

    def target_index(self, target: Any = None) -> int:
        """A target as an index into ``targets``.

        Args:
            target: An index (negative counts from the end; digits as text allowed) or a target's label
                (first match, surrounding spaces ignored); None: the default target.

        Returns:
            The index.

        Raises:
            AttnflowError: An index out of range or a label no target has.
        """
        return label_index(self.targets, target, self.target)

    def row(self, method: str | None = None, target: Any = None) -> np.ndarray:
        """How one target draws on every source at every layer.

        Args:
            method: A computed method; None: the default method.
            target: An index or label, as in ``target_index``; None: the default target.

        Returns:
            ``(layers, sources)``, NaN at layers the method was not computed for.

        Raises:
            AttnflowError: A target the method was not computed for.
        """
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
        """One target's scores over the sources at one layer, or averaged over layers.

        Args:
            method: A computed method; None: the default method.
            target: An index or label, as in ``target_index``; None: the default target.
            layer: A layer (0-based, negative from the top) or ``"mean"`` (over the computed layers).
                None: the kind's default, the top layer for text and images and the mean over layers for
                generations (the refined method's bar chart).

        Returns:
            ``(sources,)``.

        Raises:
            AttnflowError: A layer out of range or one the method was not computed at.
        """
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
        """The highest-scoring input sources (the prompt of a generation) of one target.

        Args:
            k: How many.
            method: A computed method; None: the default method.
            target: An index or label, as in ``target_index``; None: the default target.
            layer: As in ``layer_scores``.
            skip: Source positions to leave out.
            content_only: Leave out punctuation and very common words (``attnflow.results.words``).

        Returns:
            Up to ``k`` tuples ``(source position, label, score)``, highest first.

        Examples:
            >>> import attnflow
            >>> result = attnflow.explain("the keys to the cabinet")
            >>> [token for _, token, _ in result.top(2)]  # rollout, [CLS], top layer
            ['keys', 'the']
        """
        values = self.layer_scores(method, target, layer)[: self.input_length]
        skipped = set(int(s) for s in skip)
        keep = (lambda j: j not in skipped and is_content(self.sources[j])) if content_only \
            else (lambda j: j not in skipped)
        return ranked(values, self.sources, k, keep=keep)

    @property
    def M(self) -> np.ndarray:  # noqa: N802 (the paper's name)
        """``(targets, input sources, layers)`` of the default method.

        For a generation, the refined method's ``M[n_generated, m_prompt, layers]``: the raw share of each
        generated token's row on each prompt token, not re-normalised over the prompt.
        """
        return self.dense()[:, :, : self.input_length].transpose(0, 2, 1)

    def grid_scores(self, method: str | None = None, layer: int | str | None = -1, target: Any = None) -> np.ndarray:
        """Images: the patch scores as the patch grid.

        Args:
            method: A computed method; None: the default method.
            layer: As in ``layer_scores``; default the top layer.
            target: As in ``row``.

        Returns:
            ``(rows, cols)``.

        Raises:
            AttnflowError: A result without a patch grid (not an image).
        """
        if self.grid is None:
            raise AttnflowError("grid_scores is for image results; this one has no patch grid")
        return self.layer_scores(method, target, layer).reshape(self.grid)

    def select(self, methods: Any = None, targets: Any = None) -> Attribution:
        """The same result restricted to some methods and targets.

        The axes and labels stay as they are. The default method and target follow the selection; a
        faithfulness record is kept while it measured only kept methods.

        Args:
            methods: A method name or names; None: every method.
            targets: Indices or labels; only their computed rows are kept. None: every target.

        Returns:
            A new ``Attribution``.

        Raises:
            AttnflowError: A method this result does not hold, or one not computed for any of the targets.
        """
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
        """The same result with another default target (nothing is recomputed).

        Args:
            target: An index or label, as in ``target_index``.

        Returns:
            A new ``Attribution``.
        """
        return replace(self, target=self.target_index(target))

    # -------------------------------------------------------------------------- files and views

    def to_dict(self) -> dict[str, Any]:
        """The versioned JSON form (see ``attnflow.results.schema``).

        Returns:
            A dict of plain JSON values.
        """
        from attnflow.results.schema import to_dict

        return to_dict(self)

    def to_json(self, path: Any = None, indent: int | None = None) -> str:
        """The JSON text, written atomically to ``path`` when given.

        Args:
            path: A file to write; None: none.
            indent: As in ``json.dumps``.

        Returns:
            The JSON text.
        """
        from attnflow.results.schema import to_json

        return to_json(self, path, indent=indent)

    @classmethod
    def from_dict(cls, data: Any) -> Attribution:
        """A result from its JSON form, including every form written by attnflow 0.1 (see
        ``attnflow.results.schema``).

        Args:
            data: What ``to_dict`` returned (or the parsed JSON file).

        Returns:
            The ``Attribution``.
        """
        from attnflow.results.schema import from_dict

        return from_dict(data, cls)

    @classmethod
    def from_json(cls, text: str) -> Attribution:
        """A result from its JSON text.

        Args:
            text: What ``to_json`` returned.

        Returns:
            The ``Attribution``.
        """
        from attnflow.results.schema import from_json

        return from_json(text, cls)

    def save(self, path: Any) -> str:
        """Write the result atomically: ``.json`` or ``.npz`` (binary, exact) by the path's suffix.

        Args:
            path: The file.

        Returns:
            The path written.
        """
        from attnflow.results.schema import save

        return save(self, path)

    @classmethod
    def load(cls, path: Any) -> Attribution:
        """Read a ``.json`` (any version) or ``.npz`` result file (also ``attnflow.load``).

        Args:
            path: The file.

        Returns:
            The ``Attribution``.
        """
        from attnflow.results.schema import load

        return load(path, cls)

    def to_xarray(self, method: str | None = None) -> Any:
        """One method's scores as an ``xarray.DataArray`` (needs the optional xarray package).

        Args:
            method: A computed method; None: the default method.

        Returns:
            ``scores[method]`` with dims (target, layer, source) and the labels as coordinates.

        Raises:
            AttnflowError: xarray is not installed.
        """
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
        generated token, overlays for images.

        Args:
            path: Where to write it (PNG, SVG or PDF by the suffix); None: return the figure.
            **options: Passed to the kind's figure function (text results draw into ``ax=``, one Axes per
                method, as captum's visualisers take an axis).

        Returns:
            The path written, or the matplotlib Figure without ``path``.
        """
        return presenter().plot(self, path, **options)

    def to_html(self, path: Any = None, title: str | None = None) -> str:
        """The self-contained interactive HTML report (no network).

        Args:
            path: Where to write it; None: return the HTML text.
            title: The report's title; None: made from the input.

        Returns:
            The path written (so a notebook cell does not print 40 KB of HTML), or the HTML text without
            ``path``.
        """
        return presenter().html(self, path, title=title)

    def _repr_html_(self) -> str:
        return presenter().notebook(self)

    def _repr_mimebundle_(self, include: Any = None, exclude: Any = None) -> dict[str, str]:
        """A notebook's view: the interactive report, a PNG of the figure and the table as text."""
        return presenter().mimebundle(self)

    def table(self, k: int = 5, **options: Any) -> Any:
        """A rich table of the top sources: per layer for one method, per method for several, per
        generated token for a generation.

        Args:
            k: How many sources per row.
            **options: Passed to the kind's table (``attnflow.views.table``).

        Returns:
            A ``rich.table.Table``.
        """
        return presenter().table(self, k, **options)

    def print(self, k: int = 5, **options: Any) -> None:
        """Print ``table`` to the terminal.

        Args:
            k: How many sources per row.
            **options: As in ``table``.
        """
        presenter().print(self, k, **options)

    def __str__(self) -> str:
        return presenter().text(self)

    def __repr__(self) -> str:
        return (f"Attribution(kind={self.kind!r}, methods={self.methods}, targets={self.n_targets}, "
                f"layers={self.n_layers}, sources={self.n_sources}, model={self.model!r})")


load = Attribution.load  # attnflow.load / attnflow.results.load: read a saved result
