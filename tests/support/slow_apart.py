"""A pytest plugin for ``make test``'s two pytest-xdist workers (``-n 2 --dist loadgroup``): the slow tests
(the real model, third-party servers) form two groups, each run one test after another on a worker of its
own from the start - those against servers we did not write (tests/compat) and ours - and the rest, file
by file, go to whichever worker is free first (after its slow group: a worker takes a group whole); each
file's other tests stay together, with their module fixtures. One slow group left the CPU idle 30% of its
42 minutes (a one-thread llama-server, a compile child, sleeps) while the other worker had long finished
the fast tests; two groups take 28-32 minutes with every process on one OpenMP thread (the Makefile's
OMP_NUM_THREADS=1: on two threads each, two processes spin at their barriers).

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
SLOW_GROUPS = ("slow: servers we did not write", "slow: ours")


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
        """loadgroup's scheduling, with the groups above: the two slow ones (handed out first, one to each
        worker: the longest work starts first), or the test's file."""

        slow: frozenset[str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.slow is None:  # read once all workers have collected (scheduling starts only then)
                self.slow = frozenset(json.loads(Path(os.environ[SLOW_LIST]).read_text()))
            if nodeid not in self.slow:
                return nodeid.split("::")[0]
            return SLOW_GROUPS[0] if nodeid.startswith("tests/compat/") else SLOW_GROUPS[1]

        def _assign_work_unit(self, node: Any) -> None:
            first = next((g for g in SLOW_GROUPS if g in self.workqueue), None)
            if first is not None:
                self.workqueue.move_to_end(first, last=False)
            super()._assign_work_unit(node)

    return SlowApart(config, log)
