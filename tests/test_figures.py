"""Figures: every kind writes PNG/SVG/PDF, stays legible at 5 and 500 tokens, refuses bad paths and
never leaves a half-written file."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from factory import text_result

import attnflow
from attnflow import AttnflowError
from attnflow.core.paths import attention_graph
from attnflow.views.curves import correlation_figure, save_correlation_plot
from attnflow.views.graph import graph_figure, save_graph
from attnflow.views.heatmap import heatmap_figure, save_heatmaps
from attnflow.views.token_map import save_token_map, token_map_figure

MAGIC = {"png": b"\x89PNG\r\n\x1a\n", "pdf": b"%PDF"}


def _explanations(n: int, layers: int = 6, target: int = 0):
    tokens = ["[CLS]"] + [("antidisestablishmentarianism" if i % 9 == 0 else f"w{i}") for i in range(1, n)]
    return text_result(tokens, layers, target, seed=n)


def _maps(n: int):
    torch.manual_seed(n)
    attentions = torch.rand(3, 2, n, n).softmax(-1)
    return attnflow.explain_attentions(attentions, [f"t{i}" for i in range(n)], methods=("raw", "rollout"))


def _writers(n: int):
    expl = _explanations(n)
    a = attention_graph(torch.rand(3, 2, min(n, 12), min(n, 12)).softmax(-1))
    return {
        "heatmap": lambda p: save_heatmaps(expl, p, title="panels"),
        "token_map": lambda p: save_token_map(_maps(n), p, method="rollout", layer=-1),
        "correlation": lambda p: save_correlation_plot({"rollout": ([0.1, 0.3, 0.5], [0.05, 0.05, 0.1])}, p,
                                                       reference={"rollout (paper)": 0.6}),
        "graph": lambda p: save_graph(a, [f"t{i}" for i in range(a.shape[-1])], p, node=(-1, 0)),
    }


def _assert_format(path, fmt: str) -> None:
    data = path.read_bytes()
    if fmt == "svg":
        assert b"<svg" in data[:2000]
    else:
        assert data.startswith(MAGIC[fmt])


@pytest.mark.parametrize("kind", ["heatmap", "token_map", "correlation", "graph"])
@pytest.mark.parametrize("fmt", ["png", "svg", "pdf"])
def test_every_figure_writes_every_format(tmp_path, kind, fmt):
    path = tmp_path / f"{kind}.{fmt}"
    assert _writers(5)[kind](str(path)) == str(path)
    _assert_format(path, fmt)
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # no temporary left behind


@pytest.mark.parametrize("kind", ["heatmap", "token_map", "correlation", "graph"])
def test_bad_extension_is_refused_before_drawing(tmp_path, kind):
    with pytest.raises(AttnflowError, match="must end in one of"):
        _writers(5)[kind](str(tmp_path / "figure.gif"))
    assert list(tmp_path.iterdir()) == []


def test_a_failed_save_leaves_the_old_file_untouched(tmp_path, monkeypatch):
    # Fault injection: the writer puts half a file down and then fails (a full disk, Ctrl-C). The
    # previous figure must survive and no temporary file remain.
    import matplotlib.figure

    def broken_savefig(self, fname, **kwargs):
        with open(fname, "wb") as handle:
            handle.write(b"\x89PNG half")
        raise OSError("disk full")

    monkeypatch.setattr(matplotlib.figure.Figure, "savefig", broken_savefig)
    path = tmp_path / "fig.png"
    path.write_bytes(b"previous figure")
    with pytest.raises(OSError, match="disk full"):
        save_heatmaps(_explanations(5), str(path), title="a title")
    assert path.read_bytes() == b"previous figure"
    assert [p.name for p in tmp_path.iterdir()] == ["fig.png"]


def _label_boxes(fig, axis: str = "x"):
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    boxes = []
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>":
            continue
        labels = ax.get_xticklabels() if axis == "x" else ax.get_yticklabels()
        boxes.append([(lab.get_text(), lab.get_window_extent(renderer)) for lab in labels if lab.get_text()])
    return boxes


@pytest.mark.parametrize("n", [5, 500])
def test_heatmap_token_labels_never_overlap_and_include_the_target(n):
    import matplotlib.pyplot as plt

    target = 0 if n == 5 else 251
    fig = heatmap_figure(_explanations(n, target=target))
    try:
        for panel in _label_boxes(fig):
            texts = [t for t, _ in panel]
            assert any(t.startswith(_explanations(n).sources[target][:5]) for t in texts)
            if n == 5:
                assert len(texts) == 5  # short inputs: every token labelled
            else:
                assert 20 <= len(texts) < n  # long inputs: thinned, but still a usable ruler
            spans = sorted((b.x0, b.x1) for _, b in panel)
            assert all(a1 <= b0 + 0.5 for (_, a1), (b0, _) in zip(spans, spans[1:])), "tick labels overlap"
            assert all(len(t) <= 12 for t in texts)  # long tokens are shortened, not spilled
    finally:
        plt.close(fig)


@pytest.mark.parametrize("n", [5, 500])
def test_token_map_for_5_and_500_tokens(tmp_path, n):
    import matplotlib.pyplot as plt

    maps = _maps(n)
    fig = token_map_figure(maps.scores["rollout"][:, -1], maps.sources)
    try:
        for axis in ("x", "y"):
            panel = _label_boxes(fig, axis)[0]
            assert (len(panel) == n) if n == 5 else (10 <= len(panel) < n)
            key = (lambda b: (b.x0, b.x1)) if axis == "x" else (lambda b: (b.y0, b.y1))
            spans = sorted(key(b) for _, b in panel)
            assert all(a1 <= b0 + 0.5 for (_, a1), (b0, _) in zip(spans, spans[1:]))
    finally:
        plt.close(fig)
    path = tmp_path / f"map{n}.png"
    save_token_map(maps, str(path))
    _assert_format(path, "png")


def test_heatmap_for_500_tokens_is_written(tmp_path):
    path = tmp_path / "long.pdf"
    save_heatmaps(_explanations(500, target=499), str(path))
    _assert_format(path, "pdf")


def test_correlation_plot_draws_bands_and_dashed_references():
    import matplotlib.pyplot as plt

    results = {"raw": ([0.1, 0.0, -0.1], [0.02, 0.02, 0.02]), "flow": ([0.3, 0.5, 0.6], [0.1, 0.1, 0.1])}
    fig = correlation_figure(results, reference={"flow (paper)": 0.7, "rollout (paper)": [0.2, 0.4, 0.5]})
    try:
        lines = {line.get_label(): line for line in fig.axes[0].get_lines()}
        assert lines["flow"].get_linestyle() == "-" and list(lines["flow"].get_ydata()) == [0.3, 0.5, 0.6]
        assert list(lines["flow"].get_xdata()) == [1, 2, 3]  # layers counted from 1
        assert lines["flow (paper)"].get_linestyle() == "--"
        assert lines["rollout (paper)"].get_linestyle() == "--"
        assert lines["flow (paper)"].get_color() == lines["flow"].get_color()
        assert len(fig.axes[0].collections) == 2  # one std band per method
    finally:
        plt.close(fig)


@pytest.mark.parametrize("results, message", [
    ({}, "at least one"),
    ({"flow": [0.1, 0.2, 0.3]}, "pair"),
    ({"flow": ([0.1, 0.2], [0.1])}, "one of each per layer"),
    ({"flow": ([], [])}, "non-empty"),
])
def test_correlation_plot_refuses_malformed_results(tmp_path, results, message):
    with pytest.raises(AttnflowError, match=message):
        save_correlation_plot(results, str(tmp_path / "c.png"))
    assert list(tmp_path.iterdir()) == []


def test_graph_draws_only_the_strongest_edges():
    import matplotlib.pyplot as plt

    torch.manual_seed(0)
    a = attention_graph(torch.rand(4, 3, 8, 8).softmax(-1))
    fig = graph_figure(a, [f"t{i}" for i in range(8)], edges_per_node=2, min_weight=0.0)
    try:
        background = fig.axes[0].collections[0]
        assert len(background.get_segments()) == 4 * 8 * 2  # per node its 2 strongest edges
        widths = background.get_linewidths()
        strongest = np.sort(a, axis=-1)[..., -2:]
        np.testing.assert_allclose(sorted(widths), sorted(0.3 + 3.0 * strongest.ravel()), rtol=1e-6)
    finally:
        plt.close(fig)
    with pytest.raises(AttnflowError, match="shape"):
        graph_figure(a, ["only", "two"])
    with pytest.raises(AttnflowError, match="node"):
        graph_figure(a, [f"t{i}" for i in range(8)], node=(9, 0))


def test_tokens_are_data_not_markup(tmp_path):
    """A token such as "[/INST]" is not rich markup and "$x$" is not mathtext: both print/draw as text."""
    tokens = ["[CLS]", "[/INST]", "$\\foo$", "costs $5"]
    expl = text_result(tokens, target=1, methods=("rollout",))
    text = str(expl)
    assert "[/INST]" in text and "$\\foo$" in text
    expl.plot(str(tmp_path / "t.png"), title="it costs $5 and $6")
    assert (tmp_path / "t.png").stat().st_size > 0
