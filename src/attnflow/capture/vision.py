"""Capture attention from Hugging Face vision transformers (ViT, DeiT, Dinov2(-with-registers), BEiT,
SigLIP, ...): images in, attention maps plus the patch-grid layout out.

Preprocessing needs no torchvision: PIL resizes straight to the model's input size (no crop) and the
normalisation comes from the model folder's ``preprocessor_config.json`` (``image_mean``,
``image_std``, ``size``), else the config's ``image_size`` and mean = std = 0.5 (the ViT default).

Token layout, as in every HF ViT-like model here: extra tokens first (CLS, DeiT's distillation token,
Dinov2's registers), then the patches in row-major order. The explained position ("source") is the
CLS token, or the mean of the patch rows for models that classify from mean-pooled patches.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnflow.hf.architectures import refuse_unsupported, refuse_unsupported_path, stack_attentions
from attnflow.capture.gradients import capture_gradients, resolve_classes
from attnflow.hf.load import cached, check_model_path, load_pretrained, read_config, resolve_model, torch_dtype
from attnflow.capture.text import run_streaming
from attnflow.core.weighting import check_weighting
from attnflow.errors import AttnflowError
from attnflow.hf.weights import input_device

# Per-architecture facts (model_type -> how the classifier pools), instead of forking model code.
MEAN_POOLED = {"siglip", "siglip_vision_model", "siglip2", "siglip2_vision_model"}


@dataclass
class Layout:
    """Where the patches are: ``grid`` (rows, cols) of patches after ``prefix`` extra tokens;
    ``pooling`` "cls" (explain token 0) or "mean" (explain the mean of the patch rows)."""

    grid: tuple[int, int]
    prefix: int
    pooling: str

    @property
    def patches(self) -> slice:
        return slice(self.prefix, self.prefix + self.grid[0] * self.grid[1])

    @property
    def sources(self) -> list[int]:
        return [0] if self.pooling == "cls" else list(range(self.patches.start, self.patches.stop))


# Beyond these factors an image is far from what the model was trained on: shrinking a photo more
# than 24x (a 451x300 photo to an 8x8 digits model) leaves a thumbnail of it; enlarging more than 4x
# invents detail; squashing the aspect ratio more than 2x (no cropping here) deforms it. A phone photo
# (4032x3024) to a 224x224 ImageNet model is shrunk 18x: ordinary, no warning.
SHRINK_MAX = 24.0
ENLARGE_MAX = 4.0
SQUASH_MAX = 2.0
ORIGINAL_MAX = 256  # pixels on the longer side of the copy of the original kept for figures


@dataclass
class Original:
    """An input image as given: ``image`` a copy for display (colours kept, at most ``ORIGINAL_MAX``
    pixels on its longer side, in [0, 1]); ``size`` (width, height); ``colour`` whether it has any."""

    image: np.ndarray
    size: tuple[int, int]
    colour: bool


def original(pil: Any) -> Original:
    from PIL import Image

    rgb = pil.convert("RGB")
    small = rgb.copy()
    small.thumbnail((ORIGINAL_MAX, ORIGINAL_MAX), Image.Resampling.LANCZOS)
    arr = np.asarray(small, dtype=np.float32) / 255.0
    # Colour: channels differ by more than ~2% on average (a grey image saved as RGB differs by 0).
    colour = bool((arr.max(axis=-1) - arr.min(axis=-1)).mean() > 0.02)
    return Original(image=arr if colour else arr.mean(axis=-1), size=rgb.size, colour=colour)


def domain_gap(given: Original, settings: ImageSettings) -> str | None:
    """How the image had to be changed to fit the model, when that takes it far from the images the
    model was trained on (see ``SHRINK_MAX``, ``ENLARGE_MAX``, ``SQUASH_MAX``), else None."""
    (width, height), (h, w) = given.size, settings.size
    changes = []
    shrink, enlarge = max(width / w, height / h), max(w / width, h / height)
    if shrink > SHRINK_MAX:
        changes.append(f"shrunk {shrink:.0f}x")
    elif enlarge > ENLARGE_MAX:
        changes.append(f"enlarged {enlarge:.0f}x")
    squash = (width / height) / (w / h)
    if max(squash, 1 / squash) > SQUASH_MAX:
        changes.append(f"squashed from {width}:{height} to {w}:{h}")
    if given.colour and settings.mode == "L":
        changes.append("turned grey")
    return ", ".join(changes) or None


@dataclass
class ImageMaps:
    """Attention of a batch of images. ``attentions``/``gradients``: ``(batch, layers, heads, n, n)``
    (row = query); ``logits``: ``(batch, classes)``; ``target``: the class each gradient is for;
    ``images``: the resized images as shown to the model, ``(H, W)`` or ``(H, W, 3)`` in [0, 1];
    ``originals``: the images as given; ``gaps``: per image, how far fitting it to the model took it
    from the model's training images (``domain_gap``), or None."""

    attentions: torch.Tensor
    logits: torch.Tensor
    layout: Layout
    images: list[np.ndarray]
    pixel_values: torch.Tensor
    gradients: torch.Tensor | None = None
    target: torch.Tensor | None = None
    labels: dict = field(default_factory=dict)
    originals: list[Original] = field(default_factory=list)
    gaps: list[str | None] = field(default_factory=list)


@dataclass
class ImageSettings:
    size: tuple[int, int]  # (height, width)
    mean: list[float]
    std: list[float]
    mode: str  # PIL mode: "L" for one channel, "RGB" for three


def image_settings(model: Any) -> ImageSettings:
    config = model.config
    config = getattr(config, "vision_config", None) or config
    size = getattr(config, "image_size", 224)
    size = tuple(size) if isinstance(size, (list, tuple)) else (int(size), int(size))
    channels = int(getattr(config, "num_channels", 3))
    mean, std = [0.5] * channels, [0.5] * channels
    folder = Path(str(getattr(model, "name_or_path", "") or ""))
    pre = folder / "preprocessor_config.json"
    if pre.is_file():
        data = read_config(pre)
        mean, std = data.get("image_mean", mean), data.get("image_std", std)
        s = data.get("size") or {}
        if isinstance(s, dict) and "height" in s and "width" in s:
            size = (int(s["height"]), int(s["width"]))
    mean = list(mean) * channels if len(mean) == 1 else list(mean)
    std = list(std) * channels if len(std) == 1 else list(std)
    if len(mean) != channels or len(std) != channels:
        raise AttnflowError(f"the model takes {channels} channels but its preprocessor config gives "
                            f"{len(mean)} means and {len(std)} stds")
    return ImageSettings(size=size, mean=mean, std=std, mode="L" if channels == 1 else "RGB")


def open_image(path: str | Path) -> Any:
    """Open an image file with PIL, with a one-sentence error for a missing or unreadable file."""
    from PIL import Image, UnidentifiedImageError

    p = Path(path)
    if p.is_dir():
        raise AttnflowError(f"{str(p)!r} is a folder; give an image file (.png, .jpg, ...) inside it")
    if not p.is_file():
        raise AttnflowError(f"image file {str(p)!r} does not exist")
    try:
        with Image.open(p) as img:
            img.load()
            return img.copy()
    except Image.DecompressionBombError as exc:
        raise AttnflowError(f"{str(p)!r} has too many pixels to open safely ({exc}); shrink it first") from exc
    except (UnidentifiedImageError, OSError, SyntaxError) as exc:
        raise AttnflowError(f"{str(p)!r} is not an image file PIL can read ({type(exc).__name__})") from exc


def _as_pil(image: Any) -> Any:
    from PIL import Image

    if isinstance(image, (str, Path)):
        return open_image(image)
    if isinstance(image, Image.Image):
        return image
    arr = np.asarray(image)
    if arr.ndim not in (2, 3) or arr.dtype.kind not in "uif":
        raise AttnflowError(f"expected an image as a path, a PIL image or an (H, W[, 3]) array; got shape {arr.shape}")
    if arr.dtype.kind == "f":  # floats are taken to be in [0, 1]
        arr = np.clip(arr * 255.0, 0, 255)
    return Image.fromarray(arr.astype(np.uint8))


def preprocess(images: list[Any], settings: ImageSettings,
               originals: list[Original] | None = None) -> tuple[torch.Tensor, list[np.ndarray]]:
    """Images (paths, PIL images or arrays) -> ``pixel_values (batch, C, H, W)`` and the resized
    images in [0, 1] for display; each image as given is appended to ``originals`` when passed."""
    from PIL import Image

    height, width = settings.size
    shown, pixels = [], []
    for image in images:
        pil = _as_pil(image)
        if originals is not None:
            originals.append(original(pil))
        pil = pil.convert(settings.mode).resize((width, height), Image.Resampling.BICUBIC)
        arr = np.asarray(pil, dtype=np.float32) / 255.0
        shown.append(arr)
        chw = arr[None] if arr.ndim == 2 else arr.transpose(2, 0, 1)
        mean = np.asarray(settings.mean, np.float32)[:, None, None]
        std = np.asarray(settings.std, np.float32)[:, None, None]
        pixels.append((chw - mean) / std)
    return torch.from_numpy(np.stack(pixels)), shown


def layout_for(model: Any, pixel_values: torch.Tensor, n_tokens: int) -> Layout:
    config = model.config
    vision = getattr(config, "vision_config", None) or config
    patch = getattr(vision, "patch_size", None)
    if patch is None:
        raise AttnflowError(f"{type(model).__name__} has no patch_size in its config; it is not a ViT-like model")
    ph, pw = (tuple(patch) if isinstance(patch, (list, tuple)) else (patch, patch))
    grid = (pixel_values.shape[-2] // ph, pixel_values.shape[-1] // pw)
    prefix = n_tokens - grid[0] * grid[1]
    if prefix < 0:
        raise AttnflowError(f"the model has {n_tokens} tokens, fewer than its {grid[0]}x{grid[1]} patches; "
                            "windowed models (Swin, ...) are not supported")
    model_type = getattr(config, "model_type", "")
    mean_pooled = model_type in MEAN_POOLED or bool(getattr(vision, "use_mean_pooling", False))
    return Layout(grid=grid, prefix=prefix, pooling="mean" if mean_pooled or prefix == 0 else "cls")


def capture_images(model: Any, images: list[Any], *, gradients: bool = False, target: Any = None,
                   weighting: str = "attention", head_fusion: str = "mean") -> ImageMaps:
    """Run a vision classifier on ``images`` (one batch) and collect attention (and, with
    ``gradients=True``, the gradient of ``target``'s logit, default the predicted class).

    ``weighting="norm"`` collects the norm-based maps instead (``attnflow.core.weighting``), the
    heads fused by ``head_fusion`` while the model runs (``attentions`` then has one head)."""
    if not isinstance(images, (list, tuple)) or not images:
        raise AttnflowError("images must be a non-empty list of paths, PIL images or arrays")
    refuse_unsupported(model)
    settings, originals = image_settings(model), []
    pixel_values, shown = preprocess(list(images), settings, originals)
    pixel_values = pixel_values.to(input_device(model))
    grads = classes = None
    check_weighting(weighting)
    if weighting == "norm" and gradients:
        raise AttnflowError("grad-rollout weighs attention by its gradients and has no norm weighting; "
                            "use weighting='attention' for it")
    if gradients:
        got = capture_gradients(model, {"pixel_values": pixel_values}, target)
        attentions, grads, logits, classes = got.attentions, got.gradients, got.logits, got.target
    else:  # streamed layer by layer (every head kept unless the norm weighting fuses them)
        attentions, out = run_streaming(model, {"pixel_values": pixel_values},
                                        head_fusion if weighting == "norm" else None, weighting=weighting)
        if attentions.shape[-1] != attentions.shape[-2]:
            stack_attentions(list(attentions.unbind(1)), model)  # refuses with the model type
        logits = out.logits.detach().float().cpu()
        if target is not None:
            classes = resolve_classes(target, logits, getattr(model.config, "id2label", None))
    return ImageMaps(attentions=attentions, logits=logits, layout=layout_for(model, pixel_values, attentions.shape[-1]),
                     images=shown, pixel_values=pixel_values.cpu(), gradients=grads, target=classes,
                     labels=dict(getattr(model.config, "id2label", None) or {}), originals=originals,
                     gaps=[domain_gap(o, settings) for o in originals])


def _vision_name(path: Any) -> str:
    from attnflow.models import bundled_model_path

    name = resolve_model(path) if path is not None else str(bundled_model_path("digits_vit"))
    check_model_path(name)
    refuse_unsupported_path(name)
    return name


def load_vision_model(path: Any = None, dtype: str = "auto") -> Any:
    """An image classifier from a folder (``str`` or ``pathlib.Path``) or hub id (default: the bundled
    digits ViT), eager attention, eval mode."""
    import transformers

    model = load_pretrained(transformers.AutoModelForImageClassification, _vision_name(path), "image classifier",
                            dtype=torch_dtype(dtype))
    refuse_unsupported(model)
    return model


def cached_vision_model(path: Any = None, device: str = "cpu", dtype: str = "auto") -> Any:
    """``load_vision_model``, kept for reuse between calls (see ``attnflow.hf.load.cached``),
    one copy per torch ``device``."""
    name = _vision_name(path)
    key = ("" if device == "cpu" else device) + ("" if dtype == "auto" else f":{dtype}")
    return cached("vision", name, key, lambda: load_vision_model(name, dtype).to(device))
