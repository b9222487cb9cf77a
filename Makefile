# The two commands of pairkit (README "The two commands", docs/development.md):
#   make demo   set up .venv if needed, then run the whole pipeline on sample data
#   make test   set up .venv if needed, then ruff and the test suite (what .ci/run runs),
#               in TEST_WORKERS processes (2), idle ones taking queued tests from busy
#               ones (--dist worksteal: the suite's long tests don't leave one waiting)
# The environment is reused: it is (re)installed only when pyproject.toml or this
# Makefile changed since the last install (a hash kept in .venv/.pairkit-installed).

PYTHON ?= python3
VENV ?= .venv
DEMO_DIR ?= demo-run
# torch first, pinned: on these machines pip takes both from local files
TORCH ?= torch==2.14.1 torchvision==0.29.1
EXTRAS ?= dev
# test processes (pytest-xdist); 0 runs the suite in this process, one test at a time
TEST_WORKERS ?= 2

BIN := $(VENV)/bin
STAMP := $(VENV)/.pairkit-installed

.PHONY: demo test env clean-env

demo: env
	$(BIN)/pairkit demo $(DEMO_DIR) --force

test: env
	$(BIN)/ruff check pairkit tests
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist worksteal

env:
	@want="$$(cat pyproject.toml Makefile | sha256sum | cut -c1-16) $(TORCH) $(EXTRAS)"; \
	if [ -x "$(BIN)/python" ] && [ "$$(cat "$(STAMP)" 2>/dev/null)" = "$$want" ]; then \
	  echo "environment $(VENV) is up to date"; exit 0; fi; \
	set -e; \
	echo "setting up $(VENV): $(TORCH), then pairkit[$(EXTRAS)] (first run: a few minutes)"; \
	[ -x "$(BIN)/python" ] || $(PYTHON) -m venv "$(VENV)"; \
	rm -f "$(STAMP)"; \
	"$(BIN)/python" -m pip install -q $(TORCH); \
	"$(BIN)/python" -m pip install -q -e ".[$(EXTRAS)]"; \
	echo "$$want" > "$(STAMP)"

clean-env:
	rm -rf "$(VENV)"
