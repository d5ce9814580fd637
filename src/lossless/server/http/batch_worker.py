"""``serve --max-batch N``: continuous batching. The same bounded queue as the one-at-a-time ``Worker``
(its 429s, withdrawals and shutdown), drained into a running batch (`engine.batch.decode`) instead
of one job at a time: at every step waiting jobs join while KV cache slots are free, one forward advances
every running job (and a chunk of each newcomer's prompt), and a job that finished, or whose client left,
leaves at once, its slot free for the next step.

The steps run in a thread that ends when the batch empties and nobody waits (one OpenMP team at a time,
`engine.torch_thread`); the next job starts another.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from lossless.engine.batch.decode import DecodeBatch
from lossless.engine.engine import Engine
from lossless.engine.model.generate import Delta
from lossless.engine.torch_thread import in_fresh_thread
from lossless.errors import UsageError
from lossless.server.http.metrics import ExportedMetrics, ServingLoad
from lossless.server.http.worker import Progress, Worker
from lossless.server.jobs import EngineJob, Failed


class BatchWorker(Worker):
    def __init__(
        self,
        engine: Engine,
        metrics: ExportedMetrics,
        max_queue: int,
        max_batch: int,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        super().__init__(engine, metrics, max_queue, clock)
        self.max_batch = self._at_once = max_batch
        self.batch: DecodeBatch[EngineJob] = engine.decode_batch(max_batch)
        self._running: dict[EngineJob, Progress] = {}  # touched by the batch's thread only
        self._load = ServingLoad(slots=max_batch)  # replaced whole after every step: read by /metrics

    def load(self) -> ServingLoad:
        return self._load

    def _free_places(self) -> int:
        return self.batch.free()

    def _cut_running(self) -> None:
        self._cut = True
        for job in list(self._running):
            job.cancel.set()

    def _run(self) -> None:
        while self._wait_for_work():
            try:
                in_fresh_thread(self._steps, name="lossless-batch")
            except Exception as exc:  # an engine bug must not kill the worker or hang its clients
                for job in self._running:
                    job.emit(Failed(f"generation failed: {type(exc).__name__}: {exc}"))
                self._running.clear()
                self.batch = self.engine.decode_batch(self.max_batch)  # its state is not to be trusted
            finally:
                self._load = ServingLoad(slots=self.max_batch, kv_positions=0)

    def _wait_for_work(self) -> bool:
        with self._changed:
            while not self._waiting and not self._closed:
                self._changed.wait()
            return bool(self._waiting)

    def _steps(self) -> None:
        """Step the batch until it is empty and nobody waits."""
        while True:
            self._join()
            self._leave_cancelled()
            if not self._running:
                with self._changed:
                    if not self._waiting:
                        return
                continue
            deltas = self.batch.step()
            self.metrics.batch_size.observe(len(self._running))
            for job, delta in deltas:
                self._deliver(job, delta)
            tokens = self.batch.tokens
            used = len(tokens.running)
            self._load = ServingLoad(len(self._running), self.max_batch, used, tokens.positions_in_use())

    def _join(self) -> None:
        """Waiting jobs into the free slots, oldest first."""
        while self.batch.free():
            with self._changed:
                if not self._waiting:
                    return
                job = self._waiting.popleft()
            if not self._begin(job):
                continue
            try:
                self.engine.check_prompt(job.prompt_ids)
            except UsageError as exc:
                job.emit(Failed(str(exc), status=400))
                continue
            self.batch.add(job, job.prompt_ids, job.params)
            now = self.clock()
            self._running[job] = Progress(now, now)

    def _leave_cancelled(self) -> None:
        for job in [job for job in self._running if job.cancel.is_set()]:
            self.batch.cancel(job)  # its last text is nobody's: the client left, or shutdown cut it
            self._end(job, "cancelled", {})

    def _deliver(self, job: EngineJob, delta: Delta) -> None:
        self._count(job, self._running[job], delta)
        job.emit(delta)
        if delta.finish_reason is not None:
            self._end(job, delta.finish_reason, delta.stats)

    def _end(self, job: EngineJob, finish: str, stats: Mapping[str, Any]) -> None:
        progress = self._running.pop(job)
        self._service_s = 0.8 * self._service_s + 0.2 * (self.clock() - progress.start)
        self._finish(job, progress, finish, stats)
