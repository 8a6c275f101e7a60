# Two commands for a newcomer (see README.md):
#   make demo   set up .venv, install layersched, solve a bundled problem, print the summary
#   make test   run the test suite (sets up .venv first if needed)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PROBLEM ?= problems/gpt3-1.3b-a100.yaml

.PHONY: demo test test-all lint bench clean

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[test]'
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/layersched solve $(PROBLEM) --out schedule.json
	$(VENV)/bin/layersched show schedule.json --plot schedule.svg

test: $(VENV)/.installed
	$(PY) -m pytest -q

test-all: $(VENV)/.installed
	$(PY) -m pytest -q -m ""

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check layersched solvers tests examples benchmarks

clean:
	rm -rf $(VENV) build dist *.egg-info schedule.json schedule.svg
