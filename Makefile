# ortlab — all set-up happens here, from a fresh clone:
#   make test    create .venv, install (pinned torch via constraints.txt), run the suite
#   make demo    create .venv, install, compile the model zoo, write the report
#   make corpus  create .venv, install, the corpus coverage, write reports/corpus_coverage.*
#   make bench   create .venv, install, benchmark the zoo, the default corpus set and the
#                real sizes (inference, training steps, generate(), a new process's first
#                call; with OpenVINO's backend as a peer, installed as the 'peers' extra),
#                write benchmarks/results.*, benchmarks/corpus.*, benchmarks/realsize.*,
#                training.*, generation.* and first_call.*
#   make bench-corpus  the whole corpus benchmark (long: inductor compiles every model)
#   make conformance   create .venv, install, verify every registered ONNX translation
#                against PyTorch's OpInfo samples in ONNX Runtime, write the package's
#                conformance table and docs/conformance.md (long; not part of make test)
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
EXTRAS := cpu,zoo,notebook,test,dev
APT_GET := $(shell command -v apt-get 2>/dev/null)
SUDO   := $(shell [ "$$(id -u)" = 0 ] || command -v sudo 2>/dev/null)

.PHONY: install test lint demo corpus bench bench-corpus peers conformance graphviz browser clean

install: $(STAMP)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -c constraints.txt -e '.[$(EXTRAS)]'
	@touch $@

# Graphviz's `dot` renders the graph views; installed with apt-get when missing.
graphviz:
	@command -v dot >/dev/null 2>&1 || { \
	  if [ -n "$(APT_GET)" ]; then \
	    echo "Installing Graphviz (dot) with apt-get..."; \
	    $(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq graphviz >/dev/null; \
	  else \
	    echo "Graphviz's 'dot' is missing and apt-get is not available."; \
	    echo "Install Graphviz (https://graphviz.org/download/) and run make again."; exit 1; \
	  fi; }

# Debian's Chromium for the browser tests (Playwright drives it; no browser download).
browser:
	@command -v chromium >/dev/null 2>&1 || { \
	  if [ -n "$(APT_GET)" ]; then \
	    echo "Installing Chromium with apt-get..."; \
	    $(SUDO) apt-get update -qq && \
	    $(SUDO) apt-get install -y -qq chromium chromium-driver >/dev/null || \
	    echo "Chromium could not be installed: the browser tests will be skipped."; \
	  else \
	    echo "apt-get is not available: the browser tests will be skipped."; \
	  fi; }

lint: install
	$(BIN)/ruff check ortlab tests benchmarks
	$(BIN)/ruff format --check ortlab tests benchmarks
	$(BIN)/mypy ortlab

test: install graphviz browser lint
	@$(BIN)/python -m pytest -q; rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests (exit code 5): the test selection is broken" >&2; exit 1; fi; \
	exit $$rc

demo: install graphviz
	$(BIN)/ortlab demo --report reports/zoo_report.html --notebook notebooks/00_quickstart.ipynb

corpus: install
	$(BIN)/ortlab demo --corpus --out reports

# The real-size table's peer; where it does not install, its rows say so.
peers: install
	-$(BIN)/python -m pip install -q -c constraints.txt -e '.[peers]'

bench: install peers
	$(BIN)/ortlab bench --out benchmarks
	$(BIN)/ortlab bench --corpus --out benchmarks
	$(BIN)/ortlab bench --real-size --out benchmarks

bench-corpus: install
	$(BIN)/ortlab bench --corpus all --out benchmarks

conformance: install
	$(BIN)/ortlab conformance --docs docs/conformance.md

clean:
	rm -rf $(VENV) reports artifacts .pytest_cache .ruff_cache
