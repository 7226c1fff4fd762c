# Set-up and everyday commands. Every install step lives here, so a fresh clone needs only
# Python 3.10+ and make.
#
#   make quickstart   install the runtime into .venv and run the quickstart search (CPU, local Ray, SQLite)
#   make test         install into .venv (with test tools), lint, type-check and run the whole test suite
#   make benchmarks   measure hpsearch against the plain alternatives into docs/benchmarks.md

PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
# CPU build of PyTorch unless the caller says otherwise (GPU machines: see README).
CONSTRAINTS ?= constraints/cpu.txt
# Every package at the version CI tests (a lock: `make pins` writes it), so a release upstream
# changes nothing here until the pins move. It holds on the Python CI runs (3.11) and newer; on
# 3.10, where some pinned versions have no wheels, pip picks within pyproject's ranges instead.
PINS := $(shell $(PYTHON) -c 'import sys; print("constraints/tested.txt" if sys.version_info >= (3, 11) else "")' 2>/dev/null)
PIN_FLAGS := -c $(CONSTRAINTS) $(if $(PINS),-c $(PINS))
PYTEST_ARGS ?=

.PHONY: quickstart test install install-runtime browser lint benchmarks pins clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Two installs, each re-run only when the package metadata or the pins change: the runtime
# (what `hpsearch start` needs: the quickstart installs only this) and the runtime plus the test
# and code-check tools (`make test`). The second stamps the first too, since it includes it; after
# a `make quickstart`, `make test` adds the test tools to the same .venv.
$(VENV)/.installed-runtime: pyproject.toml $(CONSTRAINTS) $(PINS) | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(PIN_FLAGS) -e .
	touch $@

$(VENV)/.installed: pyproject.toml $(CONSTRAINTS) $(PINS) | $(BIN)/python
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet $(PIN_FLAGS) -e '.[dev]'
	touch $@ $(VENV)/.installed-runtime

install-runtime: $(VENV)/.installed-runtime

install: $(VENV)/.installed

quickstart: install-runtime
	$(BIN)/hpsearch start search_spaces/examples/quickstart.yaml

# The browser test's headless Chromium (Debian packages). A cheap check: apt-get runs only when
# /usr/bin/chromium or /usr/bin/chromedriver is missing and we are root with apt-get (apt-get
# update only if the install fails without it); otherwise nothing, and the browser test skips
# (in CI, where CI is set, it fails instead).
CHROMIUM_PACKAGES := chromium chromium-driver fonts-liberation
browser:
	@if [ ! -x /usr/bin/chromium ] || [ ! -x /usr/bin/chromedriver ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    echo "installing $(CHROMIUM_PACKAGES) with apt-get for the browser test"; \
	    export DEBIAN_FRONTEND=noninteractive; \
	    apt-get install -y -qq --no-install-recommends $(CHROMIUM_PACKAGES) >/dev/null 2>&1 \
	      || { apt-get update -qq && apt-get install -y -qq --no-install-recommends $(CHROMIUM_PACKAGES) >/dev/null; } \
	      || echo "could not install $(CHROMIUM_PACKAGES): the browser test will skip (fail in CI)"; \
	  else \
	    echo "no /usr/bin/chromium and not root with apt-get: the browser test will skip (fail in CI)"; \
	  fi; \
	fi

# Tests marked slow (whole searches killed, interrupted or starved of their store: about 6 min
# more on 2 cores) run in CI, where CI is set, and are skipped otherwise; SLOW=1 runs them here.
SLOW_TESTS := $(if $(or $(CI),$(SLOW)),,-m "not slow")

# Lint (ruff: pyproject's [tool.ruff]) and types (mypy, strict on the service, trials and
# search_spaces: [tool.mypy]); the import contract runs in the test suite (tests/test_architecture.py).
lint: install
	$(BIN)/ruff check .
	$(BIN)/python tests/linktree.py mypy

test: install browser lint
	$(BIN)/python -m pytest $(SLOW_TESTS) $(PYTEST_ARGS)

# About 22 minutes on 2 cores; run it on an otherwise idle machine.
benchmarks: install
	$(BIN)/python -m benchmarks

# Move the pins: resolve the runtime and every extra afresh (the newest versions pyproject's ranges
# allow) in a scratch environment and write what it installed to constraints/tested.txt. torch
# keeps the version constraints/cpu.txt names, without the build's local label, so the same line
# holds for the CPU and the CUDA builds. Then run `make test` and commit both if it passes.
PINS_VENV := .pins-venv
pins:
	rm -rf $(PINS_VENV)
	$(PYTHON) -m venv $(PINS_VENV)
	$(PINS_VENV)/bin/python -m pip install --quiet --upgrade pip
	$(PINS_VENV)/bin/python -m pip install --quiet -c $(CONSTRAINTS) -e '.[dev,postgres,lightning,mlflow]'
	{ sed -n '1,/^$$/p' constraints/tested.txt; \
	  $(PINS_VENV)/bin/python -m pip freeze --exclude-editable | sed 's/^\(torch==[^+]*\)+.*/\1/'; } > constraints/tested.txt.new
	mv constraints/tested.txt.new constraints/tested.txt
	rm -rf $(PINS_VENV)

clean:
	rm -rf $(VENV) $(PINS_VENV) build dist *.egg-info hpsearch_runs hpsearch.db* *-frontier.html
