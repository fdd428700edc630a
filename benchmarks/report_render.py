"""How long the HTML report takes to be on screen in headless Chromium, against a small report.

    PYTHONPATH=src python benchmarks/report_render.py [--sizes 64 256 512] [--layers 6] [--repeats 3]

Each report holds raw and rollout for every target of a random ``layers x n x n`` attention (what
``explain_maps`` gives a full-length BERT input). The page records ``performance.now()`` when it has
drawn (``body[data-ready-ms]``: navigation start to first render); the figure is the median of
``--repeats`` fresh page loads. Baseline: the same measurement on the ``--sizes``' first (smallest)
report in the same run, so the ratio says what the size costs, whatever the machine's speed.
Replaces a timed assertion the browser tests used to make (the suite asserts behaviour only).
Run it alone: ``flock -x /work/locks/heavy.lock python benchmarks/report_render.py``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile

import torch

import attnflow

CHROMIUM = os.environ.get("ATTNFLOW_CHROMIUM", "/usr/bin/chromium")


def ready_ms(browser, path: str) -> float:
    page = browser.new_page()
    try:
        page.goto(f"file://{path}")
        page.wait_for_selector("body[data-ready='1']", state="attached", timeout=120_000)
        return float(page.get_attribute("body", "data-ready-ms"))
    finally:
        page.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[64, 256, 512])
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rows = []
    with tempfile.TemporaryDirectory() as folder, sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        for n in args.sizes:
            torch.manual_seed(0)
            attentions = torch.rand(args.layers, 1, n, n).softmax(-1)
            result = attnflow.explain_attentions(attentions, [f"t{i}" for i in range(n)], methods=("raw", "rollout"))
            path = os.path.join(folder, f"report-{n}.html")
            result.to_html(path)
            times = [ready_ms(browser, path) for _ in range(args.repeats)]
            rows.append((n, os.path.getsize(path) / 2**20, statistics.median(times)))
        browser.close()
    base = rows[0][2]
    print(f"{'tokens':>6} {'report MiB':>10} {'ready ms (median)':>18} {'vs ' + str(rows[0][0]) + ' tokens':>14}")
    for n, mib, ms in rows:
        print(f"{n:>6} {mib:>10.2f} {ms:>18.0f} {ms / base:>13.1f}x")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
