"""One thread owns the engine (it is not thread-safe); requests wait for it in a bounded FIFO queue.

The event loop never waits on the engine: each ``Job`` carries its loop and an ``asyncio.Queue``, and the
worker hands every event over with ``loop.call_soon_threadsafe``. Every job's events end with exactly
one ``Finished`` or ``Failed``, even a job cancelled while it was still queued, so a handler waiting on
its queue always wakes up.
"""

from __future__ import annotations

import asyncio
import math
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lossless.engine.engine import Delta, Engine, TokenLogprob
from lossless.engine.sampling import SamplingParams
from lossless.server.metrics import ServerMetrics


class QueueFull(Exception):
    """Raised to the handler, which answers 429; not a ``LosslessError``: it never leaves the server."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__("the request queue is full")
        self.retry_after_s = retry_after_s


@dataclass(frozen=True)
class Started:
    queue_s: float  # admission -> the worker picked the job up


@dataclass(frozen=True)
class Scored:
    logprobs: list[TokenLogprob | None]  # the prompt's, for echo


@dataclass(frozen=True)
class Finished:
    finish_reason: str
    completion_tokens: int
    prefill_s: float | None  # generation start -> first delta; None when nothing was generated
    decode_s: float  # generation start -> last delta
    stats: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Failed:
    message: str


Event = Started | Scored | Delta | Finished | Failed


@dataclass
class Job:
    prompt_ids: list[int]
    params: SamplingParams
    loop: asyncio.AbstractEventLoop
    score_top: int | None = None  # score the prompt first (echo with logprobs) with this many alternatives
    events: asyncio.Queue[Event] = field(default_factory=asyncio.Queue)
    cancel: threading.Event = field(default_factory=threading.Event)
    admitted: float = field(default_factory=time.perf_counter)

    def emit(self, event: Event) -> None:
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, event)
        except RuntimeError:  # the loop is closed: the server is going down, nobody is listening
            self.cancel.set()


class Worker:
    def __init__(
        self,
        engine: Engine,
        metrics: ServerMetrics,
        max_queue: int,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.engine, self.metrics, self.clock = engine, metrics, clock
        # The bound is kept by submit(), not by the queue: stop() must always be able to add its sentinel.
        self.max_queue = max_queue
        self._queue: queue.Queue[Job | None] = queue.Queue()
        self._thread: threading.Thread | None = None
        self._current: Job | None = None
        self._service_s = 1.0  # moving average of a job's time on the engine, for Retry-After

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="lossless-engine", daemon=True)
            self._thread.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel the running job and every queued one, then end the thread."""
        while True:
            try:
                job = self._queue.get_nowait()
            except queue.Empty:
                break
            if job is not None:
                job.cancel.set()
                job.emit(Failed("the server is shutting down"))
        if (job := self._current) is not None:
            job.cancel.set()
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout)
            self._thread = None

    def queue_length(self) -> int:
        return self._queue.qsize()

    def submit(self, job: Job) -> None:
        # Only the event loop's thread submits, so nothing can slip in between the check and the put.
        waiting = self._queue.qsize()
        if waiting >= self.max_queue:
            raise QueueFull(retry_after_s=max(1, math.ceil((waiting + 1) * self._service_s)))
        self._queue.put_nowait(job)
        self.metrics.prompt_tokens.inc(len(job.prompt_ids))

    def _run(self) -> None:
        while (job := self._queue.get()) is not None:
            self._current = job
            start = self.clock()
            try:
                self._run_job(job)
            except Exception as exc:  # an engine bug must not kill the worker or hang the client
                job.emit(Failed(f"generation failed: {type(exc).__name__}: {exc}"))
            finally:
                self._current = None
                self._service_s = 0.8 * self._service_s + 0.2 * (self.clock() - start)

    def _run_job(self, job: Job) -> None:
        queue_s = self.clock() - job.admitted
        self.metrics.queue_wait.observe(queue_s)
        if job.cancel.is_set():  # the client left while waiting
            self.metrics.cancelled.inc()
            job.emit(Finished("cancelled", 0, None, 0.0))
            return
        job.emit(Started(queue_s))
        if job.score_top is not None:
            job.emit(Scored(self.engine.score(job.prompt_ids, job.score_top)))
        if job.params.max_tokens == 0:
            job.emit(Finished("length", 0, None, 0.0))
            return
        self._generate(job)

    def _generate(self, job: Job) -> None:
        start = last = self.clock()
        first: float | None = None
        tokens, finish = 0, "length"
        stats: Mapping[str, Any] = {}
        stream = self.engine.generate(job.prompt_ids, job.params, job.cancel)
        try:
            for delta in stream:
                now = self.clock()
                if n := len(delta.token_ids):
                    if first is None:
                        first = now
                        self.metrics.ttft.observe(now - job.admitted)
                    else:  # a speculative step's tokens arrive together and share the gap
                        self.metrics.itl.observe((now - last) / n, n)
                    last, tokens = now, tokens + n
                    self.metrics.generation_tokens.inc(n)
                job.emit(delta)
                if delta.finish_reason is not None:
                    finish, stats = delta.finish_reason, delta.stats
                    break
                if job.cancel.is_set():  # do not wait for the engine to notice: stop pulling tokens now
                    finish = "cancelled"
                    break
        finally:
            close = getattr(stream, "close", None)
            if close is not None:
                close()
        if finish == "cancelled":
            self.metrics.cancelled.inc()
        self.metrics.record_spec_stats(stats)
        prefill_s = None if first is None else first - start
        job.emit(Finished(finish, tokens, prefill_s, last - start, stats))
