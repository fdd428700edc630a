"""The patch perturbation test (Chefer, Gur & Wolf, CVPR 2021, "Transformer Interpretability Beyond
Attention Visualization", section 4.2).

Patches are removed cumulatively in steps of 10% of the patches, ``k = round(f * patches)`` at
fraction ``f``: in the *positive* test from most to least relevant (a faithful method makes accuracy
fall fast: lower area under the curve is better), in the *negative* test from least to most relevant
(accuracy should hold: higher is better). A removed patch has every pixel set to ``fill`` *after*
normalisation (default 0, which is the dataset mean when the model normalises with the dataset's
mean and std, as the bundled digits ViT does). Ties in the scores are broken at random (seeded),
not by position, so a method that gives many patches the same score is not helped by the scan order.
The area under the curve is the trapezoid rule over the fraction removed, 0 to 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np
import torch

from attnflow.errors import AttnflowError

FRACTIONS = tuple(np.round(np.linspace(0.0, 1.0, 11), 2))


@dataclass
class Curve:
    """Accuracy after removing ``fractions`` of the patches, for one method and one order."""

    method: str
    order: str  # "positive" (most relevant first) or "negative" (least relevant first)
    fractions: tuple[float, ...]
    accuracy: np.ndarray

    @property
    def auc(self) -> float:
        x, y = np.asarray(self.fractions), self.accuracy
        return float(np.sum((x[1:] - x[:-1]) * (y[1:] + y[:-1]) / 2))


def removal_order(scores: np.ndarray, positive: bool, rng: np.random.Generator) -> np.ndarray:
    """``scores (batch, patches)`` -> patch indices in removal order, ties broken by ``rng``."""
    tie = rng.random(scores.shape)
    key = -scores if positive else scores
    return np.stack([np.lexsort((t, k)) for t, k in zip(tie, key)])


def remove_patches(pixel_values: torch.Tensor, patches: np.ndarray, grid: tuple[int, int],
                   fill: float | list[float] = 0.0) -> torch.Tensor:
    """Set the given patches (``(batch, k)`` row-major indices into ``grid``) of ``pixel_values``
    ``(batch, C, H, W)`` to ``fill`` (one value, or one per channel)."""
    out = pixel_values.clone()
    fill = torch.as_tensor(fill, dtype=out.dtype).reshape(-1, 1, 1)
    ph, pw = pixel_values.shape[-2] // grid[0], pixel_values.shape[-1] // grid[1]
    for b, chosen in enumerate(patches):
        for p in chosen:
            r, c = divmod(int(p), grid[1])
            out[b, :, r * ph:(r + 1) * ph, c * pw:(c + 1) * pw] = fill
    return out


def perturbation_curves(predict: Callable[[torch.Tensor], torch.Tensor], pixel_values: torch.Tensor,
                        labels: np.ndarray, scores: dict[str, np.ndarray], *, fill: float | list[float] = 0.0, seed: int = 0,
                        fractions: tuple[float, ...] = FRACTIONS,
                        progress: Callable[[int, int], None] | None = None) -> list[Curve]:
    """Positive and negative curves for every method in ``scores`` (name -> ``(batch, rows, cols)``).

    predict: ``pixel_values -> logits (batch, classes)``; labels: ``(batch,)`` true classes. The
    patch grid is ``scores``' grid; the image size must be a multiple of it.
    """
    labels = np.asarray(labels)
    if not scores:
        raise AttnflowError("no methods to evaluate")
    first = next(iter(scores.values()))
    grid = tuple(first.shape[1:])
    if pixel_values.shape[-2] % grid[0] or pixel_values.shape[-1] % grid[1]:
        raise AttnflowError(f"images of {tuple(pixel_values.shape[-2:])} pixels do not split into "
                            f"a {grid} patch grid")
    n_patches = grid[0] * grid[1]
    total, done = 2 * len(scores) * len(fractions), 0
    curves = []
    for method, s in scores.items():
        if s.shape != first.shape or len(s) != len(labels) or len(labels) != len(pixel_values):
            raise AttnflowError(f"scores for {method!r} have shape {s.shape}; expected {first.shape} "
                                "with one row per image")
        for order in ("positive", "negative"):
            rng = np.random.default_rng(seed)
            ranking = removal_order(s.reshape(len(s), -1), order == "positive", rng)
            accuracy = []
            for f in fractions:
                k = int(round(f * n_patches))
                with torch.no_grad():
                    logits = predict(remove_patches(pixel_values, ranking[:, :k], grid, fill))
                accuracy.append(float((logits.argmax(-1).cpu().numpy() == labels).mean()))
                done += 1
                if progress is not None:
                    progress(done, total)
            curves.append(Curve(method, order, tuple(fractions), np.asarray(accuracy)))
    return curves
