# Set-up and everyday commands. Every install step lives here, so a fresh clone needs only
# Python 3.10+ and make.
#
#   make quickstart   install into .venv and run the quickstart search (CPU, local Ray, SQLite)
#   make test         install into .venv (with test tools) and run the whole test suite

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# CPU build of PyTorch unless the caller says otherwise (GPU machines: see README).
CONSTRAINTS ?= constraints/cpu.txt
PYTEST_ARGS ?=

.PHONY: quickstart test install clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Re-install only when the package metadata or the pins change.
$(VENV)/.installed: pyproject.toml $(CONSTRAINTS) | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -c $(CONSTRAINTS) -e '.[dev]'
	touch $@

install: $(VENV)/.installed

quickstart: install
	$(BIN)/hpsearch start search_spaces/examples/quickstart.yaml

test: install
	$(BIN)/python -m pytest $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) build dist *.egg-info hpsearch_runs hpsearch.db* *-frontier.html
