"""A pytest plugin for ``make test``'s two pytest-xdist workers (``-n 2 --dist loadgroup``): the slow tests
(the real model, third-party servers: each keeps both cores busy) form one group that runs one test after
another on one worker, while the other worker takes the rest, which mostly wait on sockets and timers; each
file's other tests stay together, with their module fixtures.

xdist's own loadgroup reads ``xdist_group`` marks by renaming items (``Node._nodeid``), which pytest 9.2 no
longer reads: its groups were silently ignored. So the groups are formed here: each worker lists the slow
tests it collected in a file, which the controller's scheduler reads once all workers have collected.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest

SLOW_LIST = "LOSSLESS_TEST_SLOW_LIST"
MADE = pytest.StashKey[Path]()  # the folder this controller made, the only one it removes


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("dist", "no") == "loadgroup" and not hasattr(config, "workerinput"):
        config.stash[MADE] = Path(tempfile.mkdtemp(prefix="lossless-xdist-"))
        os.environ[SLOW_LIST] = str(config.stash[MADE] / "slow.json")


def pytest_unconfigure(config: pytest.Config) -> None:
    if MADE in config.stash:  # not one named by an inherited variable (a pytest a test started)
        shutil.rmtree(config.stash[MADE], ignore_errors=True)
        os.environ.pop(SLOW_LIST, None)


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
