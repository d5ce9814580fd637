"""Shared fixtures: the real embedded model's path; a tiny random Llama checkpoint built in a blink."""

from __future__ import annotations

import json
import os
import shutil
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from tiny_checkpoint import write_tiny_checkpoint

if TYPE_CHECKING:
    from lossless.engine.engine import Engine

# A suite started in the background without job control (`make test &`, nohup, some CI runners) inherits
# SIGINT *ignored*, and so would every command a test starts: the tests that press Ctrl-C on bench and
# serve would then see it do nothing. Python's own handler here makes the children start with the
# default again (an ignored signal is inherited across exec, a handler is not).
signal.signal(signal.SIGINT, signal.default_int_handler)


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


# `make test` runs two pytest-xdist workers with `--dist loadgroup`, grouped here: the slow tests (the real
# model, third-party servers: each keeps both cores busy) form one group that runs one test after another on
# one worker, while the other worker takes the rest, which mostly wait on sockets and timers; each file's
# other tests stay together, with their module fixtures. xdist's own loadgroup reads xdist_group marks by
# renaming items (Node._nodeid), which pytest 9.2 no longer reads, so the groups are formed here: each
# worker lists the slow tests it collected in a file the controller's scheduler reads.
SLOW_LIST = "LOSSLESS_TEST_SLOW_LIST"


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("dist", "no") == "loadgroup" and not hasattr(config, "workerinput"):
        os.environ[SLOW_LIST] = str(Path(tempfile.mkdtemp(prefix="lossless-xdist-")) / "slow.json")


def pytest_unconfigure(config: pytest.Config) -> None:
    if SLOW_LIST in os.environ and not hasattr(config, "workerinput"):
        shutil.rmtree(Path(os.environ.pop(SLOW_LIST)).parent, ignore_errors=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    worker = getattr(config, "workerinput", {}).get("workerid")
    if worker and SLOW_LIST in os.environ:
        target = Path(os.environ[SLOW_LIST])
        part = target.with_name(f"{worker}.part")
        part.write_text(json.dumps([i.nodeid for i in items if i.get_closest_marker("slow")]))
        part.replace(target)  # every worker collects the same tests: whichever lands last, the same list


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    if config.getoption("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class SlowApart(LoadScopeScheduling):
        """loadgroup's scheduling, with the groups above: "slow", or the test's file."""

        slow: frozenset[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.slow is None:  # read once all workers have collected (scheduling starts only then)
                self.slow = frozenset(json.loads(Path(os.environ[SLOW_LIST]).read_text()))
            return "slow" if nodeid in self.slow else nodeid.split("::")[0]

    return SlowApart(config, log)
