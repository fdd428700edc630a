"""The perturbation test run end to end on an image classifier: capture, score every method, perturb.

The glue between a model and ``attnflow.evaluation.perturbation`` (which only sees a ``predict``
callable and scores). Default data: the bundled digits ViT's test split.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from attnflow.api.images import IMAGE_METHODS, patch_scores
from attnflow.api.models import resolve
from attnflow.capture.vision import capture_images, image_settings
from attnflow.config import registry
from attnflow.errors import AttnflowError
from attnflow.evaluation.perturbation import Curve, perturbation_curves

METHODS = (*IMAGE_METHODS, "random")
FILLS = ("mean", "black")


def fill_value(model: Any, fill: str) -> list[float]:
    """The normalised pixel value a removed patch gets: "mean" = 0 after normalisation (the dataset
    mean for a model normalised with its data's mean and std); "black" = pixel value 0 before
    normalisation (for digits: erased ink, the background)."""
    if fill not in FILLS:
        raise AttnflowError(f"fill must be one of {', '.join(FILLS)}; got {fill!r}")
    s = image_settings(model)
    return [0.0] * len(s.mean) if fill == "mean" else [-m / d for m, d in zip(s.mean, s.std)]


def evaluate_perturbation(model: Any = None, images: Any = None, labels: Any = None, *,
                          methods: tuple[str, ...] = METHODS, limit: int | None = None, seed: int = 0,
                          fill: str = "mean", solver: str = "auto",
                          progress: Callable[[str, int, int], None] | None = None) -> list[Curve]:
    """Perturbation curves for ``methods`` (grad-rollout explains each image's predicted class;
    "random" is uniform noise seeded by ``seed``). images/labels: default the digits test split.
    fill: "mean" or "black", see ``fill_value``."""
    unknown = [m for m in methods if m not in METHODS]
    if unknown:
        raise AttnflowError(f"methods must be among {', '.join(METHODS)}; got {unknown}")
    if images is None:
        from attnflow.data.digits import digits_split

        split = digits_split()
        images, labels = list(split["test_images"]), split["test_labels"]
    if labels is None or len(labels) != len(images):
        raise AttnflowError("give one label per image")
    if limit is not None:
        images, labels = images[:limit], labels[:limit]
    model = resolve(model, task="vision").model
    fill_values = fill_value(model, fill)
    # ("random", the baseline, is no registry method: fact() says False for it)
    maps = capture_images(model, list(images), gradients=any(registry.fact(m, "gradients") for m in methods))
    scores = {}
    for m in methods:
        if m == "random":
            scores[m] = np.random.default_rng(seed).random((len(images), *maps.layout.grid))
        else:
            tick = (lambda d, t, m=m: progress(m, d, t)) if progress is not None else None
            scores[m] = patch_scores(maps, m, solver=solver, progress=tick)
    device = next(model.parameters()).device
    predict = lambda x: model(pixel_values=x.to(device)).logits  # noqa: E731
    tick = (lambda d, t: progress("perturbation", d, t)) if progress is not None else None
    return perturbation_curves(predict, maps.pixel_values, np.asarray(labels), scores, fill=fill_values, seed=seed,
                               progress=tick)
