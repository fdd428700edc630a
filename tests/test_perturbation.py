"""The perturbation protocol against hand-built predictors whose answer is known, then end to end."""

import csv

import numpy as np
import pytest
import torch

from attnflow.evaluation.perturbation import (
    Curve,
    perturbation_curves,
    removal_order,
    remove_patches,
)

torch.set_num_threads(1)


def test_remove_patches_sets_exactly_those_pixels():
    x = torch.arange(2 * 1 * 4 * 6, dtype=torch.float32).reshape(2, 1, 4, 6) + 1  # grid 2 x 3 of 2x2 patches
    out = remove_patches(x, np.array([[4], [0]]), (2, 3), fill=0.0)
    expected = x.clone()
    expected[0, :, 2:4, 2:4] = 0
    expected[1, :, 0:2, 0:2] = 0
    assert torch.equal(out, expected) and not torch.equal(x, out)


def test_removal_order_and_ties():
    rng = np.random.default_rng(0)
    assert removal_order(np.array([[0.1, 0.9, 0.5]]), True, rng).tolist() == [[1, 2, 0]]
    assert removal_order(np.array([[0.1, 0.9, 0.5]]), False, rng).tolist() == [[0, 2, 1]]
    # All tied: the order is a seeded shuffle, not the scan order 0, 1, 2, ...
    orders = {tuple(removal_order(np.zeros((1, 8)), True, np.random.default_rng(s))[0]) for s in range(5)}
    assert len(orders) > 1


def test_curves_for_a_model_that_needs_one_patch():
    """A 'model' that is right only while patch 5 of a 3x3 grid is intact: a method that ranks
    patch 5 first drops to 0 at once in the positive test and keeps accuracy 1 in the negative test
    until the last step; ranking it last does the opposite."""
    n = 4
    x = torch.ones(n, 1, 6, 6)
    labels = np.ones(n, dtype=int)

    def predict(pixels):
        intact = pixels[:, 0, 2:4, 4:6].ne(0).all(dim=(1, 2))  # patch 5 = row 1, col 2
        return torch.stack([(~intact).float(), intact.float()], dim=1)

    good = np.zeros((n, 3, 3))
    good[:, 1, 2] = 1.0
    good += np.linspace(0, 0.1, 9).reshape(3, 3)  # distinct scores elsewhere
    bad = -good
    curves = {(c.method, c.order): c for c in perturbation_curves(predict, x, labels, {"good": good, "bad": bad})}
    fractions = np.asarray(curves["good", "positive"].fractions)
    k = np.rint(fractions * 9)
    np.testing.assert_array_equal(curves["good", "positive"].accuracy, (k == 0).astype(float))
    np.testing.assert_array_equal(curves["good", "negative"].accuracy, (k < 9).astype(float))
    np.testing.assert_array_equal(curves["bad", "positive"].accuracy, (k < 9).astype(float))
    assert curves["good", "positive"].auc < curves["bad", "positive"].auc
    assert curves["good", "negative"].auc > curves["bad", "negative"].auc


def test_auc_is_the_trapezoid_rule():
    c = Curve("m", "positive", (0.0, 0.5, 1.0), np.array([1.0, 0.5, 0.0]))
    assert c.auc == pytest.approx(0.5)
    rng = np.random.default_rng(1)
    y = rng.random(11)
    x = tuple(np.linspace(0, 1, 11))
    assert Curve("m", "negative", x, y).auc == pytest.approx(np.trapezoid(y, x))


def test_digits_end_to_end_small(tmp_path):
    from attnflow.api.perturbation import evaluate_perturbation
    from attnflow.views.perturbation import (
        curves_table,
        save_curves_csv,
        save_curves_plot,
    )

    curves = evaluate_perturbation(limit=30, methods=("rollout", "grad-rollout", "random"))
    assert {(c.method, c.order) for c in curves} == {(m, o) for m in ("rollout", "grad-rollout", "random")
                                                     for o in ("positive", "negative")}
    for c in curves:
        assert len(c.accuracy) == 11 and 0 <= c.auc <= 1
    first = {c.accuracy[0] for c in curves}
    last = {c.accuracy[-1] for c in curves}
    assert len(first) == 1 and len(last) == 1  # nothing / everything removed: the same for every method
    save_curves_csv(curves, str(tmp_path / "c.csv"))
    save_curves_plot(curves, str(tmp_path / "c.png"))
    rows = list(csv.DictReader(open(tmp_path / "c.csv")))
    assert len(rows) == 6 * 11 and rows[0]["method"] == "rollout"
    assert (tmp_path / "c.png").stat().st_size > 0
    assert curves_table(curves).row_count == 3


def test_fill_values_for_the_digits_model():
    from attnflow.api.perturbation import fill_value
    from attnflow.capture.vision import image_settings, load_vision_model

    model = load_vision_model()
    s = image_settings(model)
    assert fill_value(model, "mean") == [0.0]
    # "black" is raw pixel 0 pushed through the model's own normalisation.
    assert fill_value(model, "black") == pytest.approx([(0.0 - s.mean[0]) / s.std[0]])
    x = torch.ones(1, 1, 4, 4)
    out = remove_patches(x, np.array([[3]]), (2, 2), fill=fill_value(model, "black"))
    assert torch.allclose(out[0, 0, 2:, 2:], torch.tensor(fill_value(model, "black")[0]))
    assert torch.equal(out[0, 0, :2], x[0, 0, :2])
