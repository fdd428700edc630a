"""The demonstration method against its oracle: 1/n for every source, target and layer."""

import numpy as np

import attnflow


def test_uniform_is_one_over_n():
    result = attnflow.explain_attentions(np.full((2, 1, 4, 4), 0.25), methods=["uniform", "rollout"])
    np.testing.assert_allclose(result.dense("uniform"), np.full((4, 2, 4), 0.25))
