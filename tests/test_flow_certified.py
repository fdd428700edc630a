"""The certified flow solver, the cut bounds and ``solver="auto"`` against the networkx oracle."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from test_flow_engine import KINDS, TOL, attention_inputs, capacities, seeded

import attnflow
from attnflow.core.flow import auto, batched, certified, cuts, engine, oracle

torch.set_num_threads(1)


def cut_bound(a: np.ndarray, top: int, q: int, j: int) -> float:
    rows, cols, total = cuts.sums(a)
    hub, hubl, nhub = certified.hubs(a)
    return cuts.cut_bound(a, rows, cols, total, np.where(nhub > 0, hubl[:, 0], -1), top, q, j)


@pytest.mark.parametrize("block", range(8))
def test_certified_matches_oracle_on_seeded_graphs(block: int) -> None:
    for seed in range(block * 50, block * 50 + 50):  # the engine's 400 graphs: every kind of capacity
        a, layer_idx, pos_idx, want = seeded(seed)
        got = certified.solve(a, layer_idx, pos_idx)
        np.testing.assert_allclose(got, want, rtol=0, atol=TOL, err_msg=f"seed {seed}")


@pytest.mark.parametrize("kind", KINDS)
def test_wide_rows_exercise_warm_starts_hubs_and_cut_generation(kind: str) -> None:
    # Wider than the seeded graphs: every sink after the first is a warm start from the previous
    # one (the old sink's column cancelled), and the sparse sub-network must grow on some of them.
    rng = np.random.default_rng(5)
    a = capacities(rng, 5, 14, kind)
    a[1:, :, 3] += 2.0 * rng.random((4, 14))  # a hub column: heavy in-capacity
    layer_idx, pos_idx = np.array([2, 4]), np.array([0, 3, 13])
    stats = np.zeros(6, np.int64)
    got = certified.solve(a, layer_idx, pos_idx, stats=stats)
    np.testing.assert_allclose(got, oracle.solve(a, layer_idx, pos_idx), rtol=0, atol=TOL)
    assert stats[0] > 0  # the push-relabel ran (layers 3 and 5 are not closed forms)


def test_cut_generation_and_engine_fallback_paths_are_taken_and_exact() -> None:
    rng = np.random.default_rng(8)
    a = capacities(rng, 4, 12, "dense")
    layer_idx, pos_idx = np.array([2, 3]), np.arange(12)
    want = oracle.solve(a, layer_idx, pos_idx)
    grown = np.zeros(6, np.int64)
    np.testing.assert_allclose(certified.solve(a, layer_idx, pos_idx, stats=grown), want, rtol=0, atol=TOL)
    assert grown[3] > 0 and grown[5] > 0  # cut checks ran and arcs were learned
    left = np.zeros(6, np.int64)  # no cut-generation round: every uncertified sink goes to the engine
    np.testing.assert_allclose(certified.solve(a, layer_idx, pos_idx, stats=left, rounds=0), want, rtol=0, atol=TOL)
    assert left[4] > 0


def test_certified_is_scale_exact_on_tiny_capacities() -> None:
    for seed in range(10):
        a = capacities(np.random.default_rng(2000 + seed), 4, 6, "sparse" if seed % 2 else "dense")
        everything = np.arange(4), np.arange(6)
        got = certified.solve(a * 1e-12, *everything) / 1e-12
        np.testing.assert_allclose(got, oracle.solve(a, *everything), rtol=0, atol=TOL)


@settings(deadline=None, max_examples=100)
@given(attention_inputs())
def test_public_flow_certified_and_auto_match_oracle(case) -> None:
    w, options = case
    want = attnflow.flow(w, normalize=False, solver="networkx", **options)
    for solver in ("certified", "auto"):
        np.testing.assert_allclose(attnflow.flow(w, normalize=False, solver=solver, **options), want, rtol=0, atol=TOL)


@settings(deadline=None, max_examples=100)
@given(st.integers(2, 5), st.integers(1, 7), st.sampled_from(KINDS), st.integers(0, 2**32 - 1))
def test_cut_bound_is_a_cut_and_closed_forms_are_exact(layers: int, n: int, kind: str, seed: int) -> None:
    rng = np.random.default_rng(seed)
    a = capacities(rng, layers, n, kind)
    q, j = int(rng.integers(n)), int(rng.integers(n))
    want = oracle.solve(a, np.array([layers - 1, 1]), np.array([q]))[:, 0, j]
    assert cut_bound(a, layers, q, j) >= want[0] - TOL  # every value is bounded by the family
    assert abs(cuts.layer_two(a, q, j) - want[1]) <= TOL


def test_cut_bound_finds_the_binding_cut_on_hand_made_graphs() -> None:
    n = 4
    a = np.full((3, n, n), 0.25)
    # The source's out-capacity binds: it sends 1, every sink could take 1 (column sums are 1).
    assert cut_bound(a, 3, 0, 2) == pytest.approx(1.0)
    assert oracle.solve(a, np.array([2]), np.array([0]))[0, 0, 2] == pytest.approx(1.0)
    # A token that keeps its attention on itself: the source's own column is the cut,
    # sum_{m >= 2} (1 - A_m[q, q]) + A_1[q, j].
    b = np.full((3, n, n), 0.1 / (n - 1))
    for m in range(3):
        np.fill_diagonal(b[m], 0.9)
    want = 2 * 0.1 + b[0, 0, 2]
    assert cut_bound(b, 3, 0, 2) == pytest.approx(want)
    assert oracle.solve(b, np.array([2]), np.array([0]))[0, 0, 2] == pytest.approx(want)


def test_auto_races_per_layer_on_full_maps_and_stays_exact() -> None:
    rng = np.random.default_rng(12)
    a = capacities(rng, 4, auto.RACE_ROWS, "stochastic")
    per_pair, rows = auto.race(a, 3, np.array([0, 7, 9]))
    assert set(per_pair) == {"certified", "engine"} and all(t >= 0 for t in per_pair.values())
    np.testing.assert_allclose(rows, oracle.solve(a, np.array([3]), np.array([0, 7, 9]))[0], rtol=0, atol=TOL)
    alone, rows = auto.race(a, 3, np.array([4]), names=("certified",))
    assert list(alone) == ["certified"]
    np.testing.assert_allclose(rows, oracle.solve(a, np.array([3]), np.array([4]))[0], rtol=0, atol=TOL)
    # a solver that can no longer beat the time to beat stops between rows: no time, no rows
    beaten, rows = auto.race(a, 3, np.array([0, 7, 9]), beat=-1.0)  # a time nobody beats
    assert beaten == {"certified": np.inf, "engine": np.inf} and rows is None
    everything = np.arange(4), np.arange(auto.RACE_ROWS)
    np.testing.assert_allclose(auto.solve(a, *everything), engine.solve(a, *everything), rtol=0, atol=TOL)


def test_a_full_map_prepares_its_graph_once(monkeypatch) -> None:
    # The race's rows and the rest of every layer share one certified.graph_of (hubs, heavy arcs,
    # sums: O(L n^2)); before, each raced row and each layer's rest prepared it again. Each raced
    # layer's reversed graph (auto.reversed_graph) is another graph, prepared once too.
    rng = np.random.default_rng(13)
    a = capacities(rng, 4, auto.RACE_ROWS, "stochastic")
    calls = []
    prepare = certified.graph_of
    monkeypatch.setattr(certified, "graph_of", lambda x: calls.append(x.shape[0]) or prepare(x))
    everything = np.arange(4), np.arange(auto.RACE_ROWS)
    got = auto.solve(a, *everything)
    assert sorted(calls) == [3, 4, 4]  # the graph, and the reversed ones of layers 3 and 4 (raced)
    np.testing.assert_allclose(got, oracle.solve(a, *everything), rtol=0, atol=TOL)
    _, rows = auto.race(a, 2, np.array([0, 5]), graph=prepare(a))
    np.testing.assert_allclose(rows, oracle.solve(a, np.array([2]), np.array([0, 5]))[0], rtol=0, atol=TOL)


@pytest.mark.parametrize("kind", ["stochastic", "causal", "sparse"])
def test_a_reversed_graph_holds_the_map_transposed(kind: str) -> None:
    # Flow from (top, j) to (0, q) with every arc turned round = flow from (top, q) to (0, j).
    rng = np.random.default_rng(21)
    a = capacities(rng, 4, 9, kind)
    for top in (3, 4):
        b = auto.reversed_graph(a, top)
        assert b.shape == (top, 9, 9) and b.flags.c_contiguous
        want = oracle.solve(a, np.array([top - 1]), np.arange(9))[0]
        np.testing.assert_allclose(oracle.solve(b, np.array([top - 1]), np.arange(9))[0], want.T, rtol=0, atol=TOL)


@pytest.mark.parametrize("backwards", [True, False])
def test_a_full_map_layer_goes_the_way_its_race_says_and_stays_exact(monkeypatch, backwards: bool) -> None:
    # auto.solve races forwards (rows) and backwards (columns, on the reversed graph) and gives the
    # rest of the layer to the faster per pair: make one direction win and check the whole map.
    rng = np.random.default_rng(22)
    n = auto.RACE_ROWS
    a = capacities(rng, 4, n, "causal")
    real = auto.race
    seen = []

    def rigged(graph, layer, positions, cancel=None, prepared=None, names=("certified", "engine"), beat=np.inf):
        per_pair, rows = real(graph, layer, positions, cancel, prepared, names, beat)
        reverse = graph is not a
        seen.append((reverse, names))
        return {name: (0.0 if reverse == backwards else 1.0) for name in per_pair}, rows

    monkeypatch.setattr(auto, "race", rigged)
    solved = []
    for module in (certified, engine):
        def spied(g, *args, solve=module.solve, **kw):
            solved.append(g is a)
            return solve(g, *args, **kw)

        monkeypatch.setattr(module, "solve", spied)
    everything = np.arange(4), np.arange(n)
    np.testing.assert_allclose(auto.solve(a, *everything), oracle.solve(a, *everything), rtol=0, atol=TOL)
    # layers 3 and 4 each raced the certified solver backwards, then both forwards
    assert seen == [(True, ("certified",)), (False, ("certified", "engine"))] * 2
    # layers 1 and 2 (closed forms) on the graph itself, then each raced layer's rest the way that won
    assert solved == [True, True, not backwards, not backwards]


@pytest.fixture(scope="module")
def minilm_attention(minilm_path):
    """Real attention: all-MiniLM-L6-v2 (6 layers, 12 heads) on a few texts, ``[(layers, heads, n, n)]``."""
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(minilm_path)
    model = AutoModel.from_pretrained(minilm_path, attn_implementation="eager").eval()
    texts = ["The cat sat on the mat.", "A quick brown fox jumps over the lazy dog, twice.",
             "Rivers, mountains and old cities: a long book about history.", "Hello world!",
             "She gave him the keys because he asked for them politely."]
    out = []
    with torch.no_grad():
        for text in texts:
            enc = tokenizer(text, return_tensors="pt")
            out.append(torch.stack(model(**enc, output_attentions=True).attentions)[:, 0].double().numpy())
    return out


def test_real_attention_matches_oracle_and_engine(minilm_attention) -> None:
    # 5 texts x 4 variants = 20 real graphs: head fusions, residuals, causal masking, padding.
    variants = [dict(head_fusion="mean"), dict(head_fusion="max", residual=0.0), dict(causal=True, residual=0.9),
                dict(padding=True, head_fusion="min")]
    for w in minilm_attention:
        n = w.shape[-1]
        for variant in variants:
            v = dict(variant)
            causal, padding = v.pop("causal", False), v.pop("padding", False)
            x = np.tril(w) / np.tril(w).sum(-1, keepdims=True) if causal else w
            mask = None
            if padding:  # the last two tokens are padding: left out of the graph
                mask = np.ones(n, bool)
                mask[-2:] = False
            rows = dict(layers=[-1, 2], positions=[n // 3], normalize=False, mask=mask, **v)
            want = attnflow.flow(x, solver="networkx", **rows)
            for solver in ("certified", "engine", "auto"):
                np.testing.assert_allclose(attnflow.flow(x, solver=solver, **rows), want, rtol=0, atol=TOL,
                                           err_msg=f"{solver} {variant}")


def test_real_attention_full_map_equals_the_engine(minilm_attention) -> None:
    # Every layer and position of the longest text: the certified solver, auto and the engine agree.
    w = max(minilm_attention, key=lambda x: x.shape[-1])
    want = attnflow.flow(w, normalize=False, solver="engine")
    for solver in ("certified", "auto"):
        np.testing.assert_allclose(attnflow.flow(w, normalize=False, solver=solver), want, rtol=0, atol=1e-12)


def test_torch_batched_solver_matches_oracle_on_seeded_graphs() -> None:
    # The GPU path, run here on the CPU: every kind of capacity, causal and tiny ones included.
    for seed in range(0, 240, 6):
        a, layer_idx, pos_idx, want = seeded(seed)
        np.testing.assert_allclose(batched.solve(a, layer_idx, pos_idx, device="cpu"), want, rtol=0, atol=TOL,
                                   err_msg=f"seed {seed}")


def test_torch_batched_solver_on_real_attention_and_small_batches(minilm_attention, monkeypatch) -> None:
    # Batches smaller than a row (the memory cap) split the pairs; the values do not change.
    monkeypatch.setattr(batched, "MEMORY", 3 * 6 * 16 * 16)
    w = minilm_attention[0]
    rows = dict(layers=[-1, 1], positions=[0, 3], normalize=False)
    np.testing.assert_allclose(attnflow.flow(w, solver="torch", **rows), attnflow.flow(w, solver="engine", **rows),
                               rtol=0, atol=TOL)


@settings(deadline=None, max_examples=100)
@given(st.integers(3, 6), st.integers(2, 9), st.sampled_from(KINDS), st.integers(0, 2**32 - 1))
def test_causal_cut_family_is_a_cut_and_no_looser(layers: int, n: int, kind: str, seed: int) -> None:
    # issue 31: on causal graphs the positions before the sink go to the source side for free
    rng = np.random.default_rng(seed)
    a = np.ascontiguousarray(np.tril(capacities(rng, layers, n, kind)))
    a[:, np.arange(n), np.arange(n)] += 0.5  # a positive diagonal, as the residual gives
    rows, cols, total = cuts.sums(a)
    hub, hubl, nhub = certified.hubs(a)
    first = np.where(nhub > 0, hubl[:, 0], -1)
    live = cuts.live_totals(a, cols)
    assert live.shape == (layers, n)
    q = int(rng.integers(n))
    want = oracle.solve(a, np.array([layers - 1]), np.array([q]))[0, 0]
    for j in range(n):
        causal = cuts.cut_bound(a, rows, cols, total, first, layers, q, j, live)
        assert causal >= want[j] - TOL
        assert causal <= cuts.cut_bound(a, rows, cols, total, first, layers, q, j) + TOL
    not_causal = a.copy()
    not_causal[0, 0, n - 1] = 0.1
    assert cuts.live_totals(not_causal, cuts.sums(not_causal)[1]).shape == (0, 0)


def test_the_kernels_python_calls_release_the_gil():
    # Python calls these directly, for seconds at a time on long inputs (solve_sinks, the race of
    # "auto", the engine's leftovers). Holding the GIL meanwhile froze every other thread: the app's
    # server stopped serving its pages' event streams and took a running flow for an abandoned page.
    from attnflow.core.flow import certified, engine

    for kernel in (engine._source_sinks, engine._rows, engine._rows_serial, certified._source_row, certified._tasks):
        assert kernel.targetoptions.get("nogil"), f"{kernel.py_func.__name__} holds the GIL"
