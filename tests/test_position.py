"""Position as a rival explanation: the partial Spearman given position against an independent
residual computation, its invariants (hypothesis), the priors, the bootstrap intervals, and the
faithfulness record carrying them."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import pearsonr, rankdata

from attnflow.evaluation.faithfulness import Faithfulness, evaluate
from attnflow.evaluation.position import (
    PRIORS,
    bootstrap_interval,
    mean_interval,
    partial_spearman,
    position_rho,
    priors,
    residual_rank_correlation,
    spearman_interval,
)

vectors = st.integers(4, 14).flatmap(lambda n: st.tuples(
    *[st.lists(st.integers(-6, 6), min_size=n, max_size=n) for _ in range(3)]))


def _by_hand(x, y, z):
    """A third way: partial correlation from the inverse of the 3x3 rank-correlation matrix."""
    r = np.corrcoef(np.stack([rankdata(x), rankdata(y), rankdata(z)]))
    p = np.linalg.inv(r)
    return -p[0, 1] / np.sqrt(p[0, 0] * p[1, 1])


def test_partial_equals_residualised_ranks_and_the_precision_matrix():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(5, 30))
        z = np.arange(n, dtype=float)
        x = rng.normal(size=n) + 0.3 * z
        y = rng.normal(size=n) - 0.2 * z + 0.5 * x
        got = float(partial_spearman(x, y, z))
        assert got == pytest.approx(residual_rank_correlation(x, y, z), abs=1e-9)
        assert got == pytest.approx(_by_hand(x, y, z), abs=1e-9)
        # and by a fourth route: Pearson of residuals from numpy's polyfit
        rx, ry = rankdata(x), rankdata(y)
        ex = rx - np.polyval(np.polyfit(z, rx, 1), z)
        ey = ry - np.polyval(np.polyfit(z, ry, 1), z)
        assert got == pytest.approx(pearsonr(ex, ey).statistic, abs=1e-9)


@settings(max_examples=80, deadline=None)
@given(vectors)
def test_partial_invariants(xyz):
    x, y, z = (np.asarray(v, dtype=float) for v in xyz)  # small integers: ties too
    got = float(partial_spearman(x, y, z))
    if not np.isfinite(got):
        return
    assert -1 <= got <= 1
    assert float(partial_spearman(y, x, z)) == pytest.approx(got, abs=1e-9)           # symmetric in x, y
    assert float(partial_spearman(-x, y, z)) == pytest.approx(-got, abs=1e-9)         # sign flips with x
    assert float(partial_spearman(2 * x - 1, y, z)) == pytest.approx(got, abs=1e-9)  # ranks only
    assert float(partial_spearman(x, y, -z)) == pytest.approx(got, abs=1e-9)          # z's direction is irrelevant
    ref = residual_rank_correlation(x, y, z)
    if np.isfinite(ref):
        assert got == pytest.approx(ref, abs=1e-7)


def test_partial_is_nan_when_a_ranking_is_position_and_broadcasts_over_layers():
    z = np.arange(8.0)
    y = np.array([3, 1, 4, 1, 5, 9, 2, 6.0])
    assert np.isnan(partial_spearman(z, y, z)) and np.isnan(partial_spearman(-2 * z, y, z))
    rows = np.stack([y + z, y - z, np.sin(z)])
    got = partial_spearman(rows, y, z)
    assert got.shape == (3,)
    for layer in range(3):
        assert got[layer] == pytest.approx(residual_rank_correlation(rows[layer], y, z), abs=1e-9)


def test_a_ranking_that_is_position_plus_a_little_evidence_keeps_the_evidence():
    """The study's situation: a score that is position with a small nudge from the evidence correlates
    with position ~1, with leave-one-out like position does, and only the partial shows the nudge."""
    rng = np.random.default_rng(1)
    n = 20
    z = np.arange(n, dtype=float)
    evidence = rng.normal(size=n)
    loo = evidence - 0.1 * z
    score = -z + 0.8 * evidence
    assert abs(float(position_rho(score, z))) > 0.9
    assert float(partial_spearman(score, loo, z)) > 0.5
    # a ranking whose ranks are position's has nothing left once position is taken out
    assert np.isnan(partial_spearman(-z + 1e-3 * rng.normal(size=n), loo, z))


def test_priors_are_position_both_ways():
    p = priors([2, 3, 5, 9])
    assert list(p) == list(PRIORS)
    assert np.array_equal(p[PRIORS[0]], [2, 3, 5, 9]) and np.array_equal(p[PRIORS[1]], [-2, -3, -5, -9])


def test_bootstrap_intervals_cover_and_agree_with_the_loop():
    rng = np.random.default_rng(2)
    x = rng.normal(size=40)
    y = x + rng.normal(size=40)
    lo, hi = spearman_interval(x, y)
    from attnflow.evaluation.correlation import spearman

    rho = float(spearman(x, y))
    assert lo < rho < hi and -1 <= lo < hi <= 1
    # the vectorised interval draws the same resamples as the plain loop with the same seed
    assert (lo, hi) == pytest.approx(bootstrap_interval(lambda i: float(spearman(x[i], y[i])), 40), abs=1e-12)
    v = rng.normal(0.3, 1, size=200)
    lo, hi = mean_interval(v)
    assert lo < v.mean() < hi and hi - lo < 0.5
    assert np.isnan(mean_interval([1.0])[0])


def test_evaluate_records_priors_partials_and_the_best_method():
    """A toy predict whose logit is a weighted sum of token ids: leave-one-out is known exactly."""
    weights = np.array([0.0, 5, 1, 4, 2, 3, 0.5, 0])

    def predict(batch):
        return np.array([[float(sum(weights[t] for t in ids)), 0.0] for ids in batch])

    ids = [1, 2, 3, 4, 5, 6, 7]  # position p holds id p+1; the last (target) is not ranked
    truth = weights[np.array(ids)]
    scores = {"truth": truth, "later": np.arange(7.0), "noise": np.array([3, 1, 2, 0, 5, 4, 6.0])}
    found = evaluate(predict, ids, scores, output=0, target=6)
    assert found.spearman["truth"][0] == pytest.approx(1.0)
    assert found.priors[PRIORS[0]]["spearman"] == pytest.approx(found.spearman["later"][0])
    assert found.priors[PRIORS[1]]["spearman"] == pytest.approx(-found.spearman["later"][0])
    assert np.isnan(found.partial["later"][0]) and found.position["later"][0] == pytest.approx(1.0)
    pos = np.arange(6.0)
    assert found.partial["noise"][0] == pytest.approx(residual_rank_correlation(scores["noise"][:6], truth[:6], pos))
    assert found.best() == ("truth", pytest.approx(1.0))
    lo, hi = found.interval["noise"]
    assert lo <= found.spearman["noise"][0] <= hi
    back = Faithfulness.from_dict(found.to_dict())
    assert back.best() == found.best() and back.priors.keys() == found.priors.keys()
    assert np.allclose(back.partial["noise"], found.partial["noise"])
    assert found.to_dict()["best"] == {"method": "truth", "spearman": pytest.approx(1.0)}
    old = found.to_dict()
    for v in old["methods"].values():  # a record from before: no partials, priors or best
        v.pop("partial"), v.pop("position"), v.pop("interval")
    old.pop("priors"), old.pop("best")
    assert Faithfulness.from_dict(old).partial == {} and Faithfulness.from_dict(old).best()[0] == "truth"


def _record(scores, weights=(0.0, 5, 1, 4, 2, 3, 0.5, 0)):
    w = np.asarray(weights)

    def predict(batch):
        return np.array([[float(sum(w[t] for t in ids)), 0.0] for ids in batch])

    found = evaluate(predict, [1, 2, 3, 4, 5, 6, 7], scores, output=0, target=6)

    class Result:
        meta = {"faithfulness": found.to_dict()}

    return found, Result()


def test_summary_table_notes_position_and_names_the_best():
    from attnflow.views.faithfulness import faithfulness_summary, summary_rows
    from attnflow.views.table import render_text

    found, result = _record({"truth": np.array([5, 1, 4, 2, 3, 0.5, 0]), "later": np.arange(7.0)})
    rows = {r["name"]: r for r in summary_rows(result.meta["faithfulness"])}
    assert rows["later"]["note"] == "this ranking mostly reflects position" and rows["truth"]["note"] == ""
    assert set(PRIORS) <= set(rows) and rows["truth"]["spearman"] == pytest.approx(1.0)
    text = " ".join(render_text(faithfulness_summary(result), width=200).split())  # captions wrap
    assert "agrees best with leave-one-out on this input: truth" in text
    assert "later: this ranking mostly reflects position" in text
    # a method that only equals a prior does not beat it: the tie goes to the prior
    found, result = _record({"earlier": -np.arange(7.0)})
    assert found.best()[0] == PRIORS[1]
    text = " ".join(render_text(faithfulness_summary(result), width=200).split())
    assert "no method ranks the tokens better than their position" in text
