# Two entry points for newcomers: `make demo` (main job) and `make test`; `make docs` builds the site.
# Both create .venv and install torch==2.13.0 first when no torch is present (the CPU build this
# machine ships); `make demo` then installs the package alone (its synthetic run needs no extra), `make test`
# the package with the test, EEG and Flower extras.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
SHELL := /bin/bash
.SHELLFLAGS := -eo pipefail -c
# pip's notes about package folders this machine's configuration lists but lacks: not errors
QUIET := 2>&1 | { grep --line-buffered -v "is ignored: it is neither a file nor a directory" || true; }
# setuptools' banner on every editable install ("Please be careful with folders..."): not news
EDITABLE := PYTHONWARNINGS="ignore:Editable installation"

.PHONY: torch setup demo test test-slow docs bench bench-smoke

$(PY):
	$(PYTHON) -m venv $(VENV)

torch: $(PY)
	$(PY) -m pip install --quiet --upgrade pip $(QUIET)
	$(PY) -c "import torch" 2>/dev/null || $(PY) -m pip install --progress-bar on torch==2.13.0 $(QUIET)

setup: torch
	$(EDITABLE) $(PY) -m pip install --progress-bar on -e ".[test,eeg,flower]" $(QUIET)

demo: torch
	$(EDITABLE) $(PY) -m pip install --progress-bar on -e . $(QUIET)
	$(PY) examples/demo.py

test: setup
	$(PY) -m pytest skfedriem tests README.md -q

# the empirical privacy audits, the studies on real data and the real secured Flower deployments (a SuperLink and
# SuperNodes on 127.0.0.1): about ten minutes, run by CI after make test
test-slow: setup
	$(PY) -m pytest skfedriem tests -q -m "slow or deployment"

docs: setup
	$(EDITABLE) $(PY) -m pip install --quiet -e ".[docs]" $(QUIET)
	$(PY) -m sphinx -W --keep-going -b html docs docs/_build/html
	@echo "The site is in docs/_build/html/index.html"

bench: setup
	for b in benchmarks/*.py; do case "$$b" in */report.py|*/smoke.py) ;; *) $(PY) $$b || exit 1;; esac; done

bench-smoke: setup
	$(PY) benchmarks/smoke.py
