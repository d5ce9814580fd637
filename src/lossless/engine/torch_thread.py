"""Torch work in a thread of its own that ends with the work: one OpenMP team alive at a time.

Torch's CPU kernels (and inductor's compiled code) run their parallel loops on OpenMP, and libgomp keeps
one team of worker threads per thread that ever started a parallel loop, until that thread ends. With two
teams alive on a 2-core machine (the model loaded on the main thread, then generations on a server's
worker thread), every parallel loop of the second ran on ~1.1 cores: SmolLM2 int4 with the dspark head
decoded 65 tok/s instead of 120 eagerly, 52 instead of 150 compiled (2026-12-04, 2 cores; the same in
either order, and with ``OMP_WAIT_POLICY=PASSIVE`` even on the main thread alone: the team's threads
sleep between loops instead of spinning). A thread that has ended has freed its team. So the server loads
its model, and runs each job, in a thread that ends when that work does (`in_fresh_thread`), and nothing
else in the process starts parallel loops while it serves.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def in_fresh_thread(work: Callable[[], T], name: str = "lossless-torch") -> T:
    """``work()`` in a new thread, waited for: its result, or its exception raised here."""
    outcome: list[T] = []
    failure: list[BaseException] = []

    def run() -> None:
        try:
            outcome.append(work())
        except BaseException as exc:
            failure.append(exc)

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    thread.join()
    if failure:
        raise failure[0]
    return outcome[0]
