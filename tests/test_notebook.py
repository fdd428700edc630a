"""A result in a real notebook (nbclient runs it on an ipykernel): the cell's value carries the
interactive report, a PNG and a text table; print(result) is one text stream and nothing else;
plot() returns a Figure and draws into ax=; to_html(path) returns the path (no 40 KB of text)."""

from __future__ import annotations

import base64

import nbformat
from nbclient import NotebookClient

CELLS = [
    "import attnflow\nresult = attnflow.explain('the keys to the cabinet', method=['raw', 'rollout'], target='cls')",
    "result",
    "print(result)",
    "result.plot()",
    "import matplotlib.pyplot as plt\nfig, axes = plt.subplots(1, 2)\ndrawn = result.plot(ax=axes)\n"
    "assert drawn is fig and axes[0].images and axes[1].images",
    "result.to_html('r.html')",
]


def test_a_result_in_a_notebook(tmp_path):
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in CELLS])
    NotebookClient(book, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    value, printed, figure, into, html = (c.outputs for c in book.cells[1:])
    assert [o.output_type for o in value] == ["execute_result"]
    data = value[0]["data"]
    assert {"text/html", "image/png", "text/plain"} <= set(data)
    assert data["text/html"].startswith("<iframe srcdoc=") and 'sandbox="allow-scripts"' in data["text/html"]
    assert base64.b64decode(data["image/png"])[:8] == b"\x89PNG\r\n\x1a\n"
    assert "rollout" in data["text/plain"] and "keys" in data["text/plain"]
    assert [o.output_type for o in printed] == ["stream"] and "rollout" in printed[0]["text"]  # no stray display
    assert [o.output_type for o in figure] == ["execute_result"] and "image/png" in figure[0]["data"]
    assert "Figure" in figure[0]["data"]["text/plain"]  # shown once: as the value, not again at the cell's end
    assert [o.output_type for o in into] == ["display_data"] and "image/png" in into[0]["data"]  # the user's figure
    assert html[0]["data"]["text/plain"] == "'r.html'" and (tmp_path / "r.html").stat().st_size > 10_000
