"""The report's position note and faithfulness summary, in a real headless Chromium (playwright):
the page's Spearman with position equals the Python view's (attnflow.views.position) on every method,
layer and target, the note appears exactly when |rho| >= 0.9, and the summary table shows the record's
numbers, priors and best method."""

from __future__ import annotations

import numpy as np
import pytest
from test_report_browser import Page, context  # noqa: F401  (the browser fixture)

from attnflow.evaluation.faithfulness import evaluate
from attnflow.evaluation.position import PRIORS
from attnflow.results import Attribution, Block
from attnflow.views.position import position_note, row_position_rho


def _decoder_result(n: int = 9, layers: int = 3, seed: int = 0) -> Attribution:
    """A causal text result, every target computed: rollout rows falling with position (the decoder's
    pattern), raw rows random, flow rows mixed, so some rows get the note and some do not."""
    rng = np.random.default_rng(seed)
    blocks = {}
    for method in ("raw", "rollout", "flow"):
        values = np.zeros((n, layers, n))
        for t in range(n):
            for layer in range(layers):
                row = rng.dirichlet(np.ones(t + 1))
                if method == "rollout":
                    row = np.sort(row)[::-1] if layer > 0 else row  # the bottom layer stays random
                elif method == "flow" and layer == layers - 1:
                    row = np.sort(row)[::-1] + 0.3 * rng.random(t + 1)
                values[t, layer, : t + 1] = row / row.sum()
        blocks[method] = Block.full(values)
    tokens = [f"w{i}" for i in range(n)]
    return Attribution(kind="text", sources=tokens, targets=tokens, target_positions=list(range(n)), blocks=blocks,
                       n_layers=layers, target=n - 1, method="rollout", input=" ".join(tokens), model="synthetic",
                       meta={"special": [], "causal": True})


def test_the_position_note_matches_the_python_view(context, tmp_path):  # noqa: F811
    result = _decoder_result()
    path = tmp_path / "position.html"
    result.to_html(str(path))
    page = Page(context, path.as_uri())
    seen_note, seen_none = 0, 0
    for target in (8, 5):
        page.page.click(f"#tokens [data-index='{target}']")
        for method in result.methods:
            page.page.click(f"#methods button[data-method='{method}']")
            for layer in range(result.n_layers):
                page.set_layer(layer)
                expected = row_position_rho(result, method, target, layer)
                got = page.page.get_attribute("body", "data-position-rho")
                note = page.page.is_visible("#position-note")
                if np.isfinite(expected):
                    assert float(got) == pytest.approx(expected, abs=1e-3)  # the page has 4 significant digits
                else:
                    assert got == ""
                assert note == bool(position_note(result, method, target, layer)), (method, target, layer, expected)
                if note:
                    assert "this ranking mostly reflects position" in page.page.text_content("#position-note")
                seen_note += note
                seen_none += not note
    assert seen_note and seen_none  # both cases were exercised
    page.clean()


def test_a_causal_row_ranks_only_what_the_target_sees():
    result = _decoder_result()
    # target 4 sees positions 0..4; the note ranks 0..3 (not the target, nothing after it)
    from attnflow.views.position import ranked_sources

    assert ranked_sources(result, 4) == [0, 1, 2, 3]
    result.meta["special"] = [0]
    assert ranked_sources(result, 4) == [1, 2, 3]
    assert np.isnan(row_position_rho(result, "rollout", 2, -1))  # fewer than 3 sources left


def test_the_faithfulness_summary_in_the_report(context, tmp_path):  # noqa: F811
    result = _decoder_result(n=8)
    weights = np.array([0.0, 5, 1, 4, 2, 3, 0.5, 0, 0])

    def predict(batch):
        return np.array([[float(sum(weights[t] for t in ids)), 0.0] for ids in batch])

    found = evaluate(predict, list(range(1, 9)), {"truth": weights[1:9], "earlier": -np.arange(8.0)}, output=0,
                     target=7)
    result.meta["faithfulness"] = found.to_dict()
    path = tmp_path / "summary.html"
    result.to_html(str(path))
    page = Page(context, path.as_uri())
    rows = page.page.eval_on_selector_all("#faith-summary tbody tr",
                                          "trs => trs.map(r => [...r.cells].map(c => c.textContent))")
    by_name = {r[0]: r for r in rows}
    assert list(by_name) == ["truth", "earlier", *PRIORS]
    assert by_name["truth"][1] == "+1.00" and by_name["truth"][5] == ""
    assert by_name["earlier"][5] == "this ranking mostly reflects position"
    lo, hi = found.interval["earlier"]
    assert by_name["earlier"][2] == f"[{lo:+.2f}, {hi:+.2f}]"
    assert by_name[PRIORS[1]][1] == f"{found.priors[PRIORS[1]]['spearman']:+.2f}"
    assert by_name[PRIORS[0]][5] == "a position prior, for scale"
    assert "Agrees best with leave-one-out on this input: truth" in page.page.text_content("#faith-best")
    page.clean()
