"""Faithfulness of token scores to the model's own prediction: leave-one-out Spearman and AOPC.

Given one input (its token ids), a ``predict`` callable, the output to explain (a class of a
classifier, or the next token a decoder predicts at the last position) and per-layer scores of one
or more methods, ``evaluate`` measures, for every method and layer:

- ``spearman``: Spearman's rho (``attnflow.evaluation.correlation.spearman``) between the
  method's scores and the *leave-one-out* importance of each ranked token, ``z_c(x) - z_c(x \\ x_i)``,
  the drop of the explained output's **logit** ``z_c`` when token ``i`` is deleted from the input
  (Jain & Wallace, NAACL 2019; ferret's ``taucorr_loo`` uses the same occlusion, ranked with
  Kendall's tau on probabilities; the issue asks for Spearman on the logit).
- ``comprehensiveness`` and ``sufficiency``: ferret's AOPC definitions (Attanasio et al. 2023,
  following DeYoung et al., ACL 2020, "ERASER"). With ``p_c`` the softmax probability of the explained
  output and ``r_k`` the ``k`` highest-scoring ranked tokens, comprehensiveness at ``k`` is
  ``p_c(x) - p_c(x \\ r_k)`` (delete the top tokens: a faithful method makes the probability fall,
  higher is better) and sufficiency at ``k`` is ``p_c(x) - p_c(r_k)`` (keep only them: lower is
  better). For each fraction ``f`` in ``fractions`` (default 10, 20 and 50 %), ``k = floor(f * m)``
  over the ``m`` ranked tokens, as ferret's percentage rule does; a level with ``k = 0``, or whose
  top-``k`` set equals the previous level's, is skipped (ferret counts a removal once), and the
  AOPC is the mean over the remaining levels (NaN if none remains). Ties in a method's scores go to
  the earlier position.

Ties in leave-one-out are ties in the maths, kept as ties here (``merge_ties``): deleting any
token that the explained position cannot see (outside a sliding window, say) changes its logit by
exactly zero in the maths, yet by a few units in the last place in floating point, by an amount
that depends on how the passes were batched and on the machine's kernels. Drops closer than
``TIE_ULPS`` units in the last place of the largest logit (at the precision the model computed in)
are merged into one value, so that the ranks, and Spearman's rho, do not depend on that noise.

Position as a rival (``attnflow.evaluation.position``): for every method and layer also
``partial`` (Spearman with leave-one-out given position), ``position`` (Spearman of the ranking with
position: the views add "this ranking mostly reflects position" at ``|rho| >= 0.9``) and, at the top
layer, ``interval`` (a 95 % bootstrap interval of rho over the ranked tokens); ``priors`` holds the rho
and interval of the two position priors (later first, earlier first); ``Faithfulness.best`` names
the method or prior that agrees best on this input.

Which tokens are ranked (``positions``): by default every token except special tokens and the
target position (the read-out: ``[CLS]`` of a classifier, the last token of a decoder). Special
tokens and the target are never deleted, so the explained output is read at the same token; this
mirrors ferret leaving ``[CLS]``/``[SEP]`` in place. Deleting means removing the id from the
sequence (ferret's default); ``fill_id`` replaces it instead (the paper's blank-out protocol).
Unlike ferret, the ids are edited directly rather than decoded to text and re-tokenized, so a
deletion never merges or splits neighbouring tokens.

This module sees no model: ``predict(batch)`` takes a list of token-id lists (lengths may differ)
and returns the logits of the explained output, ``(len(batch), classes)`` (a decoder's
``(len(batch), vocab)`` at the last position). ``attnflow.api.faithfulness`` builds it for Hugging
Face models. Identical id sequences are evaluated once.

API (stable; ``attnflow.api.faithfulness`` and the decoder study use it)::

    report = evaluate(predict, ids, scores, target=None, positions=None, fractions=(0.1, 0.2, 0.5),
                      fill_id=None, progress=None)        # -> Faithfulness
    scores: an Attribution (its methods' rows for its target) or {name: (layers, n) or (n,)}
    report.spearman[name], report.comprehensiveness[name], report.sufficiency[name]  # (layers,)
    report.loo                  # (n,) logit drop per position, NaN where not ranked
    report.to_dict(); Faithfulness.from_dict(d)             # JSON-ready (NaN -> None)
    leave_one_out(predict, ids, positions, output, fill_id=None) -> (n,)
    aopc(predict, ids, scores (layers, n), positions, output, fractions, fill_id=None) -> (compr, suff)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from attnflow.errors import AttnflowError
from attnflow.evaluation.correlation import spearman
from attnflow.evaluation.position import partial_spearman, position_rho, priors, spearman_interval

FRACTIONS = (0.1, 0.2, 0.5)
# Leave-one-out drops closer than this many units in the last place of the largest logit are one value
# (module docstring): float64 noise across batch shapes is a few ulps, float32's through 30 layers tens.
TIE_ULPS = 256

Predict = Callable[[list[list[int]]], Any]
Progress = Callable[[int, int], None]


class _Outputs:
    """``predict`` with each distinct id sequence evaluated once, outputs as float64 logits."""

    def __init__(self, predict: Predict, output: int | None, progress: Progress | None = None) -> None:
        self._predict, self.output, self._progress = predict, output, progress
        self._cache: dict[tuple[int, ...], np.ndarray] = {}
        self.done, self.total = 0, 0
        self.eps = float(np.finfo(np.float64).eps)  # of the precision predict computed in (the coarsest seen)

    def expect(self, count: int) -> None:
        self.total += count

    def logits(self, batch: Sequence[Sequence[int]]) -> np.ndarray:
        keys = [tuple(int(i) for i in ids) for ids in batch]
        todo = list(dict.fromkeys(k for k in keys if k not in self._cache))
        # ``predict.batch_size`` sequences per call (default: all at once), progress after each: a bar
        # over one call of a few hundred sequences would sit still, then jump
        step = max(1, int(getattr(self._predict, "batch_size", 0) or len(todo) or 1))
        for start in range(0, len(todo), step):
            part = todo[start:start + step]
            raw = self._predict([list(k) for k in part])
            self.eps = max(self.eps, _eps(raw))
            out = np.asarray(_numpy(raw), dtype=np.float64)
            if out.ndim != 2 or out.shape[0] != len(part):
                raise AttnflowError(f"predict must return logits of shape (batch, outputs) = ({len(part)}, ...); "
                                    f"got {out.shape}")
            self._cache.update(zip(part, out))
            self._report(self.done + start + len(part))
        self.done += len(keys)
        self._report(self.done)
        return np.stack([self._cache[k] for k in keys])

    def _report(self, done: int) -> None:
        if self._progress is not None:
            self._progress(min(done, self.total), max(self.total, done))

    def logit(self, batch: Sequence[Sequence[int]]) -> np.ndarray:
        return self.logits(batch)[:, self.output]

    def probability(self, batch: Sequence[Sequence[int]]) -> np.ndarray:
        z = self.logits(batch)
        z = z - z.max(axis=1, keepdims=True)  # float64 softmax: confident outputs keep their digits
        return np.exp(z[:, self.output]) / np.exp(z).sum(axis=1)


def _numpy(x: Any) -> np.ndarray:
    return x.detach().cpu().double().numpy() if hasattr(x, "detach") else np.asarray(x, dtype=float)


def _eps(x: Any) -> float:
    """Machine epsilon of the floating type ``x`` was computed in (a tensor's or an array's dtype)."""
    dtype = getattr(x, "dtype", None)
    if dtype is not None and hasattr(dtype, "is_floating_point"):  # a torch dtype (torch is loaded then)
        import torch

        return float(torch.finfo(dtype).eps) if dtype.is_floating_point else 0.0
    dtype = np.asarray(x).dtype
    return float(np.finfo(dtype).eps) if np.issubdtype(dtype, np.floating) else 0.0


def merge_ties(values: Any, tol: float) -> np.ndarray:
    """``values`` with every run of values whose neighbours (in sorted order) lie within ``tol`` of each
    other replaced by the run's mean: differences at the level of rounding noise become exact ties."""
    v = np.asarray(values, dtype=float).copy()
    order = np.argsort(v, kind="stable")
    start = 0
    for i in range(1, len(order) + 1):
        if i == len(order) or v[order[i]] - v[order[i - 1]] > tol:
            if i - start > 1:
                v[order[start:i]] = v[order[start:i]].mean()
            start = i
    return v


def _edit(ids: Sequence[int], drop: Sequence[int], fill_id: int | None) -> list[int]:
    """``ids`` without the positions ``drop`` (or with them set to ``fill_id``)."""
    gone = set(int(p) for p in drop)
    if fill_id is None:
        return [int(t) for p, t in enumerate(ids) if p not in gone]
    return [int(fill_id) if p in gone else int(t) for p, t in enumerate(ids)]


def leave_one_out(predict: Predict | _Outputs, ids: Sequence[int], positions: Sequence[int], output: int, *,
                  fill_id: int | None = None) -> np.ndarray:
    """``(n,)``: ``z(x) - z(x without token i)`` of the explained output's logit for each ``i`` in
    ``positions`` (NaN elsewhere). ``fill_id`` replaces the token instead of deleting it."""
    model = predict if isinstance(predict, _Outputs) else _Outputs(predict, output)
    base = model.logit([ids])[0]
    out = np.full(len(ids), np.nan)
    if len(positions):
        out[list(positions)] = base - model.logit([_edit(ids, [p], fill_id) for p in positions])
    return out


def _top(values: np.ndarray, positions: Sequence[int], k: int) -> list[int]:
    """The ``k`` highest-scoring ``positions`` (ties: the earlier position first)."""
    order = sorted(range(len(positions)), key=lambda j: (-values[positions[j]], positions[j]))
    return [positions[j] for j in order[:k]]


def aopc(predict: Predict | _Outputs, ids: Sequence[int], scores: Any, positions: Sequence[int], output: int,
         fractions: Sequence[float] = FRACTIONS, *, fill_id: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """AOPC comprehensiveness and sufficiency per layer (see the module docstring) for ``scores``
    ``(layers, n)`` (or ``(n,)``: one layer) over the ranked ``positions``. Returns two ``(layers,)``."""
    model = predict if isinstance(predict, _Outputs) else _Outputs(predict, output)
    rows = np.atleast_2d(np.asarray(scores, dtype=float))
    base = model.probability([ids])[0]
    compr, suff = np.full(len(rows), np.nan), np.full(len(rows), np.nan)
    m = len(positions)
    for layer, row in enumerate(rows):
        levels, previous = [], None
        for f in fractions:
            k = int(f * m + 1e-9)  # floor, as ferret; the epsilon keeps 0.1 * 30 from rounding down
            top = _top(row, list(positions), k) if k > 0 else None
            if top is None or (previous is not None and set(top) == previous):
                continue
            previous = set(top)
            levels.append(top)
        if not levels:
            continue
        without = [_edit(ids, top, fill_id) for top in levels]
        only = [_edit(ids, [p for p in positions if p not in set(top)], fill_id) for top in levels]
        compr[layer] = float(np.mean(base - model.probability(without)))
        suff[layer] = float(np.mean(base - model.probability(only)))
    return compr, suff


@dataclass
class Faithfulness:
    """Per method and layer: Spearman with leave-one-out, AOPC comprehensiveness and sufficiency.

    output: the explained class or vocabulary id; label: its name (class label or token text);
    logit/probability: of that output on the whole input. positions: the ranked token positions.
    loo: ``(n,)`` logit drop per position (NaN where not ranked). fractions: the AOPC levels.
    spearman / comprehensiveness / sufficiency: method -> ``(layers,)`` (NaN where undefined: a
    constant score, or no AOPC level left). partial / position: method -> ``(layers,)``, Spearman
    with leave-one-out given position, and of the ranking with position. interval: method -> the
    top layer's 95 % bootstrap interval of rho. priors: prior name -> {"spearman", "interval"}.
    (Records written before these existed read back with them empty.)
    """

    output: int
    label: str
    logit: float
    probability: float
    positions: list[int]
    loo: np.ndarray
    fractions: tuple[float, ...]
    spearman: dict[str, np.ndarray]
    comprehensiveness: dict[str, np.ndarray]
    sufficiency: dict[str, np.ndarray]
    deletion: str = "delete"
    meta: dict[str, Any] = field(default_factory=dict)
    partial: dict[str, np.ndarray] = field(default_factory=dict)
    position: dict[str, np.ndarray] = field(default_factory=dict)
    interval: dict[str, list[float]] = field(default_factory=dict)
    priors: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def methods(self) -> list[str]:
        return list(self.spearman)

    def best(self, layer: int = -1) -> tuple[str, float] | None:
        """The method or position prior whose ranking agrees best with leave-one-out on this input
        (highest rho; a method at ``layer``, default its top layer), with that rho; None if none is
        defined. A tie goes to the prior (a method that only equals position has not beaten it)."""
        found = [(p, float(v["spearman"])) for p, v in self.priors.items() if v.get("spearman") is not None
                 and np.isfinite(v["spearman"])]
        found += [(m, float(v[layer])) for m, v in self.spearman.items() if np.isfinite(v[layer])]
        return max(found, key=lambda kv: round(kv[1], 12)) if found else None

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON values (NaN -> None)."""
        return {"output": self.output, "label": self.label, "logit": _json(self.logit),
                "probability": _json(self.probability), "positions": list(self.positions),
                "loo": _json(self.loo), "fractions": list(self.fractions), "deletion": self.deletion,
                "methods": {m: {"spearman": _json(self.spearman[m]),
                                "comprehensiveness": _json(self.comprehensiveness[m]),
                                "sufficiency": _json(self.sufficiency[m]),
                                **({"partial": _json(self.partial[m])} if m in self.partial else {}),
                                **({"position": _json(self.position[m])} if m in self.position else {}),
                                **({"interval": _json(self.interval[m])} if m in self.interval else {})}
                            for m in self.methods},
                **({"priors": {p: {k: _json(v) for k, v in d.items()} for p, d in self.priors.items()}}
                   if self.priors else {}),
                **({"best": {"method": best[0], "spearman": _json(best[1])}} if (best := self.best()) else {}),
                **({"meta": self.meta} if self.meta else {})}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Faithfulness:
        try:
            per = data["methods"]
            return cls(output=int(data["output"]), label=str(data["label"]), logit=_float(data["logit"]),
                       probability=_float(data["probability"]), positions=[int(p) for p in data["positions"]],
                       loo=_array(data["loo"]), fractions=tuple(float(f) for f in data["fractions"]),
                       spearman={m: _array(v["spearman"]) for m, v in per.items()},
                       comprehensiveness={m: _array(v["comprehensiveness"]) for m, v in per.items()},
                       sufficiency={m: _array(v["sufficiency"]) for m, v in per.items()},
                       deletion=str(data.get("deletion", "delete")), meta=dict(data.get("meta") or {}),
                       partial={m: _array(v["partial"]) for m, v in per.items() if "partial" in v},
                       position={m: _array(v["position"]) for m, v in per.items() if "position" in v},
                       interval={m: list(_array(v["interval"])) for m, v in per.items() if "interval" in v},
                       priors={p: {k: _float(x) if np.ndim(x) == 0 else list(_array(x)) for k, x in d.items()}
                               for p, d in (data.get("priors") or {}).items()})
        except (KeyError, TypeError, ValueError) as exc:
            raise AttnflowError(f"not a faithfulness record ({type(exc).__name__}: {exc})") from exc


def _json(x: Any) -> Any:
    if np.ndim(x) == 0:
        v = float(x)
        return v if np.isfinite(v) else None
    return [_json(v) for v in np.asarray(x, dtype=float)]


def _float(x: Any) -> float:
    return float("nan") if x is None else float(x)


def _array(values: Any) -> np.ndarray:
    return np.array([np.nan if v is None else float(v) for v in values], dtype=float)


def _method_rows(scores: Any, n: int) -> dict[str, np.ndarray]:
    """``{name: (layers, n)}`` from an Attribution (its target's rows) or a mapping."""
    if hasattr(scores, "blocks") and hasattr(scores, "row"):
        if scores.kind != "text":
            raise AttnflowError(f"faithfulness is measured on text results; got a {scores.kind!r} result")
        rows = {m: np.asarray(scores.row(m), dtype=float) for m in scores.methods}
    elif isinstance(scores, Mapping) and scores:
        rows = {str(m): np.atleast_2d(np.asarray(v, dtype=float)) for m, v in scores.items()}
    else:
        raise AttnflowError("scores must be an Attribution or a non-empty mapping of method -> (layers, n) scores")
    for m, r in rows.items():
        if r.ndim != 2 or r.shape[1] != n:
            raise AttnflowError(f"scores for {m!r} have shape {r.shape}; expected (layers, {n}) for {n} tokens")
    return rows


def default_positions(n: int, special: Sequence[int], target: int) -> list[int]:
    """Every position except special tokens and ``target`` (see the module docstring)."""
    skip = {int(s) for s in special} | {int(target) % n}
    return [p for p in range(n) if p not in skip]


def evaluate(predict: Predict, ids: Sequence[int], scores: Any, *, output: int | None = None,
             positions: Sequence[int] | None = None, special: Sequence[int] = (), target: int | None = None,
             fractions: Sequence[float] = FRACTIONS, fill_id: int | None = None, label: str | None = None,
             progress: Progress | None = None, loo: Any = None, aopc_levels: bool = True) -> Faithfulness:
    """Leave-one-out Spearman and AOPC for every method and layer of ``scores``.

    predict: token-id lists -> logits ``(batch, outputs)`` of the explained output (module docstring).
    ids: the input's token ids, ``(n,)``. scores: an ``Attribution`` (every
    method's rows for its default target) or ``{name: (layers, n) or (n,)}``.
    output: the class / vocabulary id explained; None: the argmax of ``predict([ids])``.
    positions: the ranked (and deletable) positions; None: all but ``special`` and ``target``
    (an Attribution supplies both from its meta and default target).
    loo: the leave-one-out drops ``(n,)`` already computed for ``output`` (e.g. by a decoder's cached
    occlusion, ``attnflow.interventions.ablation.occlusion``); None: computed here with ``predict``.
    aopc_levels: False skips AOPC (comprehensiveness and sufficiency are NaN), for a quick check.
    """
    ids = [int(i) for i in np.asarray(ids).reshape(-1)]
    n = len(ids)
    rows = _method_rows(scores, n)
    if hasattr(scores, "meta"):
        special = scores.meta.get("special", special) if not special else special
        target = scores.target_positions[scores.target] if target is None else target
    if fractions is None or not len(fractions) or any(not 0 < float(f) <= 1 for f in fractions):
        raise AttnflowError(f"fractions must be numbers in (0, 1]; got {fractions!r}")
    if positions is None:
        positions = default_positions(n, special, n - 1 if target is None else target)
    if any(not -n <= int(p) < n for p in positions):
        raise AttnflowError(f"positions must lie in [{-n}, {n}) for a {n}-token input; got {list(positions)}")
    positions = sorted({int(p) % n for p in positions})
    if len(positions) < 2:
        raise AttnflowError(f"need at least 2 tokens to rank besides the target and special tokens; "
                            f"this input has {len(positions)}")
    model = _Outputs(predict, output, progress)
    # every pass up front, so that the bar's total (and its ETA) holds from the start
    # (the whole input is looked up again by leave_one_out and by each method's aopc: cached, but counted)
    model.expect(1 + (1 + len(positions) if loo is None else 0)
                 + (sum(1 + 2 * len(r) * len(fractions) for r in rows.values()) if aopc_levels else 0))
    base = model.logits([ids])[0]
    model.output = int(np.argmax(base)) if output is None else int(output)
    if not 0 <= model.output < len(base):
        raise AttnflowError(f"output must be an index into the model's {len(base)} outputs; got {output!r}")
    if loo is None:
        loo = leave_one_out(model, ids, positions, model.output, fill_id=fill_id)
    else:
        given = np.asarray(loo, dtype=float).reshape(-1)
        if given.shape != (n,) or not np.isfinite(given[positions]).all():
            raise AttnflowError(f"loo must hold a finite drop for every ranked position of the {n} tokens; "
                                f"got shape {given.shape}")
        loo = np.full(n, np.nan)
        loo[positions] = given[positions]
    loo[positions] = merge_ties(loo[positions], TIE_ULPS * model.eps * max(1.0, float(np.abs(base).max())))
    rho, compr, suff, partial, where, interval = {}, {}, {}, {}, {}, {}
    y, z = loo[positions], np.asarray(positions, dtype=float)
    for m, r in rows.items():
        x = r[:, positions]
        rho[m] = np.atleast_1d(spearman(x, y))
        where[m] = np.atleast_1d(position_rho(x, positions))
        partial[m] = np.atleast_1d(partial_spearman(x, y, z)) if len(positions) >= 3 else np.full(len(r), np.nan)
        interval[m] = list(spearman_interval(x[-1], y))
        if aopc_levels:
            compr[m], suff[m] = aopc(model, ids, r, positions, model.output, tuple(fractions), fill_id=fill_id)
        else:
            compr[m], suff[m] = np.full(len(r), np.nan), np.full(len(r), np.nan)
    prior = {name: {"spearman": float(spearman(s, y)), "interval": list(spearman_interval(s, y))}
             for name, s in priors(positions).items()}
    z = base - base.max()
    return Faithfulness(output=model.output, label=str(model.output) if label is None else label,
                        logit=float(base[model.output]), probability=float(np.exp(z[model.output]) / np.exp(z).sum()),
                        positions=list(positions), loo=loo, fractions=tuple(float(f) for f in fractions),
                        spearman=rho, comprehensiveness=compr, sufficiency=suff,
                        deletion="delete" if fill_id is None else f"replace with id {int(fill_id)}",
                        partial=partial, position=where, interval=interval, priors=prior)
