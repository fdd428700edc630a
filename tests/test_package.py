"""The package as an index would show it and a user would install it: the wheel carries the library and
the models its everyday commands use (not the reproduction models), a LICENSE and full metadata; the
source distribution carries the suite with everything it needs to run; `attnflow --version`."""

from __future__ import annotations

import tarfile
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest

import attnflow
from cli_runner import run_cli

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def dists(tmp_path_factory):
    from setuptools import build_meta

    out = tmp_path_factory.mktemp("dist")
    import os

    here = os.getcwd()
    os.chdir(ROOT)
    try:
        sdist = out / build_meta.build_sdist(str(out))
        wheel = out / build_meta.build_wheel(str(out))
    finally:
        os.chdir(here)
    return sdist, wheel


def test_the_wheel_holds_the_library_and_the_everyday_models_with_a_licence_and_metadata(dists):
    _, wheel = dists
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = next(n for n in names if n.endswith(".dist-info/METADATA"))
        meta = Parser().parsestr(z.read(info).decode())
    assert "attnflow/models/agreement/model.safetensors" in names
    assert "attnflow/models/digits_vit/model.safetensors" in names
    assert not any("agreement_bert" in n or "agreement_distilled" in n for n in names)
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert wheel.stat().st_size < 7_000_000  # 14.9 MB before the reproduction models moved out
    assert meta["Version"] == attnflow.__version__ and meta["License-Expression"] == "MIT"
    assert meta["Author"] and meta["Keywords"] and len(meta.get_all("Classifier")) >= 5
    assert 'extra == "reproduction"' in " ".join(meta.get_all("Requires-Dist"))
    page = meta.get_payload()
    assert "](" not in page.replace("](http", "")  # no relative link or picture an index cannot show


def test_the_sdist_carries_the_suite_with_what_it_needs(dists):
    sdist, _ = dists
    with tarfile.open(sdist) as t:
        names = {n.split("/", 1)[1] for n in t.getnames() if "/" in n}
    needed = {"tests/conftest.py", "tests/factory.py", "tests/cli_runner.py", "tests/oracles.py", "Makefile",
              "constraints.txt", "LICENSE", "packages/attnflow-reproduction-models/pyproject.toml"}
    assert needed <= names, needed - names
    assert any(n.startswith("tests/data/") for n in names)
    assert not any("__pycache__" in n for n in names)


def test_reproduction_models_are_found_in_their_package_or_named_in_one_line(monkeypatch):
    from attnflow import models
    from attnflow.errors import AttnflowError

    assert models.bundled_model_path("agreement_bert").name == "agreement_bert"  # make setup installs it
    monkeypatch.setattr(models, "_folders", lambda: [Path(models.__file__).resolve().parent])
    with pytest.raises(AttnflowError, match=r"pip install 'attnflow\[reproduction\]'"):
        models.bundled_model_path("agreement_distilled")
    with pytest.raises(AttnflowError, match="no bundled model named 'nope'; available: agreement, digits_vit"):
        models.bundled_model_path("nope")


def test_version(monkeypatch, capsys):
    code, out, err = run_cli(monkeypatch, capsys, "--version")
    assert code == 0 and out.strip() == f"attnflow {attnflow.__version__}"
