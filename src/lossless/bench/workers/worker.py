"""One load-generating worker: runs the share of each level the driver sends, and streams back what happens.

Three threads: the main one runs a level's event loop (``run_bench``, as in a one-process run); a reader
answers the driver's pings at once (the reply carries this machine's wall clock, read on arrival) and
passes on levels and the order to stop; a sender gathers outgoing messages into batches, so the event
loop only appends to a queue and never waits on a pipe or a Ray call.
"""

from __future__ import annotations

import asyncio
import os
import queue
import signal
import threading
import time
from dataclasses import replace
from typing import Any, Protocol

from lossless.bench.config import BenchConfig, RunResult
from lossless.bench.loop import HOST, run_bench
from lossless.bench.runtime import loop_factory

_STOP = object()


class Inbox(Protocol):
    """A multiprocessing queue or a Ray queue: both raise queue.Empty on a time-out."""

    def get(self, block: bool = True, timeout: float | None = None) -> Any: ...
    def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None: ...


class _Sender:
    def __init__(self, index: int, outbox: Inbox) -> None:
        self.index, self._outbox = index, outbox
        self._pending: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._loop, name="lossless-sender", daemon=True)
        self._thread.start()

    def send(self, kind: str, payload: Any) -> None:
        self._pending.put((self.index, kind, payload))

    def _loop(self) -> None:
        while True:
            batch = [self._pending.get()]
            while True:
                try:
                    batch.append(self._pending.get_nowait())
                except queue.Empty:
                    break
            messages = [m for m in batch if m is not _STOP]
            if messages:
                self._outbox.put(messages)
            if len(messages) < len(batch):
                return

    def close(self) -> None:
        self._pending.put(_STOP)
        self._thread.join(timeout=30)


class _Current:
    """The level running now, so the reader thread can cancel it."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.task: asyncio.Task[Any] | None = None
        self.stopped = False

    def cancel(self) -> None:
        with self.lock:
            self.stopped = True
            if self.loop is not None and self.task is not None:
                self.loop.call_soon_threadsafe(self.task.cancel)


def run_worker(index: int, inbox: Inbox, outbox: Inbox) -> None:
    """What each worker process or Ray task runs, until the driver says stop."""
    # Ctrl-C in a terminal reaches every process of its group; the driver stops workers by message, after
    # they have sent what finished.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    sender = _Sender(index, outbox)
    sender.send("hello", {"host": HOST, "pid": os.getpid()})
    levels: queue.SimpleQueue[Any] = queue.SimpleQueue()
    current = _Current()
    reader = threading.Thread(target=_read, args=(inbox, sender, levels, current), daemon=True)
    reader.start()
    try:
        while (job := levels.get()) is not _STOP:
            config, start_wall_ns, env = job
            try:
                _level(config, start_wall_ns, env, sender, current)
            except Exception as exc:  # the driver ends the run with this message
                sender.send("error", f"{type(exc).__name__}: {exc}"[:500])
    finally:
        sender.close()


def _read(inbox: Inbox, sender: _Sender, levels: queue.SimpleQueue[Any], current: _Current) -> None:
    while True:
        kind, payload = inbox.get()
        if kind == "ping":
            sender.send("pong", (payload, time.time_ns()))
        elif kind == "level":
            levels.put(payload)
        else:  # "stop"
            current.cancel()
            levels.put(_STOP)
            return


def _level(
    config: BenchConfig, start_wall_ns: int, env: dict[str, str], sender: _Sender, current: _Current
) -> None:
    os.environ.update(env)  # API keys, which a Ray task on another machine does not inherit
    _, factory = loop_factory()
    with asyncio.Runner(loop_factory=factory) as runner:
        result = runner.run(_run(config, start_wall_ns, sender, current))
    sender.send("level_done", {"clients": result.clients, "interrupted": result.interrupted})


async def _run(config: BenchConfig, start_wall_ns: int, sender: _Sender, current: _Current) -> RunResult:
    with current.lock:
        if current.stopped:
            return RunResult(interrupted=True)
        current.loop, current.task = asyncio.get_running_loop(), asyncio.current_task()
    try:
        wait_ns = start_wall_ns - time.time_ns()
        start_ns = time.perf_counter_ns() + wait_ns  # the open loop's time zero, on the clock records use
        try:  # every worker starts at once
            await asyncio.sleep(max(0.0, wait_ns / 1e9))
        except asyncio.CancelledError:
            return RunResult(interrupted=True)
        return await run_bench(
            replace(config, start_ns=start_ns),
            on_record=lambda r: sender.send("record", r),
            on_start=lambda r: sender.send("start", r),
        )
    finally:
        with current.lock:
            current.loop = current.task = None
