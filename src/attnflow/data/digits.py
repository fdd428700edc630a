"""scikit-learn's 8x8 digits, split once: the data of the bundled ``digits_vit`` model and of the
perturbation test."""

from __future__ import annotations

import numpy as np

TEST_SIZE = 0.25
SPLIT_SEED = 0


def digits_split() -> dict[str, np.ndarray]:
    """The fixed stratified split of ``load_digits()``: images ``(n, 8, 8)`` in [0, 1] and labels."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    data = load_digits()
    images = (data.images / 16.0).astype(np.float32)
    x_tr, x_te, y_tr, y_te = train_test_split(images, data.target, test_size=TEST_SIZE,
                                              random_state=SPLIT_SEED, stratify=data.target)
    return {"train_images": x_tr, "train_labels": y_tr, "test_images": x_te, "test_labels": y_te}
