"""``explain --html`` and ``attnflow view`` as a user runs them; bad input -> one line, exit 2, no file."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from cli_runner import run_cli
from factory import text_result

from attnflow import Attribution


def _embedded(path) -> dict:
    html = path.read_text()
    return json.loads(re.search(r'id="attnflow-data">(.*?)</script>', html, flags=re.S).group(1))


def test_explain_html_holds_every_target_and_the_printed_numbers(monkeypatch, capsys, tmp_path, minilm_path):
    out, js = tmp_path / "r.html", tmp_path / "r.json"
    code, _, err = run_cli(monkeypatch, capsys, "explain", "The keys to the cabinet", "--model", minilm_path,
                             "--method", "flow", "--html", str(out), "--json", str(js))
    assert code in (0, None), err
    data, saved = _embedded(out), Attribution.load(js)
    assert [m["name"] for m in data["methods"]] == ["raw", "rollout", "flow"]
    assert data["method"] == "flow" == saved.method  # the page opens on the method asked for
    assert saved.methods == ["flow"] and saved.computed["flow"].targets == (saved.target,)
    n = len(data["sources"])
    assert all(m["targets"] == list(range(n)) for m in data["methods"])  # short input: flow for all
    flow = data["methods"][2]
    np.testing.assert_allclose(flow["rows"][saved.target], saved.row("flow"), rtol=1e-3)


def test_view_turns_explain_json_into_a_report_and_a_figure(monkeypatch, capsys, tmp_path):
    tokens = ["[CLS]", "a", "<script>", "[SEP]"]
    saved = text_result(tokens, layers=3, methods=("raw", "rollout"))
    result = tmp_path / "r.json"
    saved.save(result)
    code, _, err = run_cli(monkeypatch, capsys, "view", str(result), "--html", str(tmp_path / "v.html"),
                               "--png", str(tmp_path / "v.png"))
    assert code in (0, None), err
    data = _embedded(tmp_path / "v.html")
    assert data["sources"] == tokens and [m["name"] for m in data["methods"]] == ["raw", "rollout"]
    np.testing.assert_allclose(data["methods"][1]["rows"][0], saved.row("rollout"), rtol=1e-3)
    assert (tmp_path / "v.png").read_bytes()[:4] == b"\x89PNG"


def test_view_renders_a_generation_result_as_report_and_figure(monkeypatch, capsys, tmp_path):
    # the 0.1 generation schema, as `generate --json` wrote it then
    gen = {"kind": "generation", "model": "m", "prompt": "a b", "prompt_tokens": ["a", " b"],
           "generated_tokens": [" c", " d"], "method": "rollout",
           "M": [[[0.4, 0.5], [0.6, 0.5]], [[0.2, 0.3], [0.3, 0.3]]],
           "rows": [[[0.4, 0.6, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0]], [[0.2, 0.3, 0.5, 0.0], [0.3, 0.3, 0.4, 0.0]]]}
    result = tmp_path / "g.json"
    result.write_text(json.dumps(gen))
    code, _, err = run_cli(monkeypatch, capsys, "view", str(result), "--html", str(tmp_path / "g.html"),
                           "--png", str(tmp_path / "g.png"), "--target", " d")
    assert code in (0, None), err
    data = _embedded(tmp_path / "g.html")
    assert data["targets"] == [" c", " d"] and data["kind"] == "generation" and data["target"] == 1
    assert (tmp_path / "g.png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("content, args, message", [
    (None, ["--html", "o.html"], "no such result file"),
    ("{oops", ["--html", "o.html"], "not valid JSON"),
    ('{"tokens": ["a"]}', ["--html", "o.html"], "missing"),
    ('{"tokens": ["a"], "method": "raw", "target": 0, "scores": [[1, 2]]}', ["--html", "o.html"], "1 tokens"),
    ('{"tokens": ["a"], "method": "raw", "target": 0, "scores": [[1]]}', ["--html", "o.txt"], "must end in"),
    ('{"tokens": ["a"], "method": "raw", "target": 0, "scores": [[1]]}', [], "say what to write"),
    ('{"tokens": ["a"], "method": "raw", "target": 0, "scores": [[1]]}', ["--html", "no/o.html"], "does not exist"),
    ('{"kind": "maps", "tokens": ["a", "b", "c"], "target": 7, "maps": {"rollout": {"0": [[1, 0, 0]]}}}',
     ["--html", "o.html", "--png", "o.png"], "target 7"),
    ('{"kind": "generation", "prompt_tokens": ["a"], "generated_tokens": ["b"], "method": "rollout", '
     '"M": [[[0.1]]]}', ["--png", "o.png", "--target", "3"], "outside the 1 targets"),
])
def test_bad_input_is_one_line_nonzero_and_writes_nothing(monkeypatch, capsys, tmp_path, content, args, message):
    monkeypatch.chdir(tmp_path)
    if content is not None:
        (tmp_path / "r.json").write_text(content)
    before = sorted(p.name for p in tmp_path.iterdir())
    code, _, err = run_cli(monkeypatch, capsys, "view", "r.json", *args)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("attnflow: error:") and message in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
