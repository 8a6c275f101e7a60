# Two commands for a newcomer (see README.md):
#   make demo   set up .venv, install layersched, solve a bundled problem with `best`, print the summary
#   make test   run the test suite (sets up .venv first if needed)
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
PROBLEM ?= problems/gpt3-1.3b-a100.yaml

.PHONY: demo test test-all lint bench clean

# pip's and setuptools' notices go to $(VENV)/install.log, which is printed only if the install fails
$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	@echo "installing layersched and its dependencies into $(VENV) (log: $(VENV)/install.log)"
	@{ $(PY) -m pip install --upgrade pip && $(PY) -m pip install -e '.[test]'; } > $(VENV)/install.log 2>&1 \
		|| { cat $(VENV)/install.log; echo "install failed; the log above is $(VENV)/install.log"; exit 1; }
	touch $@

demo: $(VENV)/.installed
	$(VENV)/bin/layersched solve $(PROBLEM) --solver best --time-limit 30 --out schedule.json
	$(VENV)/bin/layersched show schedule.json --plot schedule.svg

# two workers (pytest-xdist), each test file on one of them so that its cached runs are made once:
# 453 s against 651 s in one process on the 2-core VM
test: $(VENV)/.installed
	$(PY) -m pytest -q -n 2 --dist loadfile

test-all: $(VENV)/.installed
	$(PY) -m pytest -q -m ""

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check layersched solvers tests examples benchmarks

clean:
	rm -rf $(VENV) build dist *.egg-info schedule.json schedule.svg
