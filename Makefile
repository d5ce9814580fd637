# Two commands on a fresh machine: `make demo` (the main job) and `make test` (the whole suite).
# Each creates .venv and installs what it needs; torch is pinned to the CPU build in constraints.txt.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP_INSTALL := $(BIN)/python -m pip install -q -c constraints.txt
# First the few millisecond-timing tests (marked quiet) alone, on a machine nothing else has run on yet (one
# failed by 0.05 ms right after the parallel part here); then two pytest-xdist workers: the slow tests (real
# model, third-party servers) one after another on one, the rest beside them (tests/support/slow_apart.py).
PARALLEL := -n 2 --dist loadgroup

.PHONY: demo serve test test-fast browser check fmt lint types bench clean

$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(PIP_INSTALL) -e '.[engine,server,dev]'
	touch $@

# The compatibility suite's third-party servers (only `make test` needs them). llama-cpp-python compiles
# llama.cpp: for AVX2, not -march=native, because a CPU may advertise instructions its VM cannot run
# (AMX here: llama.cpp built natively died with SIGILL at its first matrix product).
$(BIN)/.compat: $(BIN)/.installed
	CMAKE_ARGS="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON -DLLAVA_BUILD=OFF" \
		CMAKE_BUILD_PARALLEL_LEVEL=$$(nproc) $(PIP_INSTALL) -e '.[all]'
	touch $@

# The main job: pull the embedded model, serve it plainly and speculatively, benchmark, verify, report.
demo: $(BIN)/.installed
	$(BIN)/lossless demo

# Serve the embedded model (pulls it on first use).
serve: $(BIN)/.installed
	$(BIN)/lossless serve

test: $(BIN)/.compat browser
	$(BIN)/lossless models pull
	$(BIN)/python -m pytest -m quiet
	$(BIN)/python -m pytest $(PARALLEL) -m "not quiet"

# The HTML report test renders in Debian's chromium (Playwright drives it; its own browser download is
# not used). Installing needs root; elsewhere install chromium yourself or the browser test is skipped.
browser:
	@command -v chromium >/dev/null || (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) \
		|| echo "chromium could not be installed: the browser test will be skipped (outside CI)"

# Unit and integration tests without the real model or the third-party servers.
test-fast: $(BIN)/.installed
	$(BIN)/python -m pytest -m "quiet and not slow"
	$(BIN)/python -m pytest $(PARALLEL) -m "not slow and not quiet"

fmt: $(BIN)/.installed
	$(BIN)/ruff format src tests benchmarks

lint: $(BIN)/.installed
	$(BIN)/ruff format --check src tests benchmarks
	$(BIN)/ruff check src tests benchmarks

types: $(BIN)/.installed
	$(BIN)/mypy

# One check command: format, lint, types, tests.
check: lint types test

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
