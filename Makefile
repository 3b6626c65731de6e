# attnserve: `make serve` (set up, train + export the default model if needed, serve), `make check`
# (the inner loop: lint, types, fast tests) and `make test` (everything; what CI runs).
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

.PHONY: serve setup model check test test-deps lint pytest proto compare compare-reviews bench loadtest clean

$(BIN)/.installed: pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	# torch is pinned in pyproject (train extra): any other version pulls a multi-GB CUDA build.
	# -qq: setuptools prints a notice on every editable install; errors still show.
	$(BIN)/python -m pip install -qq -e '.[train,dev]'
	touch $@

setup: $(BIN)/.installed

# Train and export the built-in car-order model unless the repository already holds one.
model: setup
	@if [ -z "$$(ls -A $(REPO)/$(MODEL) 2>/dev/null)" ]; then \
		echo "== training the default car-order model (two to three minutes on 2 cores)"; \
		$(BIN)/attnserve-train --task car-order --model transformer --out runs/$(MODEL) && \
		echo "== exporting it to $(REPO)/$(MODEL)" && \
		$(BIN)/attnserve-export runs/$(MODEL) --repository $(REPO) --name $(MODEL); \
	else echo "== $(REPO)/$(MODEL) already holds a model"; fi

# The default model answers calls that name none; the repository is watched (new exports are served).
serve: model
	@echo "== serving $(REPO) on 127.0.0.1:$(PORT) (metrics on :$(METRICS_PORT)/metrics), default model $(MODEL)"
	@echo "   try:  $(BIN)/attnserve-client --target 127.0.0.1:$(PORT) classify 'the white car is on the left of the black car'"
	exec $(BIN)/attnserve-serve --repository $(REPO) --port $(PORT) --metrics-port $(METRICS_PORT) \
		--default-model $(MODEL) $(SERVE_ARGS)

# System and tool dependencies of the test suite (Debian packages, the Triton client tools venv).
test-deps: setup
	bash scripts/test-deps.sh

lint: setup
	$(BIN)/ruff check .
	bash scripts/typecheck.sh

pytest: setup
	$(BIN)/python -m pytest -q -p no:cacheprovider $(PYTEST_ARGS)

# The inner loop: no Debian packages, no images, no long documented commands; minutes on 2 cores.
check: lint
	$(BIN)/python -m pytest -q -p no:cacheprovider -m "$(FAST_TESTS)" $(PYTEST_ARGS)

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

clean:
	rm -rf runs $(REPO) .pytest_cache .mypy_cache .ruff_cache
