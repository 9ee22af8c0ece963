# Parallel JAX, the executable book.
#   make book       set up .venv from the lock and build the site into _build/html
#   make test       set up, then run every check (pairs, freshness, nbval, site, browser)
#   make notebooks  sync book/*.md -> notebooks/*.ipynb and execute them (CHAPTERS=01_pmap for one)
#   make serve      serve the built site on http://localhost:$(PORT)
#   make lab        open the chapters' notebooks in JupyterLab (from the lock)
# On real accelerators: BOOK_DEVICES=real make test (outputs not compared; every assert still runs).
# Every chapter runs on 8 simulated devices with outputs compared, on varied CPU code paths
# (BOOK_CPU=varied), and on 4 and 64 (OTHER_COUNTS) with outputs not compared, the three
# passes side by side; the 64-device pass as a bare install, without the TPU and GPU
# compilers (the 4- and 8-device passes compile for them). Chapter times and make test's
# phase times are reported after each run and appended to bench/chapter-times.jsonl; only a
# gross regression fails.
SHELL := /bin/bash
.DEFAULT_GOAL := book
.PHONY: book site test notebooks serve lab clean venv lock sysdeps-book sysdeps-test

VENV    := .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.installed
PORT    ?= 8000
OTHER_COUNTS ?= 4 64
# the pass that runs as a bare install: no TPU or GPU compiler (tests/bare/sitecustomize.py);
# 64, so that 4 devices run with the compilers, as on a TPU v5e-4 (README: which and why)
BARE_COUNT ?= 64
CHAPTERS ?= $(patsubst book/%.md,%,$(wildcard book/[0-9][0-9]_*.md))
# Direct requirements; `make lock` resolves them into requirements.txt, keeping the pins already there
# (so adding a package moves nothing else); `make lock UPGRADE=1` re-resolves everything.
TOP_LEVEL := "jax[cpu]==0.12.0.1" jupyter-book==1.0.4.post1 myst-nb jupytext nbval pytest \
             tabulate graphviz rich matplotlib selenium ipykernel optax orbax-checkpoint \
             termcolor ruff jupyter-server-mathjax cryptography jupyterlab
UPGRADE ?=

venv: $(STAMP)

$(STAMP): requirements.txt requirements-compilers.txt requirements-installer.txt
	@py="$${PYTHON:-$$(bash tests/find_python.sh)}" || exit 1; \
	"$$py" -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null || { \
	  echo "PYTHON=$$py is not a Python 3.12 or newer (JAX 0.12 needs one): unset PYTHON to let make find one"; exit 1; }; \
	if [ -x $(PY) ] && ! $(PY) -c 'import sys; sys.exit(sys.version_info < (3, 12))' 2>/dev/null; then \
	  echo "$(VENV) has a Python older than 3.12: recreating it"; rm -rf $(VENV); fi; \
	[ -x $(PY) ] || { echo "Creating $(VENV) with $$py"; "$$py" -m venv $(VENV); }
	@# pip installs the installer, uv (requirements-installer.txt), and uv the lock: the same
	@# pinned wheels, fetched and unpacked in parallel (measured on the 2-core machine,
	@# 2026-11-29: 43 s of CPU against pip's 86 for a fresh .venv).
	$(PY) -m pip install -q --disable-pip-version-check -r requirements-installer.txt 2> >(grep -v "is ignored: it is neither" >&2)
	@# --compile-bytecode: byte-compile every module now. With PYTHONDONTWRITEBYTECODE set,
	@# as on this project's machines, Python never writes the .pyc files itself, so without
	@# them every kernel recompiles JAX's modules from source (tried 2026-11-29 with pip's
	@# --no-compile: a fresh clone's make test used 31 minutes of CPU, up from 22).
	$(VENV)/bin/uv pip install -q --python $(PY) --compile-bytecode -r requirements.txt
	@# The TPU and GPU compilers, without the NVIDIA libraries a GPU run needs (see the file)
	$(VENV)/bin/uv pip install -q --python $(PY) --compile-bytecode --no-deps -r requirements-compilers.txt
	@touch $@
	@$(PY) tests/check_lock.py

lock:
	@py="$${PYTHON:-$$(bash tests/find_python.sh)}" || exit 1; rm -rf /tmp/book-lock-venv; \
	keep=$$([ -z "$(UPGRADE)" ] && [ -f requirements.txt ] && echo "-c requirements.txt"); \
	"$$py" -m venv /tmp/book-lock-venv && /tmp/book-lock-venv/bin/pip install -q $$keep $(TOP_LEVEL) && \
	{ echo "# The one lock for the book: every package pinned, transitive ones included."; \
	  echo "# Regenerate with: make lock (after editing TOP_LEVEL in the Makefile; UPGRADE=1 to move every pin)."; \
	  /tmp/book-lock-venv/bin/pip freeze; } > requirements.txt.new && mv requirements.txt.new requirements.txt

sysdeps-book:
	@bash tests/system_packages.sh dot:graphviz

sysdeps-test:
	@bash tests/system_packages.sh dot:graphviz chromium:chromium chromedriver:chromium-driver

site: $(STAMP) sysdeps-book
	$(VENV)/bin/jupyter-book build . -W -n --keep-going
	@echo "The site is in $(CURDIR)/_build/html/index.html (make serve shows it on http://localhost:$(PORT))"

book: site

notebooks: $(STAMP) sysdeps-book
	@for c in $(CHAPTERS); do [ -f book/$$c.md ] || { echo "No chapter '$$c': CHAPTERS takes" \
	  "$(patsubst book/%.md,%,$(wildcard book/[0-9][0-9]_*.md))"; exit 1; }; done
	$(VENV)/bin/jupytext --sync $(addprefix book/,$(addsuffix .md,$(CHAPTERS)))
	$(PY) tests/execute.py $(addprefix notebooks/,$(addsuffix .ipynb,$(CHAPTERS)))

test: $(STAMP) sysdeps-test
	@mkdir -p _build && date +%s > _build/test-started && rm -f _build/phases.txt
	@# what is proven is the lock: a .venv that drifted from it fails here, saying how to fix it
	$(PY) tests/check_lock.py --strict
	@# The linter (configuration in ruff.toml): code lines of at most 88 characters, and more;
	@# the formatter's layout for the infrastructure's Python (chapter code is laid out by hand).
	$(VENV)/bin/ruff check notebooks tests conftest.py bench _ext
	$(VENV)/bin/ruff format --check tests conftest.py bench _ext
	@# Then three jobs side by side (tests/checks_side_by_side.sh): the static tests; the
	@# site, built with warnings as errors, and the browser check of it; and the three nbval
	@# passes (tests/nbval_passes.sh): strict at 8 devices on varied CPU code paths
	@# (BOOK_CPU=varied, see conftest.py), so a printed digit that differs between Intel and
	@# AMD, or between thread counts, fails (tests/test_passes.py shows a default-path pass
	@# would not catch one, and that this pass does); and every chapter, asserts and all, on
	@# 4 and 64 devices (OTHER_COUNTS), outputs not compared; the pass at BARE_COUNT with the
	@# TPU and GPU compilers hidden, as on a reader's laptop or Colab runtime (the 4 and 8
	@# passes compile for them). Chapter times are recorded from the strict pass: its wall
	@# seconds are stretched by the jobs beside it, its kernels' CPU seconds are not.
	env BARE_COUNT=$(BARE_COUNT) tests/checks_side_by_side.sh $(PY) $(OTHER_COUNTS)
	@# last, when every kernel has ended: nothing of the run is left in /tmp
	tests/phase.sh "leftovers" $(PY) -m pytest -q tests/test_leftovers.py
	@$(PY) tests/phases.py

lab: $(STAMP)
	$(VENV)/bin/jupyter lab notebooks/

serve: site
	$(PY) -m http.server $(PORT) --bind 127.0.0.1 --directory _build/html

clean:
	rm -rf _build
