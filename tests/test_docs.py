"""The README's and the guides' Python examples run as written (each block in a fresh namespace,
in a temporary folder so the files they write land there); the docs site builds, and its API
reference is one people can read: a parameter table per entry point with the defaults a call really
gets (no ``UNSET`` sentinel), no raw Sphinx roles, and every ``Examples:`` section runs."""

from __future__ import annotations

import ast
import doctest
import importlib
import inspect
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "docs" / "api.md"
# Sphinx roles: raw text on a Markdown site (mkdocstrings parses Google-style docstrings)
ROLE = re.compile(r":(?:func|class|mod|meth|data|attr|exc|obj):`")
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


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    """`make docs`: mkdocs-material over docs/ with the API reference from the docstrings, strict (a
    broken link, a missing page or an unresolved cross-reference fails the build); built once."""
    import os
    import subprocess
    import sys

    site = tmp_path_factory.mktemp("docs") / "site"
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "-q", "-d", str(site)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return site


def test_the_docs_site_builds_offline_with_the_api_reference(site):
    api = (site / "api" / "index.html").read_text(encoding="utf-8")
    for name in ("attnflow.api.text.explain", "attnflow.results.attribution.Attribution", "attnflow.core.flow.flow"):
        assert f'id="{name}"' in api, name
    guides = {p.stem for p in (ROOT / "docs").glob("*.md")} - {"index", "api"}
    assert all((site / g / "index.html").is_file() for g in guides), guides


# ------------------------------------------------------------------------------------ the API reference


def reference() -> list[str]:
    """The objects docs/api.md renders (its ``::: path`` lines), in page order."""
    return re.findall(r"^::: ([\w.]+)", API.read_text(encoding="utf-8"), flags=re.M)


def imported(path: str):
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)


class _Tables(HTMLParser):
    """mkdocstrings' section tables by the object whose heading precedes them:
    ``{heading id: {section title: [[cell text, ...] per row]}}``."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: dict[str, dict[str, list[list[str]]]] = {}
        self._heading = self._title = ""
        self._text: list[str] | None = None
        self._rows: list[list[str]] | None = None

    def handle_starttag(self, tag: str, attrs: list) -> None:
        attrs = dict(attrs)
        if tag in ("h2", "h3", "h4", "h5") and "doc-heading" in (attrs.get("class") or ""):
            self._heading = attrs.get("id", "")
        elif tag == "span" and "doc-section-title" in (attrs.get("class") or ""):
            self._text = []
        elif tag == "table":
            self._rows = self.tables.setdefault(self._heading, {}).setdefault(self._title, [])
        elif tag == "tr" and self._rows is not None and attrs.get("class") == "doc-section-item":
            self._rows.append([])
        elif tag == "td" and self._rows:
            self._text = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "span" and self._text is not None and self._rows is None:
            self._title, self._text = " ".join("".join(self._text).split()).rstrip(":"), None
        elif tag == "td" and self._text is not None and self._rows:
            self._rows[-1].append(" ".join("".join(self._text).split()))
            self._text = None
        elif tag == "table":
            self._rows = None

    def handle_data(self, data: str) -> None:
        if self._text is not None:
            self._text.append(data)


@pytest.fixture(scope="module")
def reference_page(site) -> tuple[str, dict]:
    html = (site / "api" / "index.html").read_text(encoding="utf-8")
    tables = _Tables()
    tables.feed(html)
    return html, tables.tables


def _shown(parameter: inspect.Parameter) -> str:
    return {inspect.Parameter.VAR_POSITIONAL: "*", inspect.Parameter.VAR_KEYWORD: "**"}.get(parameter.kind, "") \
        + parameter.name


def _literal(text: str):
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return inspect.Parameter.empty


CALLABLES = [p for p in reference() if not p.startswith("attnflow.errors.")]


@pytest.mark.parametrize("path", CALLABLES)
def test_each_reference_entry_draws_a_parameter_table_with_the_defaults_a_call_gets(reference_page, path):
    """One row per parameter, in signature order; the default column holds the default of
    ``inspect.signature`` (which the entry points make honest: Settings.keywords), never the source's
    ``UNSET`` or a constant's name (PAPER_ONLY, registry.ALL)."""
    _, tables = reference_page
    signature = inspect.signature(imported(path))
    expected = [p for p in signature.parameters.values() if p.name != "self"]
    rows = tables.get(path, {}).get("Parameters")
    assert rows, f"{path}: no Parameters table on the reference page"
    assert [row[0] for row in rows] == [_shown(p) for p in expected], path
    for parameter, (name, _type, _description, default) in zip(expected, rows):
        if parameter.kind in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD):
            continue
        if parameter.default is inspect.Parameter.empty:
            assert default == "required", (path, name, default)
        elif _literal(repr(parameter.default)) is not inspect.Parameter.empty:  # not a factory's "<factory>"
            assert _literal(default) == parameter.default, (path, name, default, parameter.default)


@pytest.mark.parametrize("path, settings", [
    ("attnflow.api.text.explain_maps", {"residual": 0.5, "head_fusion": "mean"}),
    ("attnflow.api.generate.generate", {"residual": 0.5, "causal_norm": None}),
    ("attnflow.api.text.explain", {"method": None, "paper_only": False}),
])
def test_the_real_defaults_are_the_papers(reference_page, path, settings):
    """Spelled out, so that the test above cannot pass by reading a sentinel on both sides."""
    rows = {row[0]: row[3] for row in reference_page[1].get(path, {}).get("Parameters", [])}
    assert rows, f"{path}: no Parameters table on the reference page"
    assert {name: _literal(rows[name]) for name in settings} == settings


def test_explains_settings_table_gives_each_settings_default(reference_page):
    """explain takes the settings as ``**overrides``: its Other Parameters table lists every one, and
    the default each states is the setting's (config.settings.OPTIONS)."""
    from attnflow.config.settings import OPTIONS

    tables = reference_page[1].get("attnflow.api.text.explain", {})
    rows = {row[0]: row[-1] for row in tables.get("Other Parameters", [])}
    assert sorted(rows) == sorted(OPTIONS)
    for name, option in OPTIONS.items():
        assert f"Defaults to {option.default!r}." in rows[name], (name, rows[name])


def test_the_reference_shows_no_sentinel_and_no_raw_roles(reference_page, site):
    html, _ = reference_page
    assert "UNSET" not in html and "from settings&gt;" not in html
    for page in site.rglob("*.html"):
        text = page.read_text(encoding="utf-8")
        assert not re.search(r":(?:func|class|mod|meth|data|attr|exc|obj):(?:`|<code>)", text), page


def test_no_docstring_in_the_package_uses_sphinx_roles():
    """One markup across src/ (code spans and autorefs links), so that a docstring moved onto the
    reference page later renders as it reads."""
    found = [f"{path.relative_to(ROOT)}:{i}" for path in sorted((ROOT / "src").rglob("*.py"))
             for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if ROLE.search(line)]
    assert not found, found


# Each entry point shows one short example that runs on the installed models.
WITH_EXAMPLES = {"attnflow.api.text.explain", "attnflow.api.text.explain_maps", "attnflow.api.generate.generate",
                 "attnflow.api.images.explain_image", "attnflow.api.faithfulness.faithfulness",
                 "attnflow.results.attribution.Attribution"}


@pytest.mark.parametrize("path", reference())
def test_the_reference_examples_run(path, tmp_path, monkeypatch):
    """The ``>>>`` lines of every docstring the reference renders (an object's and its members'),
    as doctests, in a temporary folder."""
    monkeypatch.chdir(tmp_path)
    tests = [t for t in doctest.DocTestFinder().find(imported(path), path) if t.examples]
    if path in WITH_EXAMPLES:
        assert tests, f"{path} has no Examples section"
    report: list[str] = []
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in tests:
        runner.run(test, out=report.append)
    assert runner.failures == 0, "".join(report)
