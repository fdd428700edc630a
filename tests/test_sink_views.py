"""Sink-aware views: figures scale colours without the target, special tokens and a dominant token and
say so; tables flag rows dominated by one token; `explain --content-only`."""

from __future__ import annotations

import numpy as np
from cli_runner import run_cli

from attnflow.results import Attribution, Block
from attnflow.views.generation import generation_figure
from attnflow.views.heatmap import heatmap_figure
from attnflow.views.table import layer_table, render_text

TOKENS = ["[CLS]", "sink", "a", "w3", "b"]
# (layers, sources): at the top layer 'sink' holds 0.6 of the row of target 3 ('w3')
ROW = np.array([[0.1, 0.3, 0.2, 0.3, 0.1], [0.15, 0.6, 0.1, 0.1, 0.05]])


def _text(row=ROW, methods=("rollout",)):
    return Attribution(kind="text", sources=TOKENS, targets=TOKENS, target_positions=list(range(5)),
                       blocks={m: Block.rows(row[None], [3]) for m in methods}, n_layers=2, target=3,
                       meta={"special": [0]})


def test_heatmap_scale_leaves_out_target_special_and_sink_and_says_so():
    fig = heatmap_figure(_text())
    ax = fig.axes[0]
    kept = ROW[:, [2, 4]]  # neither the target (3), nor [CLS] (special), nor 'sink'
    assert ax.images[0].norm.vmax == kept.max()
    note = " ".join(ax.get_xlabel().split())
    assert "the target 'w3'" in note and "special tokens '[CLS]'" in note and "'sink' (holds 0.60" in note
    plain = heatmap_figure(_text(), sink_aware=False).axes[0]
    assert plain.images[0].norm.vmax == ROW.max() and "leaves out" not in plain.get_xlabel()


def test_no_sink_when_no_token_holds_more_than_half():
    row = ROW.copy()
    row[1] = [0.15, 0.5, 0.15, 0.1, 0.1]  # exactly half is not more than half
    ax = heatmap_figure(_text(row)).axes[0]
    assert ax.images[0].norm.vmax == row[:, [1, 2, 4]].max() and "dominant" not in ax.get_xlabel()


def test_generation_figure_scales_without_the_sink():
    # prompt of 4 tokens; generated token 0 is predicted at position 3; its row puts 0.8 on 'My'
    rows = np.array([[[0.5, 0.2, 0.1, 0.2, 0.0], [0.8, 0.05, 0.05, 0.1, 0.0]]])
    result = Attribution(kind="generation", sources=["My", " name", " is", " Putin", " Bob"], targets=[" Bob"],
                         target_positions=[3], blocks={"rollout": Block.full(rows)}, n_layers=2, input_length=4,
                         input="My name is Putin")
    fig = generation_figure(result)
    bar_ax, map_ax = fig.axes[0], fig.axes[1]
    mean = rows[0].mean(axis=0)[:4]
    assert np.isclose(bar_ax.get_ylim()[1], 1.15 * mean[[1, 2]].max())
    assert map_ax.images[0].norm.vmax == rows[0][:, [1, 2]].max()
    assert "the dominant token 'My' (holds 0.80" in " ".join(bar_ax.get_title().split())


def test_table_flags_a_row_dominated_by_one_token():
    text = render_text(layer_table(_text()))
    lines = {line.split("│")[1].strip(): line for line in text.splitlines() if line.count("│") >= 3}
    assert "dominated by" in text and "'sink' 0.60" in lines["2"] and "'sink'" not in lines["1"].split("│")[-2]
    calm = render_text(layer_table(_text(np.full((2, 5), 0.2))))
    assert "dominated by" not in calm


def test_explain_content_only_leaves_common_words_and_specials_out(monkeypatch, capsys, tmp_path):
    png = tmp_path / "p.png"
    code, out, err = run_cli(monkeypatch, capsys, "explain", "the keys to the old cabinet", "--content-only",
                             "--png", str(png))
    assert code == 0, err
    cells = [line.split("│")[2] for line in out.splitlines() if line.count("│") >= 3]
    assert len(cells) == 6 and all("keys" in c for c in cells)
    assert not any(w in c.split() for c in cells for w in ("the", "to", "[CLS]"))
    assert png.stat().st_size > 0
    code, out, _ = run_cli(monkeypatch, capsys, "explain", "the keys to the old cabinet")
    assert any("[CLS]" in line for line in out.splitlines())  # without the flag they are ranked
