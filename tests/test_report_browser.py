"""The HTML report in a real headless Chromium (Debian's /usr/bin/chromium driven by playwright).

Every page is opened with all non-file requests aborted and recorded, and console errors collected;
each test then asserts that nothing was fetched and nothing failed. Values are read back from what
the page renders (each token's data-score and its background alpha) and compared with the numbers
of the result (text, every-target maps, generation, image) the page was made from.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile

import numpy as np
import pytest
import torch
from factory import text_result
from test_results import image

import attnflow
from attnflow.views.report import save_report

CHROMIUM = os.environ.get("ATTNFLOW_CHROMIUM", "/usr/bin/chromium")
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
RTOL, ATOL = 1e-3, 1e-9  # the page embeds 4 significant digits
torch.set_num_threads(1)


def _unavailable(reason: str) -> None:
    # In CI a missing browser is a broken setup, not a reason to skip: a skip would hide the feature.
    if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
        pytest.fail(f"browser tests cannot run in CI: {reason} (`make test` runs `make browser`, which installs it)")
    pytest.skip(reason)


def browser_api():
    """playwright's sync API once Chromium is there (else skip locally, fail in CI)."""
    try:
        import playwright.sync_api as playwright_api
    except ImportError:
        _unavailable("playwright (python) is not installed")
    if not (os.path.isfile(CHROMIUM) and os.access(CHROMIUM, os.X_OK)):
        _unavailable(f"no Chromium at {CHROMIUM}")
    return playwright_api


@pytest.fixture(scope="module")
def context():
    playwright_api = browser_api()
    profile = tempfile.mkdtemp(prefix="attnflow-chromium-")
    with playwright_api.sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(profile, executable_path=CHROMIUM, headless=True, args=ARGS,
                                                   viewport={"width": 1100, "height": 800})
        yield ctx
        ctx.close()
    shutil.rmtree(profile, ignore_errors=True)


class Page:
    """A page with the network cut off: every non-file request is aborted and remembered."""

    allowed = "file:"  # what the page may load: URLs starting so

    def __init__(self, context, url: str):
        self.fetched: list[str] = []
        self.errors: list[str] = []
        self.page = context.new_page()
        self.page.route("**/*", self._route)
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(url)
        self.page.wait_for_selector("body[data-ready='1']", timeout=30_000)

    def _route(self, route):
        if route.request.url.startswith(self.allowed):
            route.continue_()
        else:
            self.fetched.append(route.request.url)
            route.abort()

    def clean(self) -> None:
        assert self.fetched == [], f"the page tried to fetch {self.fetched}"
        assert self.errors == [], f"console errors: {self.errors}"

    def settle(self) -> None:
        """Wait until no lazily loaded chunk is being decoded (long inputs)."""
        self.page.wait_for_selector("body:not([data-loading])", timeout=30_000)

    def scores(self, kind: str = "input") -> list[float | None]:
        self.settle()
        return self.page.eval_on_selector_all(
            f"[data-kind='{kind}']",
            "els => els.map(e => e.dataset.score === undefined ? null : Number(e.dataset.score))")

    def alphas(self, kind: str = "input") -> list[float]:
        self.settle()
        backgrounds = self.page.eval_on_selector_all(
            f"[data-kind='{kind}']", "els => els.map(e => getComputedStyle(e).backgroundColor)")
        out = []
        for bg in backgrounds:
            parts = re.findall(r"[\d.]+", bg)
            out.append(float(parts[3]) if len(parts) == 4 else (1.0 if parts and bg.startswith("rgb(") else 0.0))
        return out

    def set_layer(self, layer: int) -> None:
        """Move the slider with the keyboard, as a user would (0-based layer)."""
        self.page.focus("#layer")
        self.page.keyboard.press("Home")
        for _ in range(layer):
            self.page.keyboard.press("ArrowRight")
        assert self.page.get_attribute("body", "data-layer") == str(layer)


def _left_out(top_row: np.ndarray, target: int | None, special=()) -> set[int]:
    """The sink-aware scale's exclusions, from the definition: the target, special tokens, and a
    non-target source holding more than half of the top layer's row."""
    out = set(special) | ({target} if target is not None else set())
    share = np.asarray(top_row) / np.sum(top_row)
    out |= {int(j) for j in np.flatnonzero(share > 0.5) if j != target}
    return out


def _assert_row(page: Page, expected: np.ndarray, kind: str = "input", left_out=()) -> None:
    np.testing.assert_allclose(page.scores(kind), expected, rtol=RTOL, atol=ATOL)
    # The highlight itself: background alpha is the score over the maximum of the sources the
    # sink-aware scale keeps (the left-out ones saturate). Chromium keeps alpha in 1/255 steps.
    kept = [j for j in range(len(expected)) if j not in set(left_out)]
    top = expected[kept].max() if kept else expected.max()
    np.testing.assert_allclose(page.alphas(kind), np.minimum(1, expected / top), atol=5e-3)


def _explanations(n: int, layers: int, seed: int = 0, tokens: list[str] | None = None):
    tokens = tokens or [f"tok{i}" for i in range(n)]
    return text_result(tokens, layers, seed=seed, input=" ".join(tokens), model="synthetic")


def test_network_guard_sees_a_fetch(context, tmp_path):
    # The guard itself must be able to fail: a page with an external image is caught.
    path = tmp_path / "leaky.html"
    path.write_text('<body data-ready="1"><img src="http://example.invalid/x.png"></body>')
    page = Page(context, path.as_uri())
    page.page.wait_for_timeout(200)
    assert page.fetched == ["http://example.invalid/x.png"]


def test_switching_method_and_layer_shows_the_explanations_numbers(context, tmp_path):
    result = _explanations(9, 4)
    path = tmp_path / "report.html"
    save_report(result, str(path))
    page = Page(context, path.as_uri())
    assert page.page.get_attribute("body", "data-method") == "rollout"
    for method in result.methods:
        page.page.click(f"#methods button[data-method='{method}']")
        assert page.page.get_attribute("body", "data-method") == method
        for layer in (0, 2, 3):
            page.set_layer(layer)
            _assert_row(page, result.row(method)[layer], left_out=_left_out(result.row(method)[-1], 0))
    page.clean()


def test_the_page_opens_on_the_method_and_target_of_the_result(context, tmp_path):
    result = _explanations(6, 2).select(methods=["raw", "flow"])
    result.method = "flow"
    path = tmp_path / "flow.html"
    result.to_html(str(path))
    page = Page(context, path.as_uri())
    assert page.page.get_attribute("body", "data-method") == "flow"
    _assert_row(page, result.row("flow")[-1], left_out=_left_out(result.row("flow")[-1], 0))
    page.clean()


def test_clicking_a_token_makes_it_the_target(context, tmp_path):
    torch.manual_seed(0)
    attentions = torch.rand(3, 2, 7, 7).softmax(-1)
    tokens = [f"w{i}" for i in range(7)]
    # flow for the captured target only: the page must say so and show no flow values elsewhere.
    maps = attnflow.explain_attentions(attentions, tokens, target=0, flow_targets="target")
    path = tmp_path / "maps.html"
    maps.to_html(str(path))
    page = Page(context, path.as_uri())
    page.page.click(".tok[data-kind='input'][data-index='4']")
    assert page.page.get_attribute("body", "data-target") == "4"
    for method in ("raw", "rollout"):
        page.page.click(f"#methods button[data-method='{method}']")
        page.set_layer(1)
        _assert_row(page, maps.row(method, 4)[1], left_out=_left_out(maps.row(method, 4)[-1], 4))
    page.page.click("#methods button[data-method='flow']")
    assert page.scores() == [None] * 7
    assert "position 0 only" in page.page.text_content("#note")
    page.page.click(".tok[data-kind='input'][data-index='0']")
    _assert_row(page, maps.row("flow", 0)[1], left_out=_left_out(maps.row("flow", 0)[-1], 0))
    page.clean()


def test_script_tokens_are_shown_as_text(context, tmp_path):
    tokens = ["[CLS]", "<script>", "window.pwned=1", "</script>", '<img src=x onerror="window.pwned=2">', "&amp;"]
    result = _explanations(len(tokens), 2, tokens=tokens)
    path = tmp_path / "xss.html"
    assert result.to_html(str(path)) == str(path)
    html = path.read_text()
    assert len(re.findall(r"</script", html, flags=re.I)) == 2  # only the page's own two blocks close
    page = Page(context, path.as_uri())
    shown = page.page.eval_on_selector_all(".tok[data-kind='input']", "els => els.map(e => e.textContent)")
    assert shown == tokens
    assert page.page.evaluate("window.pwned") is None
    assert page.page.title() == "attnflow: " + " ".join(tokens)
    page.clean()


def test_512_tokens_render_and_switch_target(context, tmp_path):
    # A full-length BERT input (raw and rollout for all 512 targets, 6 layers) renders every token and
    # follows a click; how long it takes is measured by benchmarks/report_render.py, not asserted here.
    n = 512
    torch.manual_seed(0)
    attentions = torch.rand(6, 1, n, n).softmax(-1)
    maps = attnflow.explain_attentions(attentions, [f"t{i}" for i in range(n)], methods=("raw", "rollout"))
    path = tmp_path / "long.html"
    maps.to_html(str(path))
    page = Page(context, path.as_uri())
    assert len(page.scores()) == n
    page.page.click(".tok[data-kind='input'][data-index='300']")
    _assert_row(page, maps.row("rollout", 300)[5], left_out=_left_out(maps.row("rollout", 300)[5], 300))
    page.clean()


def _generation(rng: np.random.Generator) -> dict:
    # the 0.1 generation schema: the page must show old files too
    prompt, generated, layers = ["The", " keys", " to", " the", " cabinet"], [" are", " on", " <b>"], 3
    width = len(prompt) + len(generated)
    rows = [[list(rng.dirichlet(np.ones(len(prompt) + g + 1))) + [0.0] * (width - len(prompt) - g - 1)
             for _ in range(layers)] for g in range(len(generated))]
    m = [[[rows[g][l][j] for l in range(layers)] for j in range(len(prompt))] for g in range(len(generated))]
    return {"kind": "generation", "model": "synthetic", "prompt": "".join(prompt), "prompt_tokens": prompt,
            "generated_tokens": generated, "method": "rollout", "M": m, "rows": rows}


def test_clicking_a_generated_token_updates_the_prompt(context, tmp_path):
    data = _generation(np.random.default_rng(1))
    saved = tmp_path / "gen.json"
    saved.write_text(json.dumps(data))
    path = tmp_path / "gen.html"
    attnflow.load(saved).to_html(str(path))
    page = Page(context, path.as_uri())
    m = np.asarray(data["M"])
    for g in (2, 1):
        page.page.click(f".tok[data-kind='generated'][data-index='{g}']")
        assert page.page.get_attribute("body", "data-target") == str(g)
        page.set_layer(1)
        expected = m[g, :, 1]
        earlier = np.asarray(data["rows"][g][1][5:5 + g])  # earlier generated tokens, from "rows"
        np.testing.assert_allclose(page.scores(), expected, rtol=RTOL)
        np.testing.assert_allclose(page.scores("generated")[:g], earlier, rtol=RTOL)
        # sink-aware scale: the predicting position (the last earlier token, source m - 1 + g) and a
        # token holding more than half of the top layer's row are left out of the scale
        row_top = np.asarray(data["rows"][g][-1])
        both = np.concatenate([expected, earlier])
        gone = _left_out(row_top[: 5 + g], 4 + g)
        kept = [j for j in range(len(both)) if j not in gone]
        np.testing.assert_allclose(page.alphas(), np.minimum(1, expected / both[kept].max()), atol=5e-3)
    page.clean()


def test_image_report_colours_every_patch_and_switches_layer(context, tmp_path):
    result = image()
    path = tmp_path / "image.html"
    result.to_html(str(path))
    page = Page(context, path.as_uri())
    assert page.page.eval_on_selector("#image", "img => img.complete && img.naturalWidth") == 8
    for layer in (0, 1):
        page.set_layer(layer)
        _assert_row(page, result.row("rollout")[layer], kind="patch")
    page.page.click("#methods button[data-method='flow']")
    _assert_row(page, result.row("flow")[1], kind="patch")
    page.set_layer(0)
    assert page.scores("patch") == [None] * 4 and "not computed at layer 1" in page.page.text_content("#note")
    page.clean()


def test_notebook_repr_renders_in_an_iframe(context, tmp_path):
    explanation = _explanations(5, 2)
    path = tmp_path / "nb.html"
    path.write_text(f"<!DOCTYPE html><html><body>{explanation._repr_html_()}</body></html>")
    page = context.new_page()
    page.goto(path.as_uri())
    frame = page.frame_locator("iframe")
    frame.locator("body[data-ready='1']").wait_for(timeout=30_000)
    scores = frame.locator(".tok[data-kind='input']").evaluate_all("els => els.map(e => Number(e.dataset.score))")
    np.testing.assert_allclose(scores, explanation.row()[-1], rtol=RTOL)


@pytest.mark.parametrize("encoding", ["f16", "log8"])
def test_long_input_loads_other_targets_lazily_from_the_same_file(context, tmp_path, monkeypatch, encoding):
    """Above LAZY_ABOVE numbers the page opens on one target and decodes the others' chunk when a
    token is clicked; what it then shows is the result's numbers within the encoding's precision."""
    from attnflow.views.report import data as report_data

    if encoding == "log8":
        monkeypatch.setattr(report_data, "F16_MAX", 0)
    n, layers = 200, 4
    torch.manual_seed(2)
    logits = torch.randn(layers, 1, n, n) * 2 + torch.triu(torch.full((n, n), -torch.inf), 1)
    maps = attnflow.explain_attentions(logits.softmax(-1), [f"t{i}" for i in range(n)], target=n - 1,
                                       methods=("raw", "rollout"))
    path = tmp_path / "lazy.html"
    maps.to_html(str(path))
    html = path.read_text()
    chunks = 2 * -(-(n - 1) // report_data.CHUNK_TARGETS)  # two methods, every target but the opening one
    assert html.count('<script type="application/octet-stream" id="attnflow-chunk-') == chunks
    page = Page(context, path.as_uri())
    _assert_row(page, maps.row("rollout", n - 1)[-1])  # the opening target: embedded, 4 digits
    rtol = 5e-4 if encoding == "f16" else 0.028
    for target, method, layer in ((37, "rollout", 3), (150, "raw", 1), (37, "raw", 0)):
        page.page.click(f"#methods button[data-method='{method}']")
        page.page.click(f".tok[data-kind='input'][data-index='{target}']")
        page.set_layer(layer)
        expected = maps.row(method, target)[layer]
        got = np.asarray(page.scores(), dtype=float)
        visible = expected >= expected.max() * 2.0 ** -report_data.LOG8_OCTAVES
        np.testing.assert_allclose(got[visible], expected[visible], rtol=rtol, atol=6e-8)
        np.testing.assert_allclose(page.alphas(), expected / expected.max(), atol=0.03)
        note = page.page.text_content("#note") or ""
        assert ("within 3%" in note) == (encoding == "log8")


def test_sink_aware_scale_leaves_target_special_and_sink_out_and_says_so(context, tmp_path):
    """A row whose token 'sink' holds 0.6 at the top layer, [CLS] special, target 'w3': by default the
    colours are scaled to the largest of the other tokens and the legend names all three; unticking
    the box scales to the whole row again."""
    tokens = ["[CLS]", "sink", "a", "w3", "b"]
    row = np.array([[0.1, 0.3, 0.2, 0.3, 0.1], [0.15, 0.6, 0.1, 0.1, 0.05]])  # (layers, sources)
    result = attnflow.Attribution(kind="text", sources=tokens, targets=tokens, target_positions=list(range(5)),
                                  blocks={"rollout": attnflow.results.Block.rows(row[None], [3])}, n_layers=2,
                                  target=3, meta={"special": [0]})
    path = tmp_path / "sink.html"
    result.to_html(str(path))
    page = Page(context, path.as_uri())
    legend = page.page.text_content("#legend-text")
    assert "the target “w3”" in legend and "special tokens “[CLS]”" in legend and "“sink” (holds 0.60" in legend
    top = row[-1]
    np.testing.assert_allclose(page.alphas(), np.minimum(1, top / max(top[2], top[4])), atol=5e-3)
    page.page.uncheck("#skip-target")
    np.testing.assert_allclose(page.alphas(), top / top.max(), atol=5e-3)
    assert "outside" not in page.page.text_content("#legend-text")
    page.clean()


def test_faithfulness_table_in_the_report(context, tmp_path):
    result = _explanations(6, 3)
    nan = None
    result.meta["faithfulness"] = {
        "output": 1, "label": "plural", "logit": 3.0, "probability": 0.9, "positions": [1, 2, 3, 4, 5],
        "loo": [nan, 0.1, 0.2, 0.3, 0.4, 0.5], "fractions": [0.1, 0.2, 0.5], "deletion": "delete",
        "methods": {m: {"spearman": [0.1 * i, -0.5, nan], "comprehensiveness": [0.2, 0.3, 0.4],
                        "sufficiency": [0.05, 0.06, 0.07]} for i, m in enumerate(result.methods, start=1)}}
    path = tmp_path / "faith.html"
    result.to_html(str(path))
    page = Page(context, path.as_uri())
    assert page.page.is_visible("#faith-block")
    rows = page.page.eval_on_selector_all("#faith tbody tr", "trs => trs.map(r => [...r.cells].map(c => c.textContent))")
    assert [r[0] for r in rows] == ["3", "2", "1"]  # top layer first
    methods = list(result.methods)
    i = methods.index("rollout")
    assert rows[2][1 + 3 * i: 4 + 3 * i] == [f"+{0.1 * (i + 1):.2f}", "+0.20", "+0.05"]
    assert rows[0][1 + 3 * i] == "–"  # NaN (None) shows as a dash
    assert "plural" in page.page.text_content("#faith-text")
    page.clean()


def test_a_method_without_layers_is_one_row_and_negative_scores_are_red(context, tmp_path):
    """Ablated flow (no layers axis): the heatmap draws its one row (not one over 29 empty ones), the
    tokens show it at any layer, and a negative score (the logit rises without the token) is drawn in
    red on the scale of |score|, never as no effect."""
    from attnflow.results import Attribution, Block

    tokens = ["a", "b", "c", "d", "e"]
    row = np.array([[[0.1, -0.8, 0.4, 0.2, 0.0]]])
    result = Attribution(kind="text", sources=tokens, targets=tokens, target_positions=list(range(5)),
                         blocks={"ablated-flow": Block(row, (4,), (29,))}, n_layers=30, target=4,
                         method="ablated-flow")
    path = tmp_path / "ablated.html"
    result.to_html(str(path))
    page = Page(context, path.as_uri())
    assert page.page.get_attribute("#heatmap", "data-rows") == "1"
    page.set_layer(3)  # any layer: the one row is what the tokens show
    assert page.scores() == pytest.approx([0.1, -0.8, 0.4, 0.2, 0.0])
    backgrounds = page.page.eval_on_selector_all("[data-kind='input']", "els => els.map(e => e.style.background)")
    assert "185, 28, 28" in backgrounds[1] and "185, 28, 28" not in backgrounds[2]
    assert page.alphas()[1] > page.alphas()[2] > 0  # |-0.8| is the largest effect, drawn strongest
    page.clean()
