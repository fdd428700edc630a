"""explain_image(): images in, one patch-grid relevance map per image out.

    expls = attnflow.explain_image(["digit.png"], method="grad-rollout")
    expls[0].scores          # (grid rows, grid cols)
    attnflow.views.image.save_overlays(expls, "overlay.png")

Every method explains the classifier's source position (the CLS token, or the mean of the patch rows
for mean-pooled models) at the top layer and keeps the patch columns; extra tokens (CLS,
distillation, registers) are left out of the grid.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from attnflow.capture.vision import ImageMaps, capture_images, load_vision_model
from attnflow.core.gradient import grad_rollout
from attnflow.core.methods import METHODS, method_rows
from attnflow.errors import AttnflowError

IMAGE_METHODS = (*METHODS, "grad-rollout")


@dataclass
class ImageExplanation:
    """One method's relevance of each patch for one image: ``scores`` ``(rows, cols)``; ``image``
    the resized input ``(H, W[, 3])`` in [0, 1]; ``prediction`` the predicted label; ``target`` the
    label grad-rollout explained (None for the attention-only methods)."""

    image: np.ndarray
    scores: np.ndarray
    method: str
    prediction: str | None = None
    target: str | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def plot(self, path: str, **kwargs: Any) -> str:
        from attnflow.views.image import save_overlays

        return save_overlays([self], path, **kwargs)


def check_method(method: str) -> None:
    if method not in IMAGE_METHODS:
        raise AttnflowError(f"method must be one of {', '.join(IMAGE_METHODS)}; got {method!r}")


def patch_scores(maps: ImageMaps, method: str, *, residual: float = 0.5, head_fusion: str = "mean",
                 solver: str = "auto", progress: Callable[[int, int], None] | None = None) -> np.ndarray:
    """``(batch, rows, cols)``: each patch's relevance for the source position at the top layer."""
    check_method(method)
    src, cols = maps.layout.sources, maps.layout.patches
    if method in METHODS:
        rows = np.asarray(method_rows(maps.attentions, method, src, layers=[-1], residual=residual,
                                      head_fusion=head_fusion, solver=solver, progress=progress))[:, 0]
    else:
        if maps.gradients is None:
            raise AttnflowError("grad-rollout needs gradients: capture with capture_images(..., gradients=True)")
        rows = np.asarray(grad_rollout(maps.attentions, maps.gradients))[:, -1, src]
    scores = rows.mean(axis=1)[:, cols]  # mean over source rows (one row for CLS)
    return scores.reshape(len(scores), *maps.layout.grid)


def explain_image(images: Any, model: Any = None, *, method: str = "rollout", target: Any = None,
                  residual: float = 0.5, head_fusion: str = "mean", solver: str = "auto",
                  progress: Callable[[int, int], None] | None = None) -> list[ImageExplanation]:
    """Explain a batch of images (paths, PIL images or arrays; one image is a batch of one).

    model: a folder or hub id, or a loaded image classifier; None uses the bundled digits ViT.
    method: "raw", "rollout", "flow" or "grad-rollout"; target: the class grad-rollout explains
    (index or label; None = each image's predicted class).
    """
    check_method(method)
    batch = list(images) if isinstance(images, (list, tuple)) else [images]
    if model is None or isinstance(model, str):
        model = load_vision_model(model)
    maps = capture_images(model, batch, gradients=method == "grad-rollout", target=target)
    scores = patch_scores(maps, method, residual=residual, head_fusion=head_fusion, solver=solver, progress=progress)
    label = lambda i: str(maps.labels.get(int(i), int(i)))  # noqa: E731
    predicted = maps.logits.argmax(-1).tolist()
    params = {"model": str(getattr(model, "name_or_path", "") or type(model).__name__), "residual": residual,
              "head_fusion": head_fusion, "pooling": maps.layout.pooling, "grid": list(maps.layout.grid)}
    return [ImageExplanation(image=maps.images[i], scores=scores[i], method=method, prediction=label(predicted[i]),
                             target=label(maps.target[i]) if method == "grad-rollout" else None, params=dict(params))
            for i in range(len(batch))]
