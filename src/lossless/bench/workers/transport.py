"""How workers start and how messages travel: local processes with multiprocessing queues, or Ray tasks
with Ray queues. The driver and the workers see the same small interface either way.

A message is a tuple ``(worker, kind, payload)``; a worker sends lists of them (one per batch it could
gather), the driver sends each worker single ones on its own inbox.
"""

from __future__ import annotations

import logging
import multiprocessing as mp
import queue
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from lossless.bench.workers.worker import Inbox, run_worker
from lossless.errors import UsageError

Message = tuple[int, str, Any]


@dataclass
class Handle:
    """One worker as the driver sees it."""

    index: int
    inbox: Inbox
    alive: Callable[[], bool]
    kill: Callable[[], None]
    name: str  # "pid 1234" or a Ray task id, for messages


class Pool(Protocol):
    workers: list[Handle]

    def receive(self, timeout: float) -> list[Message]: ...  # [] when nothing came in time
    def close(self) -> None: ...


class LocalPool:
    """N processes on this machine (spawned: a fresh interpreter each, nothing inherited but the
    environment, where the API keys are)."""

    def __init__(self, n: int) -> None:
        ctx = mp.get_context("spawn")
        self._outbox: Any = ctx.Queue()
        self.workers = []
        self._procs = []
        for i in range(n):
            inbox: Any = ctx.Queue()
            proc = ctx.Process(target=run_worker, args=(i, inbox, self._outbox), daemon=True)
            proc.start()
            self._procs.append(proc)
            self.workers.append(Handle(i, inbox, proc.is_alive, proc.kill, f"pid {proc.pid}"))

    def receive(self, timeout: float) -> list[Message]:
        try:
            batch: list[Message] = self._outbox.get(timeout=timeout)
        except queue.Empty:
            return []
        return batch

    def close(self) -> None:
        for proc in self._procs:
            proc.join(timeout=5)
            if proc.is_alive():
                proc.kill()
                proc.join(timeout=5)
        self._outbox.close()
        self._outbox.cancel_join_thread()


class RayPool:
    """N Ray tasks of one CPU each, spread over the cluster's nodes. ``address``: a cluster to attach to
    (``ray://host:10001``, ``host:6379`` or ``auto``), or ``local`` to start a Ray for this run."""

    def __init__(self, n: int | None, address: str) -> None:
        try:
            import ray
            from ray.util.queue import Queue
        except ImportError:
            raise UsageError("--ray needs Ray: pip install 'lossless[ray]'") from None
        self._ray = ray
        self._started = not ray.is_initialized()
        if self._started:
            where = None if address == "local" else address
            ray.init(address=where, include_dashboard=False, logging_level=logging.ERROR, log_to_driver=True)
        cpus = int(ray.cluster_resources().get("CPU", 0))
        n = n or cpus
        if n > cpus:
            raise UsageError(f"--workers {n}: the Ray cluster has {cpus} CPUs, one per worker")
        options = {"num_cpus": 0}  # the queues are small actors; they take no worker's CPU
        self._outbox = Queue(actor_options=options)
        task = ray.remote(num_cpus=1, max_retries=0, scheduling_strategy="SPREAD")(run_worker)
        self.workers, self._refs = [], []
        for i in range(n):
            inbox = Queue(actor_options=options)
            ref = task.remote(i, inbox, self._outbox)
            self._refs.append(ref)
            self.workers.append(Handle(i, inbox, self._alive(ref), self._kill(ref), ref.hex()[:12]))

    def _alive(self, ref: Any) -> Callable[[], bool]:
        return lambda: not self._ray.wait([ref], timeout=0)[0]

    def _kill(self, ref: Any) -> Callable[[], None]:
        return lambda: self._ray.cancel(ref, force=True)

    def receive(self, timeout: float) -> list[Message]:
        try:
            batch: list[Message] = self._outbox.get(timeout=timeout)
        except queue.Empty:  # Ray's Empty is one
            return []
        return batch

    def close(self) -> None:
        ray = self._ray
        _, pending = ray.wait(self._refs, num_returns=len(self._refs), timeout=5)
        for ref in pending:
            ray.cancel(ref, force=True)
        if self._started:
            ray.shutdown()


def start(workers: int | None, ray_address: str | None) -> Pool:
    """``workers`` processes (None: one per CPU of the Ray cluster, or one here), at ``ray_address``."""
    return RayPool(workers, ray_address) if ray_address is not None else LocalPool(workers or 1)
