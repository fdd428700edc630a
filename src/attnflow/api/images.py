"""explain_image(): images in, one ``Attribution`` (kind "image") per image out.

    result = attnflow.explain_image("digit.png", method="all")
    result.grid_scores("rollout")          # (grid rows, grid cols) at the top layer
    result.plot("overlay.png")

Every method explains the classifier's read-out (the CLS token, or the mean of the patch rows for
mean-pooled models) at every layer and keeps the patch columns; extra tokens (CLS, distillation,
registers) are left out of the sources, which are the patches in row-major order of ``grid``.
"""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any, Callable

import numpy as np

from attnflow.api.methods import as_block
from attnflow.api.models import resolve
from attnflow.capture.vision import ImageMaps, capture_images, image_settings
from attnflow.config import registry
from attnflow.config.registry import Context
from attnflow.config.settings import UNSET, Settings
from attnflow.errors import AttnflowError, AttnflowWarning
from attnflow.results import Attribution

IMAGE_METHODS = registry.names("image")


def check_method(method: Any) -> list[str]:
    return registry.resolve(method, "image")[0]


@Settings.keywords
def image_rows(maps: ImageMaps, method: str, *, layers: Any = None, residual: float = UNSET, head_fusion: str = UNSET,
               solver: str = UNSET, progress: Callable[[int, int], None] | None = None,
               settings: Settings | None = None) -> np.ndarray:
    """``(batch, layers, patches)``: each patch's relevance for the read-out position at each layer
    (all layers, or those in ``layers``)."""
    check_method(method)
    settings = Settings.build(settings, residual=residual, head_fusion=head_fusion, solver=solver)
    record = registry.get(method)
    if record.cost == registry.FORWARD_BACKWARD and maps.gradients is None:
        raise AttnflowError(f"{method} needs gradients: capture with capture_images(..., gradients=True)")
    src, cols = maps.layout.sources, maps.layout.patches
    context = Context(kind="image", attentions=maps.attentions, settings=settings, rows=list(src), layers=layers,
                      gradients=maps.gradients, progress=progress)
    rows = np.asarray(record(context))  # (batch, layers, read-out rows, n)
    return rows.mean(axis=2)[..., cols]  # mean over read-out rows (one row for CLS)


def patch_scores(maps: ImageMaps, method: str, **options: Any) -> np.ndarray:
    """``(batch, rows, cols)``: each patch's relevance at the top layer."""
    scores = image_rows(maps, method, layers=[-1], **options)[:, 0]
    return scores.reshape(len(scores), *maps.layout.grid)


def _name(image: Any, i: int) -> str:
    return str(image) if isinstance(image, (str, Path)) else f"image {i}"


@Settings.keywords
def explain_image(images: Any, model: Any = None, *, method: Any = "rollout", target_class: Any = None,
                  residual: float = UNSET, head_fusion: str = UNSET, solver: str = UNSET,
                  progress: Callable[[int, int], None] | None = None,
                  weighting: str = UNSET, settings: Settings | None = None,
                  device: str = UNSET, dtype: str = UNSET) -> Attribution | list[Attribution]:
    """Explain one image or a list of them (one batch) with an image classifier.

    Every method explains the classifier's read-out (the CLS token, or the mean of the patch rows for
    mean-pooled models) at every layer and keeps the patch columns: the sources are the patches in
    row-major order of ``grid``.

    Args:
        images: A path, PIL image or array, or a list of them.
        model: A folder (``str`` or ``pathlib.Path``) or hub id (loaded once and reused), or a loaded
            image classifier; None uses the bundled digits ViT.
        method: "raw", "rollout", "flow", "grad-rollout", "all" (the first three) or a list of these.
        target_class: The class grad-rollout explains (index or label); None: each image's predicted
            class.
        residual: Weight of the identity in ``A = (1 - residual) W + residual I`` (a setting).
        head_fusion: "mean", "max" or "min" over heads (a setting).
        solver: The max-flow solver of [`flow`][attnflow.core.flow.flow] (a setting).
        progress: Called as ``progress(done, total)`` while each method runs.
        weighting: "attention" or "norm" (attention times the length of each patch's transformed
            value vector, Kobayashi et al. 2020; see [`explain`][attnflow.api.text.explain]); not with
            grad-rollout (a setting).
        settings: A [`Settings`][attnflow.config.settings.Settings]; the keywords above override it.
            Its ``causal_norm`` and ``target`` must stay unset (``target_class`` picks the class).
        device: Where a model given by name is loaded, as in [`explain`][attnflow.api.text.explain]
            (a setting).
        dtype: What a model given by name is loaded in, as in
            [`explain`][attnflow.api.text.explain] (a setting).

    Returns:
        One [`Attribution`][attnflow.results.attribution.Attribution] of kind "image" for one image,
            a list for a list.

    Raises:
        AttnflowError: A setting outside its allowed values, ``causal_norm`` or ``target`` set, or a
            method that does not run on images.

    Warns:
        AttnflowWarning: An image far from what the model was trained on (shrunk or enlarged a lot,
            squashed, a colour photo for a grey model).

    Examples:
        A test digit on the bundled digits ViT:

        >>> import attnflow
        >>> from attnflow.data.digits import digits_split
        >>> image = digits_split()["test_images"][0]  # an 8x8 "2"
        >>> result = attnflow.explain_image(image, method="all")
        >>> result.prediction, result.grid_scores("rollout").shape  # top layer, per patch
        ('2', (4, 4))
    """
    settings = Settings.build(settings, residual=residual, head_fusion=head_fusion, solver=solver, weighting=weighting,
                              device=device, dtype=dtype)
    if settings.causal_norm is not None or settings.target is not None:
        raise AttnflowError("images explain the classifier's read-out with every query seeing the whole image: "
                            "leave causal_norm and target unset (target_class picks the class)")
    methods, shown = registry.resolve(method, "image")
    from attnflow.api.checks import check_methods

    # an option that changes none of them (target_class without grad-rollout), before any work
    check_methods(methods, settings, what="explain-image", target_class=target_class)
    single = not isinstance(images, (list, tuple))
    batch = [images] if single else list(images)
    model = resolve(model, task="vision", device=settings.device, dtype=settings.dtype).model
    gradients = any(registry.get(m).cost == registry.FORWARD_BACKWARD for m in methods)
    maps = capture_images(model, batch, gradients=gradients, target=target_class, weighting=settings.weighting,
                          head_fusion=settings.head_fusion)
    values = {m: image_rows(maps, m, settings=settings, progress=progress) for m in methods}
    label = lambda i: str(maps.labels.get(int(i), int(i)))  # noqa: E731
    predicted = maps.logits.argmax(-1).tolist()
    layout = maps.layout
    rows, cols = layout.grid
    sources = [f"patch ({r}, {c})" for r in range(rows) for c in range(cols)]
    read_out = "[CLS]" if layout.pooling == "cls" else "mean of patches"
    params = {**settings.as_dict(), "pooling": layout.pooling}
    settings = image_settings(model)
    out = []
    for i in range(len(batch)):
        if maps.gaps and maps.gaps[i]:
            (width, height), kind = maps.originals[i].size, "colour" if maps.originals[i].colour else "grey"
            wanted = f"{settings.size[1]}x{settings.size[0]} {'grey' if settings.mode == 'L' else 'colour'}"
            warnings.warn(f"{_name(batch[i], i)} ({width}x{height}, {kind}) is far from the {wanted} images the "
                          f"model takes: it was {maps.gaps[i]}, so the prediction ({label(predicted[i])}) and the "
                          "overlay say little about it; use a model trained on images like it",
                          AttnflowWarning, stacklevel=2)
        explains_class = any(registry.get(m).gradients for m in methods)
        extra = {"explained_class": label(maps.target[i])} if explains_class else {}
        out.append(Attribution(
            kind="image", sources=sources, targets=[read_out], target_positions=[layout.sources[0]
                                                                                 if layout.pooling == "cls" else None],
            blocks={m: as_block(registry.get(m), v[i][:, None], [0], maps.attentions.shape[1])
                    for m, v in values.items()}, n_layers=maps.attentions.shape[1],
            method=shown, input=_name(batch[i], i), prediction=label(predicted[i]),
            model=str(getattr(model, "name_or_path", "") or type(model).__name__), params={**params, **extra},
            grid=layout.grid, image=maps.images[i], meta={"prefix_tokens": layout.prefix},
            original=maps.originals[i].image if maps.originals else None))
    return out[0] if single else out
