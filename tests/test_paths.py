"""The edges that carry a node's rollout or flow, checked against rollout itself and the scipy flow solver."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnflow.core import rollout
from attnflow.core.flow import scipy_pairs
from attnflow.core.paths import attention_graph, flow_edges, rollout_edges


def _graph(seed: int, layers: int, n: int) -> tuple[torch.Tensor, np.ndarray]:
    torch.manual_seed(seed)
    attentions = torch.rand(layers, 2, n, n, dtype=torch.float64).softmax(-1)
    return attentions, attention_graph(attentions)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 10_000), layers=st.integers(1, 4), n=st.integers(2, 6), data=st.data())
def test_rollout_edges_deliver_the_rollout_row(seed, layers, n, data):
    attentions, a = _graph(seed, layers, n)
    layer = data.draw(st.integers(1, layers))
    position = data.draw(st.integers(0, n - 1))
    mass = rollout_edges(a, layer, position)
    expected = np.asarray(rollout(attentions))[layer - 1, position]
    np.testing.assert_allclose(mass[0].sum(axis=0), expected, atol=1e-10)
    np.testing.assert_allclose(mass[:layer].sum(axis=(1, 2)), 1.0, atol=1e-10)  # every layer carries it all
    assert not mass[layer:].any()  # nothing above the node
    for l in range(1, layer):  # what arrives at a node leaves it
        np.testing.assert_allclose(mass[l].sum(axis=0), mass[l - 1].sum(axis=1), atol=1e-10)


@settings(max_examples=15, deadline=None)
@given(seed=st.integers(0, 10_000), layers=st.integers(1, 3), n=st.integers(2, 5), data=st.data())
def test_flow_edges_are_a_maximum_flow(seed, layers, n, data):
    _, a = _graph(seed, layers, n)
    position = data.draw(st.integers(0, n - 1))
    token = data.draw(st.integers(0, n - 1))
    value, f = flow_edges(a, layers, position, token)
    # The value agrees with the independent scipy solver (unnormalised values).
    reference = scipy_pairs.solve(a, np.array([layers - 1]), np.array([position]))[0, 0, token]
    np.testing.assert_allclose(value, reference, atol=1e-5)
    assert (f <= a + 1e-12).all() and (f >= 0).all()  # within capacity
    out_of_source = f[layers - 1, position].sum()
    np.testing.assert_allclose(out_of_source, value, atol=1e-10)
    np.testing.assert_allclose(f[0].sum(axis=0)[token], value, atol=1e-10)
    for l in range(1, layers):  # conservation at every inner node
        np.testing.assert_allclose(f[l].sum(axis=0), f[l - 1].sum(axis=1), atol=1e-10)
