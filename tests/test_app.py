"""The live explorer: the real ``attnflow app`` server on a free 127.0.0.1 port, driven by playwright
in Debian's headless Chromium.

Every page runs with a guard that lets requests to the app's own origin through and aborts (and
records) any other; each test asserts that nothing else was asked for and no console error occurred.
Numbers are read from what the page shows (data-score of bars and tokens, as in the report tests) and
compared with the api called in this process on the same input. The server is started once for the
module and stopped by its process id at the end, also when a test fails.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

import numpy as np
import pytest
import torch
from test_report_browser import ARGS, CHROMIUM, RTOL, Page, browser_api

import attnflow
from attnflow.api import FLOW_ALL_MAX
from attnflow.app.process import AppProcess
from attnflow.models import bundled_model_path

torch.set_num_threads(1)
COLOSSEUM = "The Colosseum in Rome was"  # SmolLM2, greedy: " built to accommodate the Colosseum's"
AGREEMENT = str(bundled_model_path("agreement"))


@pytest.fixture(scope="module")
def server():
    pytest.importorskip("starlette")
    pytest.importorskip("uvicorn")
    app = AppProcess(["--threads", "1"])
    try:
        app.start()
        yield app
    finally:
        status = app.stop()  # SIGTERM by its pid (uvicorn shuts down, then exits by that signal)
        assert status is not None and app.proc.poll() is not None, f"the server did not stop: {status}"
        os.unlink(app.log)


@pytest.fixture(scope="module")
def browser():
    with browser_api().sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        yield b
        b.close()


class AppPage(Page):
    """The app in a fresh browser context (its own cookies, storage and connections), with the report
    tests' network guard letting through the app's own origin only."""

    def __init__(self, browser, server):
        self.origin = self.allowed = server.url
        self.fetched: list[str] = []
        self.errors: list[str] = []
        self.context = browser.new_context(viewport={"width": 1100, "height": 900})
        self.context.route("**/*", self._route)  # every page and frame of this context
        self.page = self.context.new_page()
        self.page.on("console", lambda m: self.errors.append(m.text) if m.type == "error" else None)
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(server.url)
        self.page.wait_for_selector("body[data-state='idle']", state="attached", timeout=30_000)

    def refused(self, n: int) -> None:
        """Requests the server refused answer 400, which Chromium notes in the console: expect ``n``."""
        assert self.errors == ["Failed to load resource: the server responded with a status of 400 (Bad Request)"] * n
        self.errors.clear()

    def close(self) -> None:
        self.context.close()

    def choose(self, model: str) -> None:
        self.page.select_option("#model", model)

    def run(self) -> None:
        self.previous_job = self.page.get_attribute("body", "data-job")
        self.page.click("#run")

    def wait(self, state: str = "done", timeout: float = 120_000) -> None:
        """Wait for the job started by the last :meth:`run` to end, and fail at once (with the page's
        message) if it ended otherwise."""
        self.page.wait_for_function(
            """previous => document.body.dataset.job && document.body.dataset.job !== previous
                          && ['done', 'error', 'cancelled'].includes(document.body.dataset.state)""",
            arg=self.previous_job, timeout=timeout)
        assert self.page.get_attribute("body", "data-state") == state, self.message()

    def wait_report(self) -> None:
        self.page.wait_for_selector("body[data-report='ready']", state="attached", timeout=60_000)

    @property
    def frame(self):
        return self.page.frame_locator("#report")

    def frame_scores(self, kind: str = "input") -> list[float | None]:
        return self.frame.locator(f"[data-kind='{kind}']").evaluate_all(
            "els => els.map(e => e.dataset.score === undefined ? null : Number(e.dataset.score))")

    def frame_attr(self, name: str) -> str:
        return self.frame.locator("body").get_attribute(f"data-{name}")

    def set_frame_layer(self, layer: int) -> None:
        """Move the report's layer slider with the keyboard, as a user would (0-based layer)."""
        slider = self.frame.locator("#layer")
        slider.focus()
        slider.press("Home")
        for _ in range(layer):
            slider.press("ArrowRight")
        assert self.frame_attr("layer") == str(layer)

    def bars(self) -> list[tuple[int, str, float]]:
        return [(int(p), t, float(s)) for p, t, s in self.page.eval_on_selector_all(
            "#bars .bar", "els => els.map(e => [e.dataset.position, e.dataset.token, e.dataset.score])")]

    def live_tokens(self) -> list[str]:
        return self.page.eval_on_selector_all("#live .tok", "els => els.map(e => e.dataset.token)")

    def message(self) -> str:
        return self.page.text_content("#message") if self.page.is_visible("#message") else ""

    def fetch_json(self, path: str) -> dict:
        with urllib.request.urlopen(self.origin + path, timeout=60) as response:
            return json.loads(response.read())


def _bars_equal(shown, expected) -> None:
    assert [(p, t) for p, t, _ in shown] == [(p, t) for p, t, _ in expected]
    np.testing.assert_allclose([s for *_, s in shown], [s for *_, s in expected], rtol=1e-5, atol=1e-9)


def test_network_guard_sees_a_fetch_and_the_page_policy_refuses_one(server, browser):
    # The guard itself must be able to fail: on a page without the app's policy, a request elsewhere is caught.
    page = AppPage(browser, server)
    plain = page.context.new_page()
    plain.set_content('<img src="http://example.invalid/x.png">')
    plain.wait_for_timeout(300)
    assert page.fetched == ["http://example.invalid/x.png"]
    # On the app's page the browser itself refuses to connect elsewhere (Content-Security-Policy).
    refused = page.page.evaluate("""() => new Promise((resolve) => {
        document.addEventListener('securitypolicyviolation', (e) => resolve(e.violatedDirective));
        fetch('http://example.invalid/y').catch(() => 0);
    })""")
    assert refused == "connect-src" and page.fetched == ["http://example.invalid/x.png"]
    page.close()


def test_colosseum_streams_tokens_and_shows_what_built_drew_on(server, browser, smollm2):
    model, tokenizer = smollm2
    expected = attnflow.generate(model, tokenizer, COLOSSEUM, 8)
    assert " built" in expected.targets
    built = expected.targets.index(" built")

    page = AppPage(browser, server)
    page.choose("smollm2")
    page.page.fill("#prompt", COLOSSEUM)
    page.page.fill("#new-tokens", "8")
    # Record when generated tokens reach the page and when the job ends: they must arrive one by one.
    page.page.evaluate("""() => {
        window.arrivals = [];
        new MutationObserver(() => {
            const n = document.querySelectorAll('#live .tok').length;
            if (n && (!arrivals.length || arrivals[arrivals.length - 1][1] !== n))
                arrivals.push([performance.now(), n, document.body.dataset.state]);
        }).observe(document.getElementById('live'), {childList: true});
    }""")
    page.run()
    page.wait()
    arrivals = page.page.evaluate("window.arrivals")
    assert arrivals[-1][1] == 8 and len(arrivals) >= 3, arrivals  # tokens came in several steps ...
    assert all(state == "running" for _, _, state in arrivals), arrivals  # ... before the job finished
    assert page.live_tokens() == expected.targets
    assert page.page.text_content("#live-prompt") == COLOSSEUM

    page.page.click(f"#live .tok[data-index='{built}']")
    page.page.wait_for_selector(f"body[data-bars='{built}']", state="attached")
    assert " built" in page.page.text_content("#bars-target")
    _bars_equal(page.bars(), expected.top(10, target=built))
    # the filters as toggles: content words only, then also without the attention sink (first token)
    page.page.check("#filters input[data-filter='content_only']")
    page.page.wait_for_selector("body[data-bars-filters='content_only']", state="attached")
    _bars_equal(page.bars(), expected.top(10, target=built, content_only=True))
    page.page.uncheck("#filters input[data-filter='content_only']")
    page.page.check("#filters input[data-filter='sink']")
    page.page.wait_for_selector("body[data-bars-filters='sink']", state="attached")
    _bars_equal(page.bars(), expected.top(10, target=built, skip=[0]))

    # The report beside the bars follows the chosen token: prompt x layers of " built".
    page.wait_report()
    assert page.frame_attr("target") == str(built)
    m = expected.input_length
    page.set_frame_layer(3)
    np.testing.assert_allclose(page.frame_scores(), expected.row(target=built)[3, :m], rtol=RTOL, atol=1e-9)
    # ... and a click on a generated token in the report moves the bars along.
    page.frame.locator(".tok[data-kind='generated'][data-index='2']").click()
    page.page.wait_for_selector("body[data-bars='2']", state="attached")
    _bars_equal(page.bars(), expected.top(10, target=2, skip=[0]))

    # Downloads: the result JSON is the same generation; the report comes as a file.
    href = page.page.get_attribute("#download-json", "href")
    with urllib.request.urlopen(server.url + href, timeout=30) as response:
        assert "attachment" in response.headers["Content-Disposition"]
        saved = attnflow.Attribution.from_json(response.read().decode())
    assert saved.targets == expected.targets and saved.sources == expected.sources
    np.testing.assert_allclose(saved.M, expected.M, rtol=1e-5, atol=1e-9)
    html_href = page.page.get_attribute("#download-html", "href")
    with urllib.request.urlopen(server.url + html_href, timeout=30) as response:
        assert "attachment" in response.headers["Content-Disposition"]
        assert b'id="attnflow-data"' in response.read()
    page.clean()
    page.close()


def test_encoder_method_layer_and_target_switch_live(server, browser):
    text = "the keys to the cabinet"
    expected = attnflow.explain_maps(text, AGREEMENT, methods=("raw", "rollout", "flow", "grad-rollout"))
    page = AppPage(browser, server)
    page.choose("agreement")
    page.page.fill("#text", text)
    for method in ("raw", "rollout", "flow", "grad-rollout"):
        page.page.check(f"#methods input[data-method='{method}']")
    page.run()
    page.wait()
    page.wait_report()
    assert page.frame_attr("target") == str(expected.target)  # [CLS]
    for method in ("raw", "flow", "grad-rollout", "rollout"):
        page.frame.locator(f"#methods button[data-method='{method}']").click()
        assert page.frame_attr("method") == method
        for layer in (0, 3, 5):
            page.set_frame_layer(layer)
            np.testing.assert_allclose(page.frame_scores(), expected.row(method)[layer], rtol=RTOL, atol=1e-9)
    page.frame.locator(".tok[data-kind='input'][data-index='2']").click()  # "keys" as the target
    assert page.frame_attr("target") == "2"
    page.set_frame_layer(4)
    np.testing.assert_allclose(page.frame_scores(), expected.row("rollout", 2)[4], rtol=RTOL, atol=1e-9)

    # Another weighting of the heads is a new run (max over heads, residual 0.3) with its own numbers.
    other = attnflow.explain_maps(text, AGREEMENT, methods=("raw", "rollout"), head_fusion="max", residual=0.3)
    page.page.uncheck("#methods input[data-method='flow']")
    page.page.uncheck("#methods input[data-method='grad-rollout']")
    page.page.select_option("#head-fusion", "max")
    page.page.fill("#residual", "0.3")
    page.run()
    page.wait()
    page.wait_report()
    page.set_frame_layer(2)
    np.testing.assert_allclose(page.frame_scores(), other.row("rollout")[2], rtol=RTOL, atol=1e-9)
    page.clean()
    page.close()


def test_two_pages_at_once_get_their_own_results(server, browser, smollm2):
    model, tokenizer = smollm2
    prompt = "The keys to the cabinet"
    gen = attnflow.generate(model, tokenizer, prompt, 4)
    texts = ("the key to the cabinets", "the keys near the table")
    maps = [attnflow.explain_maps(t, AGREEMENT, methods=("raw", "rollout")) for t in texts]

    other = "Sara asked John to return her book. He said he would give it back to"
    gen2 = attnflow.generate(model, tokenizer, other, 3)
    a, b, c, d = (AppPage(browser, server) for _ in range(4))
    for page, text, n in ((a, prompt, "4"), (d, other, "3")):  # two generations on one decoder
        page.choose("smollm2")
        page.page.fill("#prompt", text)
        page.page.fill("#new-tokens", n)
    for page, text in ((b, texts[0]), (c, texts[1])):
        page.choose("agreement")
        page.page.fill("#text", text)
        page.page.uncheck("#methods input[data-method='flow']")
        page.page.uncheck("#methods input[data-method='grad-rollout']")
    for page in (a, b, c, d):  # all four running before any is awaited
        page.run()
    for page in (a, b, c, d):
        page.wait()
    assert len({p.page.get_attribute("body", "data-job") for p in (a, b, c, d)}) == 4
    for page, expected in ((a, gen), (d, gen2)):
        assert page.live_tokens() == expected.targets
        page.page.wait_for_selector("body[data-bars='0']", state="attached")
        _bars_equal(page.bars(), expected.top(10, target=0))
    for page, text, expected in ((b, texts[0], maps[0]), (c, texts[1], maps[1])):
        page.wait_report()
        assert page.frame.locator("#title").text_content() == text
        np.testing.assert_allclose(page.frame_scores(), expected.row("rollout")[-1], rtol=RTOL, atol=1e-9)
    for page in (a, b, c, d):
        page.clean()
        page.close()
    # every model was loaded once, whichever page asked first, and shared by all of them
    log = server.stderr()
    assert log.count("loaded SmolLM2") == 1 and log.count("loaded agreement") == 1, log


def test_a_long_flow_shows_progress_blocks_nobody_and_cancels(server, browser, minilm):
    # ~470 tokens, flow for every one of them: minutes of work, so it is surely running while the
    # other page gets its answer (at 158 tokens it takes only a few seconds on this machine)
    long_text = " ".join(["the keys to the cabinet are on the table near the old door"] * 36)
    model, tokenizer = minilm
    explained = attnflow.explain(long_text, model, tokenizer=tokenizer, method=["rollout", "flow"])
    slow = AppPage(browser, server)
    slow.choose("minilm")
    slow.page.fill("#text", long_text)
    # the box's label says where it starts to matter: flow covers every token up to FLOW_ALL_MAX anyway
    assert slow.page.text_content("#flow-all-label") == \
        f"flow for every token above {FLOW_ALL_MAX} tokens too (slow)"
    slow.page.check("#flow-all")
    slow.run()
    slow.page.wait_for_function("() => document.getElementById('progress-text').textContent.includes('attention flow')",
                                timeout=120_000)
    assert slow.page.is_visible("#cancel")
    assert "left" in slow.page.text_content("#progress-text")  # an estimate of the time left
    # a first look while the rest runs: the report with flow for the explained target ([CLS]) alone
    slow.page.wait_for_selector("body[data-report='preview']", state="attached", timeout=120_000)
    assert slow.page.get_attribute("body", "data-state") == "running"
    assert slow.frame_attr("target") == "0" and slow.frame_attr("method") == "rollout"
    slow.frame.locator("#methods button[data-method='flow']").click()
    assert "partial" in slow.frame.locator("#methods button[data-method='flow']").get_attribute("class")
    for layer in (0, 5):
        slow.set_frame_layer(layer)
        np.testing.assert_allclose(slow.frame_scores(), explained.row("flow")[layer], rtol=RTOL, atol=1e-9)

    # Meanwhile another page loads and gets its own (quick) result.
    quick = AppPage(browser, server)
    quick.choose("agreement")
    quick.page.fill("#text", "the key to the cabinets")
    quick.page.uncheck("#methods input[data-method='flow']")
    quick.run()
    quick.wait(timeout=60_000)
    assert slow.page.get_attribute("body", "data-state") == "running"

    slow.page.click("#cancel")
    slow.wait("cancelled", timeout=60_000)
    # the first look stays: what was computed is not thrown away
    assert slow.message() == "cancelled: the report shows flow for the explained target only"
    assert slow.page.is_visible("#report") and slow.page.is_hidden("#busy")
    assert slow.frame_attr("method") == "flow"
    job = slow.page.get_attribute("body", "data-job")
    assert slow.fetch_json(f"api/jobs/{job}")["state"] == "cancelled"
    slow.clean()
    quick.clean()
    slow.close()
    quick.close()


def test_the_first_look_gives_way_to_the_whole_map_where_the_reader_was(server, browser, minilm):
    # 108 tokens of prose: flow for every target takes seconds after the first look (the explained target)
    text = ("When the museum reopened after the long winter, the curators moved the bronze horses from the "
            "courtyard into the east gallery, where the light from the tall windows falls on them in the "
            "afternoon. Visitors had complained for years that the statues were hard to see; now a bench "
            "faces them, and a small card explains who cast them, where they stood before, and why the "
            "restorers left the green patina on the manes untouched. The guards say that children now stop "
            "longer there than anywhere else in the building.")
    model, tokenizer = minilm
    page = AppPage(browser, server)
    page.choose("minilm")
    page.page.fill("#text", text)
    page.run()
    page.page.wait_for_selector("body[data-report='preview']", state="attached", timeout=120_000)
    assert page.page.get_attribute("body", "data-state") == "running", "the whole map came before the reader chose"
    page.frame.locator("#methods button[data-method='flow']").click()
    page.frame.locator(".tok[data-kind='input'][data-index='7']").click()  # another target than [CLS]
    page.set_frame_layer(3)
    chosen = page.frame.locator(".tok[data-kind='input'][data-index='7']").text_content().strip()
    assert page.page.get_attribute("body", "data-state") == "running", "the whole map came before the reader chose"
    page.wait(timeout=300_000)
    page.wait_report()
    assert (page.frame_attr("method"), page.frame_attr("target"), page.frame_attr("layer")) == ("flow", "7", "3")
    assert "partial" not in (page.frame.locator("#methods button[data-method='flow']").get_attribute("class") or "")
    expected = attnflow.explain(text, model, tokenizer=tokenizer, method="flow", target=7)
    assert expected.sources[7] == chosen
    np.testing.assert_allclose(page.frame_scores(), expected.row()[3], rtol=RTOL, atol=1e-9)
    page.clean()
    page.close()


def test_bad_input_is_a_message_never_a_trace(server, browser):
    page = AppPage(browser, server)
    page.choose("smollm2")
    for empty in ("", "   \n "):
        page.page.fill("#prompt", empty)
        page.run()
        page.page.wait_for_function("() => document.getElementById('message').textContent.length > 0")
        assert page.message() == "the prompt is empty; type some text first"
        assert page.page.get_attribute("body", "data-state") == "idle"
        page.page.evaluate("document.getElementById('message').textContent = ''")
    page.choose("agreement")
    page.page.fill("#text", "word " * 200)  # the bundled model takes 64 tokens
    page.run()
    page.wait("error")
    assert "takes at most 64" in page.message() and "Traceback" not in page.message()
    page.page.fill("#text", "x" * 10_001)
    page.run()
    page.page.wait_for_function("() => document.getElementById('message').textContent.includes('at most 10,000')")
    page.choose("__path__")
    page.page.fill("#model-path", "/no/such/model")
    page.page.click("#add-model")
    page.page.wait_for_function("() => document.getElementById('message').textContent.includes('does not exist')")
    assert page.message() == "model path '/no/such/model' does not exist"
    page.refused(4)  # two empty prompts, the long text, the missing folder
    page.clean()
    page.close()


def test_a_typed_model_folder_is_listed_and_explains(server, browser, minilm_path):
    text = "The keys to the cabinet"
    expected = attnflow.explain_maps(text, minilm_path, methods=("raw", "rollout"))
    page = AppPage(browser, server)
    page.choose("__path__")
    page.page.fill("#model-path", minilm_path)
    page.page.click("#add-model")
    page.page.wait_for_function("() => document.getElementById('model').value !== '__path__'")
    assert page.page.input_value("#model") == os.path.realpath(minilm_path)
    assert page.page.is_disabled("#methods input[data-method='grad-rollout']")  # not a classifier
    page.page.fill("#text", text)
    page.page.uncheck("#methods input[data-method='flow']")
    page.run()
    page.wait()
    page.wait_report()
    np.testing.assert_allclose(page.frame_scores(), expected.row("rollout")[-1], rtol=RTOL, atol=1e-9)
    listed = [m["key"] for m in page.fetch_json("api/models")["models"]]
    assert os.path.realpath(minilm_path) in listed  # for every page: one server, one list
    page.clean()
    page.close()


def test_script_prompts_and_tokens_stay_text(server, browser):
    prompt = '<script>window.pwned=1</script><img src=x onerror="window.pwned=2"> &amp;'
    page = AppPage(browser, server)
    page.choose("smollm2")
    page.page.fill("#prompt", prompt)
    page.page.fill("#new-tokens", "3")
    page.run()
    page.wait()
    page.wait_report()
    assert page.page.text_content("#live-prompt") == prompt
    assert page.page.evaluate("window.pwned") is None
    assert page.page.eval_on_selector_all("#live img, #live script", "els => els.length") == 0
    assert page.frame.locator("#title").text_content() == prompt
    assert page.page.frame_locator("#report").locator("body").evaluate("() => window.pwned") is None
    page.choose("minilm")
    page.page.fill("#text", "<script> the keys </script>")
    page.run()
    page.wait()
    page.wait_report()
    shown = page.frame.locator(".tok[data-kind='input']").evaluate_all("els => els.map(e => e.textContent)")
    assert shown[1:4] == ["<", "script", ">"]  # the tokenizer splits the tag; every piece is text
    assert page.page.evaluate("window.pwned") is None
    page.clean()
    page.close()


def test_image_upload_shows_the_overlay(server, browser, tmp_path):
    from PIL import Image
    from sklearn.datasets import load_digits

    digit = load_digits().images[0]  # a 0, as in the bundled ViT's data
    path = tmp_path / "digit.png"
    Image.fromarray(np.uint8(digit / 16 * 255)).resize((64, 64), Image.Resampling.NEAREST).save(path)
    expected = attnflow.explain_image(str(path), method=["raw", "rollout", "flow", "grad-rollout"])
    page = AppPage(browser, server)
    page.choose("digits_vit")
    page.page.set_input_files("#image", str(path))
    page.run()
    page.wait()
    page.wait_report()
    assert page.frame.locator("#meta").text_content().count("prediction: " + expected.prediction) == 1
    for method in ("rollout", "flow", "grad-rollout"):
        page.frame.locator(f"#methods button[data-method='{method}']").click()
        np.testing.assert_allclose(page.frame_scores("patch"), expected.row(method)[-1], rtol=RTOL, atol=1e-9)
    not_an_image = tmp_path / "notes.png"
    not_an_image.write_text("not a picture")
    page.page.set_input_files("#image", str(not_an_image))
    page.run()
    page.page.wait_for_function("() => document.getElementById('message').textContent.includes('not an image')")
    page.refused(1)
    page.clean()
    page.close()


def test_generation_waits_for_readers_and_keeps_new_ones_out():
    # The decoder's lock: explanations share it, a generation holds it alone (its hook would see
    # every other forward pass), and a waiting request can give up.
    import threading

    from attnflow.app.jobs import Cancelled
    from attnflow.app.locks import ModelLock

    lock, events = ModelLock(), []
    reader_in, release_reader, writer_waiting = threading.Event(), threading.Event(), threading.Event()

    def reader(name, hold=None):
        with lock.shared():
            events.append(f"{name} in")
            reader_in.set()
            if hold:
                hold.wait(10)
        events.append(f"{name} out")

    def writer():
        with lock.exclusive(waiting=writer_waiting.set):
            events.append("writer in")
        events.append("writer out")

    first = threading.Thread(target=reader, args=("r1", release_reader))
    first.start()
    reader_in.wait(10)
    w = threading.Thread(target=writer)
    w.start()
    writer_waiting.wait(10)
    late = threading.Thread(target=reader, args=("r2",))
    late.start()  # arrives while the writer waits: it must go after the writer
    gave_up = []

    def cancelled():
        raise Cancelled()

    try:
        with lock.shared(check=cancelled):
            pass
    except Cancelled:
        gave_up.append(True)
    release_reader.set()
    for t in (first, w, late):
        t.join(10)
    assert gave_up == [True]
    assert events.index("writer in") > events.index("r1 out")
    assert events.index("r2 in") > events.index("writer out")


def test_finished_jobs_are_kept_within_a_count_and_a_size():
    import time

    from attnflow.app.jobs import Job, JobStore
    from attnflow.results import Attribution, Block

    def result(job):
        values = np.zeros((1, 1, 500))  # 4,000 bytes of scores
        return Attribution(kind="text", sources=["a"] * 500, targets=["a"], target_positions=[0],
                           blocks={"raw": Block.full(values)}, n_layers=1)

    store = JobStore(workers=1, keep=3, keep_bytes=10_000)
    jobs = []
    for _ in range(5):
        jobs.append(store.submit(Job("text", "m"), result))
        deadline = time.monotonic() + 10
        while jobs[-1].state != "done" and time.monotonic() < deadline:
            time.sleep(0.01)
    # at the fifth job: four finished (16,000 bytes) -> the two oldest go (two kept, 8,000 bytes)
    assert [store.get(j.id) is not None for j in jobs] == [False, False, True, True, True]
    store.shutdown()


def _job(server, body: dict) -> dict:
    """Start a job over HTTP and poll it to its end, as a script would."""
    import time

    status, _, answer = _request(server, "api/jobs", json.dumps(body).encode(), {"Content-Type": "application/json"})
    assert status == 201, answer
    job = json.loads(answer)["id"]
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        _, _, state = _request(server, f"api/jobs/{job}")
        state = json.loads(state)
        if state["state"] in ("done", "error", "cancelled"):
            return state
        time.sleep(0.1)
    raise AssertionError(f"job {job} did not end")


def test_seeded_sampling_is_reproducible(server, smollm2):
    model, tokenizer = smollm2
    settings = dict(temperature=0.8, top_k=20, top_p=0.9)
    torch.manual_seed(7)
    expected = attnflow.generate(model, tokenizer, COLOSSEUM, 6, do_sample=True, **settings)
    body = {"model": "smollm2", "prompt": COLOSSEUM, "max_new_tokens": 6, "sample": True, "seed": 7, **settings}
    first, second = _job(server, body), _job(server, body)
    assert first["state"] == "done" and first["tokens"] == second["tokens"] == expected.targets


def test_a_job_without_a_first_look_says_so_in_one_line(server):
    done = _job(server, {"model": "agreement", "text": "the keys to the cabinet", "methods": ["rollout"]})
    assert done["state"] == "done"
    for path in ("report.html?preview=1", "result.json?preview=1&download=1"):
        status, _, body = _request(server, f"api/jobs/{done['id']}/{path}")
        assert status == 400 and json.loads(body) == {"error": "the job is done; it has no first look"}
    status, _, body = _request(server, f"api/jobs/{done['id']}/report.html")
    assert status == 200 and b"attnflow-data" in body


def test_requests_are_checked_with_a_sentence_each():
    from attnflow.app import options
    from attnflow.errors import AttnflowError

    for body, classifier, message in (
            ({"text": "hi", "methods": []}, True, "choose at least one method"),
            ({"text": "hi", "methods": ["grad-rollout"]}, False, "this model is not a classifier"),
            ({"text": "hi", "methods": ["rollout"], "residual": 1.5}, True, "residual must lie between 0 and 1"),
            ({"text": "hi", "methods": ["rollout"], "weighting": "norms"}, True, "weighting must be one of attention")):
        with pytest.raises(AttnflowError, match=message):
            options.text_request(body, classifier)
    assert options.text_request({"text": "hi", "methods": ["rollout"], "weighting": "norm"}, True).extra == {
        "weighting": "norm"}
    with pytest.raises(AttnflowError, match="number of new tokens must lie between 1 and 256; got 0"):
        options.generate_request({"prompt": "x", "max_new_tokens": 0})
    # greedy ignores the sampling fields (a page sends whatever its hidden inputs hold)
    assert options.generate_request({"prompt": "x", "temperature": None}).sample is False
    with pytest.raises(AttnflowError, match="temperature must be a number"):
        options.generate_request({"prompt": "x", "sample": True, "temperature": None})
    assert options.top_options(["content_only", "sink"]) == {"content_only": True, "skip": [0]}
    with pytest.raises(AttnflowError, match="filter must be one of"):
        options.top_options(["nonsense"])


def test_a_first_look_waits_a_second_gives_way_to_the_result_and_outlives_a_cancel(monkeypatch):
    import threading
    import time

    from factory import text_result

    from attnflow.app import jobs
    from attnflow.app.jobs import Job, JobStore
    from attnflow.errors import AttnflowError

    monkeypatch.setattr(jobs, "PREVIEW_AFTER", 0.3)
    first, whole = text_result(["a", "b", "c"]), text_result(["a", "b", "c"])
    release = threading.Event()

    def work(job):
        job.show(first)
        while not release.wait(0.01):
            job.check()
        return whole

    def until(condition):
        deadline = time.monotonic() + 10
        while not condition() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert condition()

    store = JobStore(workers=2)
    job = store.submit(Job("text", "m"), work)
    until(lambda: job.preview is first)
    assert not job.preview_due()  # a rest that follows at once would only make the report flicker
    assert job.size == sum(b.values.nbytes for b in first.blocks.values())
    until(job.preview_due)
    assert "attnflow-data" in job.report(preview=True)
    release.set()
    until(lambda: job.state == "done")
    assert job.result is whole and job.preview is None and not job.preview_due()
    with pytest.raises(AttnflowError, match="the job is done; it has no first look"):  # a page asking late
        job.report(preview=True)

    release.clear()
    stopped = store.submit(Job("text", "m"), work)
    until(lambda: stopped.preview is first)
    stopped.cancel()
    until(lambda: stopped.state == "cancelled")
    assert stopped.preview is first and stopped.result is None and not stopped.preview_due()
    store.shutdown()


def test_a_job_whose_page_went_away_cancels_itself():
    import time

    from attnflow.app.jobs import Cancelled, Job

    unwatched = Job("text", "m", abandon_after=0.05)
    time.sleep(0.1)
    unwatched.check()  # nobody ever followed it (a script polling its state): it runs on
    job = Job("text", "m", abandon_after=0.05)
    job.seen()
    job.check()
    time.sleep(0.1)  # the page's event stream stopped (tab closed)
    with pytest.raises(Cancelled):
        job.check()
    assert job.cancelled


def _request(server, path: str, body: bytes | None = None, headers: dict | None = None) -> tuple[int, dict, bytes]:
    request = urllib.request.Request(server.url + path, data=body, headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_the_server_refuses_what_a_page_elsewhere_could_send(server):
    status, headers, _ = _request(server, "")
    assert status == 200 and "default-src 'none'" in headers["content-security-policy"]
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    # a form post from another site arrives as text/plain, which starts nothing
    status, _, body = _request(server, "api/jobs", b'{"model": "agreement", "text": "hi"}',
                               {"Content-Type": "text/plain"})
    assert status == 400 and json.loads(body) == {"error": "send the request as application/json"}
    # a page elsewhere that re-points its own name at 127.0.0.1 (DNS rebinding) is refused
    status, _, _ = _request(server, "api/models", headers={"Host": "attacker.example:80"})
    assert status == 421
    status, _, body = _request(server, "api/jobs/nope")
    assert status == 400 and "no such job" in json.loads(body)["error"]


def test_cli_warns_when_listening_beyond_loopback(monkeypatch, capsys):
    # The command's own logic, without opening a non-loopback socket on the test machine.
    import socket

    from cli_runner import run_cli

    import attnflow.app.server as server_module

    served = {}
    local = socket.socket()
    local.bind(("127.0.0.1", 0))
    monkeypatch.setattr(server_module, "bind", lambda host, port: local)
    monkeypatch.setattr(server_module, "serve", lambda catalog, sock, workers: served.update(catalog=catalog))
    code, out, err = run_cli(monkeypatch, capsys, "app", "--host", "0.0.0.0")
    local.close()
    assert code == 0
    assert err.startswith("attnflow: warning: listening on 0.0.0.0: anyone who can reach this machine")
    assert served["catalog"].allow_paths is False
    code, out, err = run_cli(monkeypatch, capsys, "app", "--model", "/no/such/folder")
    assert code == 2 and err == "attnflow: error: model path '/no/such/folder' does not exist\n"


def test_a_busy_port_is_one_line(monkeypatch, capsys):
    import socket

    from cli_runner import run_cli

    busy = socket.socket()
    busy.bind(("127.0.0.1", 0))
    busy.listen(1)
    try:
        code, _, err = run_cli(monkeypatch, capsys, "app", "--port", str(busy.getsockname()[1]))
    finally:
        busy.close()
    assert code == 2 and err.startswith("attnflow: error: cannot listen on 127.0.0.1 port") and err.count("\n") == 1
