# Two entry points for newcomers: `make demo` (main job) and `make test`.
# Both create .venv, install torch==2.13.0 first when no torch is present
# (the CPU build this machine ships), then the package with its extras.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: setup demo test bench

$(PY):
	$(PYTHON) -m venv $(VENV)

setup: $(PY)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e ".[test,eeg,flower]"

demo: setup
	$(PY) examples/demo.py

test: setup
	$(PY) -m pytest skfedriem tests README.md -q

bench: setup
	for b in benchmarks/*.py; do $(PY) $$b || exit 1; done
