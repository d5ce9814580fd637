"""Shared fixtures: the real embedded model's path and engine; a tiny random Llama checkpoint built in a
blink; a scripted OpenAI-compatible server per test module. The servers and checkpoints the fixtures
start or write live in tests/support/."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from scripted_server import ScriptedServer
from slow_apart import (  # make test's two pytest-xdist workers: the slow tests on one, one after another
    pytest_collection_modifyitems,
    pytest_configure,
    pytest_unconfigure,
    pytest_xdist_make_scheduler,
)
from third_party import llama_cpp_bin
from tiny_checkpoint import write_tiny_checkpoint

__all__ = [  # the plugin's hooks, found here by name
    "pytest_collection_modifyitems",
    "pytest_configure",
    "pytest_unconfigure",
    "pytest_xdist_make_scheduler",
]

if TYPE_CHECKING:
    from lossless.engine.engine import Engine

# A suite started in the background without job control (`make test &`, nohup, some CI runners) inherits
# SIGINT *ignored*, and so would every command a test starts: the tests that press Ctrl-C on bench and
# serve would then see it do nothing. Python's own handler here makes the children start with the
# default again (an ignored signal is inherited across exec, a handler is not).
signal.signal(signal.SIGINT, signal.default_int_handler)

# llama-cpp-python is installed without a llama.cpp of its own (the Makefile): it loads the libraries that
# `make llama-cpp` builds, here and in every server a test starts, so that both llama.cpp servers run one
# build. Set before anything imports llama_cpp.
os.environ.setdefault("LLAMA_CPP_LIB_PATH", str(llama_cpp_bin()))


@pytest.fixture(scope="session")
def smollm2_path() -> Path:
    """The embedded SmolLM2-135M-Instruct GGUF (pulled into the cache on first use)."""
    from lossless.models import resolve

    return resolve()


@pytest.fixture(scope="session")
def smollm2_engine(smollm2_path: Path) -> Engine:
    """SmolLM2 loaded once for the whole session: float32, plain decoding. Never give it a drafter; a
    test that decodes speculatively takes ``smollm2_engine.with_drafter(spec)``, which shares the
    weights, the KV cache and its lock."""
    from lossless.engine.engine import Engine

    return Engine.load(smollm2_path, dtype="float32")


@pytest.fixture(scope="session")
def tiny_checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny random Llama folder: config.json, model.safetensors, tokenizer.json, tokenizer_config.json."""
    return write_tiny_checkpoint(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture
def tiny_engine(tiny_checkpoint: Path) -> Engine:
    """The tiny checkpoint loaded in float32 (a fresh Engine per test: the KV cache is per engine)."""
    from lossless.engine.engine import Engine

    return Engine.load(tiny_checkpoint)


@pytest.fixture(scope="module")
def torch_one_thread() -> Iterator[None]:
    """torch on one thread for a module (tiny tensors: more threads only wait on each other)."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    """The scripted server (tests/support/scripted_server.py), one per test module: a test scripts what it
    answers (``server.script(...)``) before it sends."""
    with ScriptedServer() as s:
        yield s
