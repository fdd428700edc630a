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
    import linecache

    monkeypatch.chdir(tmp_path)
    # the block's source, readable back by name (nnsight reads a trace's `with` body from it)
    monkeypatch.setitem(linecache.cache, name, (len(code), None, code.splitlines(True), name))
    exec(compile(code, name, "exec"), {"__name__": "__doc_example__"})


def test_the_readme_has_a_python_example():
    assert any(name.startswith("README.md") for name, _ in blocks())


def test_the_docs_site_builds_offline_with_the_api_reference(tmp_path):
    """`make docs`: mkdocs-material over docs/ with the API reference from the docstrings, strict (a
    broken link or a missing page fails the build)."""
    import os
    import subprocess
    import sys

    site = tmp_path / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("attnflow.api.text.explain", "attnflow.results.attribution.Attribution", "attnflow.core.flow.flow"):
        assert f'id="{name}"' in api, name
    guides = {p.stem for p in (ROOT / "docs").glob("*.md")} - {"index", "api"}
    assert all((site / g / "index.html").is_file() for g in guides), guides
