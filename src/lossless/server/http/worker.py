"""One thread per server runs the engine's work; requests wait for it in a bounded FIFO queue. (Two
servers on one engine - verify's and demo's plain and speculative ones - take turns on its lock.)

Each request is an ``EngineJob`` (``server/jobs.py``), whose events the worker hands back to the event
loop as they come.

A job whose client leaves while it waits is taken out of the queue at once (``withdraw``): its slot is
free for the next client. On shutdown (``begin_shutdown``) the waiting jobs fail with a 503 at once, the
running one may finish within a grace period and fails with a 503 if it does not.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lossless.engine.engine import Engine
from lossless.engine.model.generate import Delta
from lossless.engine.torch_thread import in_fresh_thread
from lossless.server.http.metrics import ExportedMetrics, ServingLoad
from lossless.server.jobs import EngineJob, Failed, Finished, Scored, Started

SHUTTING_DOWN = "the server is shutting down"


@dataclass
class Progress:
    """One generating job's figures, for its Finished and the metrics."""

    start: float  # when it began generating
    last: float  # its latest token (``start`` before the first)
    first: float | None = None  # its first token
    tokens: int = 0


class QueueFull(Exception):
    """Raised to the handler, which answers 429; not a ``LosslessError``: it never leaves the server."""

    def __init__(self, retry_after_s: int) -> None:
        super().__init__("the request queue is full")
        self.retry_after_s = retry_after_s


class ShuttingDown(Exception):
    """Raised to the handler, which answers 503: the server takes no new work once shutdown began."""


class Worker:
    def __init__(
        self,
        engine: Engine,
        metrics: ExportedMetrics,
        max_queue: int,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.engine, self.metrics, self.clock = engine, metrics, clock
        self.max_queue = max_queue
        # A deque under a condition, not a queue.Queue: a job whose client left must be taken out of the
        # middle at once, or it would hold a slot (and a 429 for someone else) until its turn came.
        self._waiting: deque[EngineJob] = deque()
        self._changed = threading.Condition()
        self._accepting = True  # False once shutdown began: submit() raises ShuttingDown
        self._closed = False  # the thread ends once the queue is empty
        self._cut = False  # the running job was cut short by shutdown: it fails rather than finishes
        self._cut_timer: threading.Timer | None = None
        self._thread: threading.Thread | None = None
        self._current: EngineJob | None = None
        self._service_s = 1.0  # moving average of a job's time on the engine, for Retry-After
        self._at_once = 1  # jobs served at the same time (a batch: its slots)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="lossless-engine", daemon=True)
            self._thread.start()

    def begin_shutdown(self, grace_s: float) -> None:
        """Fail every waiting job now (503) and take no more; the running one may finish within
        ``grace_s``, then it is cancelled and fails too. Called again, it only shortens the grace."""
        with self._changed:
            self._accepting = False
            waiting = list(self._waiting)
            self._waiting.clear()
        for job in waiting:
            job.cancel.set()
            job.emit(Failed(SHUTTING_DOWN, status=503))
        if self._cut_timer is not None:
            self._cut_timer.cancel()
        if grace_s <= 0:
            self._cut_running()
            return
        self._cut_timer = threading.Timer(grace_s, self._cut_running)
        self._cut_timer.daemon = True
        self._cut_timer.start()

    def stop(self, timeout: float = 10.0) -> None:
        """Cancel the running job and every queued one, then end the thread."""
        self.begin_shutdown(0.0)
        with self._changed:
            self._closed = True
            self._changed.notify_all()
        if self._thread is not None:
            self._thread.join(timeout)
            self._thread = None

    def _cut_running(self) -> None:
        self._cut = True
        if (job := self._current) is not None:
            job.cancel.set()

    def queue_length(self) -> int:
        with self._changed:
            return len(self._waiting)

    def load(self) -> ServingLoad:
        running = int(self._current is not None)
        return ServingLoad(running=running, slots=1, slots_used=running)

    def submit(self, job: EngineJob) -> None:
        with self._changed:
            if not self._accepting:
                raise ShuttingDown(SHUTTING_DOWN)
            waiting = len(self._waiting)
            if waiting - self._free_places() >= self.max_queue:
                wait_s = (waiting + 1) * self._service_s / self._at_once
                raise QueueFull(retry_after_s=max(1, math.ceil(wait_s)))
            self._waiting.append(job)
            self._changed.notify()
        self.metrics.prompt_tokens.inc(len(job.prompt_ids))

    def _free_places(self) -> int:
        """Places where waiting jobs are about to start without counting against the queue (a batch's
        free slots: they join at the next step)."""
        return 0

    def withdraw(self, job: EngineJob) -> None:
        """The client left: cancel ``job``; if it is still waiting, free its slot and end it now."""
        job.cancel.set()
        with self._changed:
            try:
                self._waiting.remove(job)
            except ValueError:  # running or done: the worker notices the cancel event
                return
        self.metrics.cancelled.inc()
        job.emit(Finished("cancelled", 0, None, 0.0))

    def _next_job(self) -> EngineJob | None:
        with self._changed:
            while not self._waiting and not self._closed:
                self._changed.wait()
            if not self._waiting:
                return None
            self._current = self._waiting.popleft()
            return self._current

    def _run(self) -> None:
        while (job := self._next_job()) is not None:
            start = self.clock()
            try:  # in a thread that ends with the job: one OpenMP team at a time (`engine.torch_thread`)
                in_fresh_thread(lambda: self._run_job(job), name="lossless-job")
            except Exception as exc:  # an engine bug must not kill the worker or hang the client
                job.emit(Failed(f"generation failed: {type(exc).__name__}: {exc}"))
            finally:
                self._current = None
                self._service_s = 0.8 * self._service_s + 0.2 * (self.clock() - start)

    def _run_job(self, job: EngineJob) -> None:
        if self._begin(job):
            self._generate(job)

    def _begin(self, job: EngineJob) -> bool:
        """A job picked up: started, scored if it asks, or ended at once; True when it is to generate."""
        queue_s = self.clock() - job.admitted
        self.metrics.queue_wait.observe(queue_s)
        if job.cancel.is_set():  # the client left (or shutdown began) as the job was picked up
            if self._cut:
                job.emit(Failed(SHUTTING_DOWN, status=503))
                return False
            self.metrics.cancelled.inc()
            job.emit(Finished("cancelled", 0, None, 0.0))
            return False
        job.emit(Started(queue_s))
        if job.score_top is not None:
            job.emit(Scored(self.engine.score(job.prompt_ids, job.score_top)))
        if job.params.max_tokens == 0:
            job.emit(Finished("length", 0, None, 0.0))
            return False
        return True

    def _generate(self, job: EngineJob) -> None:
        start = self.clock()
        progress = Progress(start, start)
        finish = "length"
        stats: Mapping[str, Any] = {}
        stream = self.engine.generate(job.prompt_ids, job.params, job.cancel)
        try:
            for delta in stream:
                self._count(job, progress, delta)
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
        self._finish(job, progress, finish, stats)

    def _count(self, job: EngineJob, progress: Progress, delta: Delta) -> None:
        """A delta's tokens into the job's figures and the metrics."""
        now = self.clock()
        if n := len(delta.token_ids):
            if progress.first is None:
                progress.first = now
                self.metrics.ttft.observe(now - job.admitted)
            else:  # a speculative step's tokens arrive together and share the gap
                self.metrics.itl.observe((now - progress.last) / n, n)
            progress.last, progress.tokens = now, progress.tokens + n
            self.metrics.generation_tokens.inc(n)

    def _finish(self, job: EngineJob, progress: Progress, finish: str, stats: Mapping[str, Any]) -> None:
        """A job that generated ends: its Finished with its figures, or a 503 where shutdown cut it."""
        self.metrics.record_spec_stats(stats)
        if finish == "cancelled" and self._cut:  # cut by shutdown, not by its client: say so
            job.emit(Failed(SHUTTING_DOWN, status=503))
            return
        if finish == "cancelled":
            self.metrics.cancelled.inc()
        prefill_s = None if progress.first is None else progress.first - progress.start
        job.emit(Finished(finish, progress.tokens, prefill_s, progress.last - progress.start, stats))
