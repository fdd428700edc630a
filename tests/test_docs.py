"""The README's and the guides' Python examples run as written (each block in a fresh namespace,
in a temporary folder so the files they write land there)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# docs/reproduction.md's examples run the paper's protocol (minutes); they are exercised by its own tests.
DOCS = [ROOT / "README.md", *(p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "reproduction.md")]


def blocks() -> list[tuple[str, str]]:
    out = []
    for path in DOCS:
        for i, code in enumerate(re.findall(r"```python\n(.*?)```", path.read_text(encoding="utf-8"), flags=re.S)):
            out.append((f"{path.name}[{i}]", code))
    return out


@pytest.mark.parametrize("name, code", blocks(), ids=[name for name, _ in blocks()])
def test_example_runs(name, code, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(code, name, "exec"), {"__name__": "__doc_example__"})


def test_the_readme_has_a_python_example():
    assert any(name.startswith("README.md") for name, _ in blocks())
