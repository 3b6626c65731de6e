# attnserve: `make serve` (the serving install, then serve the shipped default model), `make model`
# (retrain it), `make check` (the inner loop: lint, types, fast tests) and `make test` (everything;
# what CI runs).
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
REPO   ?= models
MODEL  ?= car-order
PORT   ?= 50051
METRICS_PORT ?= 9100
SERVE_ARGS ?=   # more attnserve-serve flags, e.g. make serve SERVE_ARGS=--admin
PYTEST_ARGS ?=  # more pytest arguments, e.g. make check PYTEST_ARGS="-k batcher"
# The markers `make check` leaves out (pyproject.toml [tool.pytest.ini_options], tests/conftest.py).
FAST_TESTS := not slow and not images and not e2e and not cuda

# Imports are byte-compiled once and cached in __pycache__, even where the environment says not to:
# without the cache every pytest worker and every server a test starts compiles its thousands of
# modules again (12 of a worker's 25 s of collection).
unexport PYTHONDONTWRITEBYTECODE

.PHONY: serve setup model check test test-deps lint pytest proto compare compare-reviews bench loadtest clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch is pinned in pyproject (train extra): any other version pulls a multi-GB CUDA build.
	# -qq: setuptools prints a notice on every editable install; errors still show. --no-compile:
	# byte-compiling all 19,000 files takes a minute; imports compile (and cache) what they use.
	$(BIN)/python -m pip install -qq --no-compile -e '.[train,dev]'
	touch $@

setup: $(BIN)/.installed

# The serving set only (onnxruntime, tokenizers, grpc, starlette, ...): no PyTorch, no test tools;
# a venv that already has everything (setup) has it too.
$(BIN)/.serving: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	if [ -f $(BIN)/.installed ] && [ $(BIN)/.installed -nt pyproject.toml ]; then :; \
	else $(BIN)/python -m pip install -qq --disable-pip-version-check -e .; fi
	touch $@

# Retrain and export the default car-order model (models/car-order/PROVENANCE.md: the same command
# made the shipped version 1); the export is the repository's next version, which a running
# `make serve` picks up. Two to three minutes on 2 cores, with the training extra (PyTorch).
model: setup
	$(BIN)/attnserve-train --task car-order --model transformer --seed 0 --out runs/$(MODEL)
	$(BIN)/attnserve-export runs/$(MODEL) --repository $(REPO) --name $(MODEL)

# Serve the repository; the shipped car-order bundle (models/car-order/1) answers calls that name
# no model. The repository is watched: new exports are served. Without a bundle, `make model` first.
serve: $(BIN)/.serving
	@if [ -z "$$(ls -A $(REPO)/$(MODEL) 2>/dev/null)" ]; then $(MAKE) --no-print-directory model; fi
	@echo "== serving $(REPO) on 127.0.0.1:$(PORT) (HTTP and the explorer on :8000, metrics on :$(METRICS_PORT)/metrics), default model $(MODEL)"
	@echo "   try:  $(BIN)/attnserve-client --target 127.0.0.1:$(PORT) classify 'the white car is on the left of the black car'"
	exec $(BIN)/attnserve-serve --repository $(REPO) --port $(PORT) --metrics-port $(METRICS_PORT) \
		--default-model $(MODEL) $(SERVE_ARGS)

# System and tool dependencies of the test suite (Debian packages, the Triton client tools venv).
test-deps: setup
	bash scripts/test-deps.sh

lint: setup
	$(BIN)/ruff check .
	bash scripts/typecheck.sh

# pytest-xdist workers (tests/support/scheduling.py: each file on one worker, the long units
# first), then the serial tests alone, from their own files only; the models both build are
# built once (tests/support/once.py). $(1): a marker expression ending in "and ", or nothing;
# $(2): more flags; $(3): the number of workers. Exit 5 (nothing selected) passes, so a -k that
# matches one phase only runs; both phases run even when the first fails.
TEST_WORKERS ?= 2
# `make check` runs three: its tests wait on servers, browsers and subprocesses more than they
# compute (two workers kept 1.4 of the 2 cores busy), where `make test`'s image builds and
# trainings take whole cores.
CHECK_WORKERS ?= 3
PYTEST := $(BIN)/python -m pytest -q -p no:cacheprovider
define two_phases
status=0; export ATTNSERVE_TEST_SHARED=$$(mktemp -d); \
$(PYTEST) -n $(3) --dist loadfile --no-loadscope-reorder -m "$(1)not serial" $(2) \
	$(PYTEST_ARGS) || [ $$? -eq 5 ] || status=1; \
$(PYTEST) --serial-files -m "$(1)serial" $(2) $(PYTEST_ARGS) || [ $$? -eq 5 ] || status=1; \
rm -rf "$$ATTNSERVE_TEST_SHARED"; exit $$status
endef

pytest: setup
	@$(call two_phases,,--durations=25,$(TEST_WORKERS))

# The inner loop: no Debian packages, no images, no long documented commands; minutes on 2 cores.
check: lint
	@$(call two_phases,$(FAST_TESTS) and ,,$(CHECK_WORKERS))

test: test-deps lint pytest

proto: setup
	$(BIN)/python -m attnserve.service.protogen

compare: setup
	$(BIN)/attnserve-train compare --task car-order --seeds 0 1 2 3

# The reviews comparison at full size (120,000 reviews, 256 tokens): hours on a small CPU.
# REVIEWS_ARGS narrows it, e.g. REVIEWS_ARGS="--size 6000 --max-seconds 1500".
compare-reviews: setup
	$(BIN)/attnserve-train compare --task reviews-polarity --distractor both --truncation tail --reuse-runs $(REVIEWS_ARGS)

bench: setup
	$(BIN)/python -m bench --quick

loadtest: setup
	$(BIN)/python -m loadtest --target 127.0.0.1:$(PORT) --metrics 127.0.0.1:$(METRICS_PORT) --duration 30s

# Keeps the shipped bundle (tracked in git); removes every other export.
clean:
	rm -rf runs .pytest_cache .mypy_cache .ruff_cache
	git clean -fdXq -- $(REPO) 2>/dev/null || rm -rf $(REPO)
