"""Vision capture and overlays: the bundled digits ViT, and random tiny models for the layouts it
cannot show (distillation token, registers, no CLS, non-square grid)."""

import numpy as np
import pytest
import torch
from PIL import Image

from attnflow.api.images import IMAGE_METHODS, explain_image, patch_scores
from attnflow.capture.vision import capture_images, load_vision_model
from attnflow.core import rollout
from attnflow.data.digits import digits_split
from attnflow.errors import AttnflowError
from attnflow.models import bundled_model_path
from attnflow.views.image import save_overlays

torch.set_num_threads(1)


@pytest.fixture(scope="module")
def vit():
    return load_vision_model()


@pytest.fixture(scope="module")
def test_images():
    split = digits_split()
    return list(split["test_images"][:6]), split["test_labels"][:6]


def test_bundled_model_is_accurate_on_held_out_digits(vit):
    split = digits_split()
    maps = capture_images(vit, list(split["test_images"]))
    accuracy = (maps.logits.argmax(-1).numpy() == split["test_labels"]).mean()
    assert accuracy > 0.85, accuracy
    assert (bundled_model_path("digits_vit") / "model.safetensors").stat().st_size < 1_000_000


@pytest.mark.parametrize("method", IMAGE_METHODS)
def test_shapes_and_overlay_written(vit, test_images, method, tmp_path):
    images, _ = test_images
    expls = explain_image(images[:3], vit, method=method)
    assert [e.grid_scores().shape for e in expls] == [(4, 4)] * 3
    assert all(e.kind == "image" and e.n_layers == 4 and e.dense(method).shape == (1, 4, 16) for e in expls)
    for e in expls:
        s = e.dense(method)
        assert np.isfinite(s).all() and (s >= 0).all() and s[:, -1].max() > 0
    path = tmp_path / f"{method}.png"
    save_overlays(expls, str(path))
    with Image.open(path) as img:
        assert img.format == "PNG" and img.width > 200


def test_rollout_scores_are_the_cls_row_of_rollout(vit, test_images):
    maps = capture_images(vit, test_images[0][:2])
    r = np.asarray(rollout(maps.attentions))
    np.testing.assert_allclose(patch_scores(maps, "rollout"), r[:, -1, 0, 1:].reshape(2, 4, 4), rtol=1e-6)
    assert maps.layout.prefix == 1 and maps.layout.pooling == "cls"
    # the result holds every layer: layer l is the CLS row of R_{l+1}
    result = explain_image(test_images[0][0], vit)
    np.testing.assert_allclose(result.row(), r[0, :, 0, 1:], rtol=1e-6)


@pytest.mark.parametrize("method", IMAGE_METHODS)
def test_batch_equals_one_by_one(vit, test_images, method):
    images, _ = test_images
    batch = explain_image(images, vit, method=method)
    for image, expl in zip(images, batch):
        alone = explain_image(image, vit, method=method)
        np.testing.assert_allclose(expl.row(), alone.row(), rtol=1e-4, atol=1e-6)
        assert expl.prediction == alone.prediction


def _rgb_images(n, size, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, size=(*size, 3), dtype=np.uint8) for _ in range(n)]


def _tiny(kind):
    import transformers as tf

    torch.manual_seed(0)
    # initializer_range 0.3: with the default 0.02 the gradients are ~1e-5 and comparisons are vacuous.
    common = dict(hidden_size=16, num_hidden_layers=2, num_attention_heads=2, intermediate_size=32, num_labels=3,
                  initializer_range=0.3)
    if kind == "registers":
        config = tf.Dinov2WithRegistersConfig(image_size=16, patch_size=4, num_register_tokens=3, **common)
        return tf.Dinov2WithRegistersForImageClassification(config), 1 + 3, "cls", (4, 4)
    if kind == "deit":
        config = tf.DeiTConfig(image_size=16, patch_size=4, **common)
        return tf.DeiTForImageClassificationWithTeacher(config), 2, "cls", (4, 4)
    if kind == "no-cls":
        vision = dict(common, image_size=16, patch_size=4)
        vision.pop("num_labels")
        config = tf.SiglipConfig(vision_config=vision, text_config=dict(hidden_size=16, num_hidden_layers=1,
                                 num_attention_heads=2, intermediate_size=32), num_labels=3)
        return tf.SiglipForImageClassification(config), 0, "mean", (4, 4)
    config = tf.ViTConfig(image_size=[8, 20], patch_size=4, **common)  # non-square: 2 x 5 patches
    return tf.ViTForImageClassification(config), 1, "cls", (2, 5)


@pytest.mark.parametrize("kind", ["registers", "deit", "no-cls", "non-square"])
def test_layouts_with_random_models(kind, tmp_path):
    model, prefix, pooling, grid = _tiny(kind)
    model.set_attn_implementation("eager")
    model.eval()
    size = (8, 20) if kind == "non-square" else (16, 16)
    images = _rgb_images(3, size)
    maps = capture_images(model, images, gradients=True)
    assert maps.attentions.shape[-1] == prefix + grid[0] * grid[1]
    assert (maps.layout.prefix, maps.layout.pooling, maps.layout.grid) == (prefix, pooling, grid)
    assert maps.images[0].shape == (*size, 3)
    r = np.asarray(rollout(maps.attentions))[:, -1]
    expected = r[:, 0] if pooling == "cls" else r[:, prefix:].mean(axis=1)
    np.testing.assert_allclose(patch_scores(maps, "rollout"), expected[:, prefix:].reshape(3, *grid), rtol=1e-5)
    for method in IMAGE_METHODS:
        expls = explain_image(images, model, method=method)
        assert all(e.grid_scores().shape == grid for e in expls) and expls[1].grid_scores().std() > 1e-3  # not vacuous
        alone = explain_image(images[1], model, method=method)
        np.testing.assert_allclose(expls[1].row(), alone.row(), rtol=1e-4, atol=1e-6)
    save_overlays(expls, str(tmp_path / "o.png"))
    assert (tmp_path / "o.png").stat().st_size > 0


def test_bad_inputs(vit, tmp_path):
    with pytest.raises(AttnflowError, match="does not exist"):
        explain_image(str(tmp_path / "missing.png"), vit)
    (tmp_path / "text.png").write_text("not an image")
    with pytest.raises(AttnflowError, match="not an image file"):
        explain_image(str(tmp_path / "text.png"), vit)
    with pytest.raises(AttnflowError, match="method must be one of"):
        explain_image(np.zeros((8, 8)), vit, method="attention")
    with pytest.raises(AttnflowError, match="does not exist"):
        load_vision_model(str(tmp_path / "no-model"))


def test_training_command_writes_a_loadable_model(tmp_path):
    from attnflow.reproduction.training.digits_vit import train

    accuracy = train(tmp_path / "m", seed=0, epochs=2)
    assert {p.name for p in (tmp_path / "m").iterdir()} >= {"config.json", "model.safetensors",
                                                          "preprocessor_config.json", "training.json"}
    model = load_vision_model(str(tmp_path / "m"))
    maps = capture_images(model, [np.zeros((8, 8))])
    assert maps.layout.grid == (4, 4) and 0.0 <= accuracy <= 1.0
