"""The worker's queue discipline, with a scripted engine (the real one is exercised over HTTP in
tests/integration/server/test_server.py): FIFO, bounded, cancellation, failures, metrics from deltas."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from lossless.engine.engine import Delta
from lossless.engine.model.sampling import SamplingParams
from lossless.server.http.metrics import ExportedMetrics
from lossless.server.http.worker import QueueFull, Worker
from lossless.server.jobs import EngineJob, Event, Failed, Finished, Started


class ScriptedEngine:
    """Yields one delta per token id of the prompt; a gate holds the first job until released."""

    def __init__(self) -> None:
        self.order: list[int] = []
        self.gate = threading.Event()

    def generate(self, ids: list[int], params: SamplingParams, cancel: threading.Event) -> Iterator[Delta]:
        self.order.append(ids[0])
        if ids[0] == 0:
            self.gate.wait(5)
        if ids[0] == 666:
            raise RuntimeError("boom")
        for i, t in enumerate(ids[1:]):
            last = i == len(ids) - 2
            stats = {"drafted": 4, "accepted": 2, "accept_counts": [0, 0, 1]} if last else {}
            yield Delta(str(t), (t,), finish_reason="length" if last else None, stats=stats)


async def drain(job: EngineJob) -> list[Event]:
    events = []
    while not events or not isinstance(events[-1], Finished | Failed):
        events.append(await asyncio.wait_for(job.events.get(), 5))
    return events


def make(engine: Any, max_queue: int = 4) -> tuple[Worker, ExportedMetrics]:
    metrics = ExportedMetrics()
    worker = Worker(engine, metrics, max_queue)
    metrics.queue_length = worker.queue_length
    return worker, metrics


def test_jobs_run_in_arrival_order_and_the_queue_is_bounded() -> None:
    async def main() -> None:
        engine = ScriptedEngine()
        worker, metrics = make(engine, max_queue=2)
        loop = asyncio.get_running_loop()
        jobs = [EngineJob([i, 7, 8], SamplingParams(), loop) for i in range(3)]
        worker.start()
        try:
            worker.submit(jobs[0])
            await asyncio.sleep(0.05)  # job 0 is on the engine, held by the gate
            worker.submit(jobs[1])
            worker.submit(jobs[2])
            assert metrics.queue_length() == 2
            with pytest.raises(QueueFull) as full:
                worker.submit(EngineJob([9, 9], SamplingParams(), loop))
            assert full.value.retry_after_s >= 1
            engine.gate.set()
            results = [await drain(j) for j in jobs]
        finally:
            worker.stop()
        assert engine.order == [0, 1, 2]
        for events in results:
            assert isinstance(events[0], Started)
            assert [e.text for e in events if isinstance(e, Delta)] == ["7", "8"]
            assert events[-1] == Finished(
                "length", 2, events[-1].prefill_s, events[-1].decode_s, events[-2].stats
            )
        assert metrics.generation_tokens.value() == 6
        assert metrics.itl.count == 3  # one per token after each job's first
        assert metrics.drafted.value() == 12

    asyncio.run(main())


def test_a_job_cancelled_while_queued_never_reaches_the_engine() -> None:
    async def main() -> None:
        engine = ScriptedEngine()
        worker, metrics = make(engine)
        loop = asyncio.get_running_loop()
        first, second = EngineJob([0, 1], SamplingParams(), loop), EngineJob([5, 1], SamplingParams(), loop)
        worker.start()
        try:
            worker.submit(first)
            worker.submit(second)
            second.cancel.set()
            engine.gate.set()
            await drain(first)
            events = await drain(second)
        finally:
            worker.stop()
        assert events == [Finished("cancelled", 0, None, 0.0)]
        assert engine.order == [0]
        assert metrics.cancelled.value() == 1

    asyncio.run(main())


def test_an_engine_failure_reaches_the_client_and_the_worker_survives() -> None:
    async def main() -> None:
        engine = ScriptedEngine()
        engine.gate.set()
        worker, _ = make(engine)
        loop = asyncio.get_running_loop()
        bad, good = EngineJob([666, 1], SamplingParams(), loop), EngineJob([3, 1], SamplingParams(), loop)
        worker.start()
        try:
            worker.submit(bad)
            worker.submit(good)
            failed, served = await drain(bad), await drain(good)
        finally:
            worker.stop()
        assert isinstance(failed[-1], Failed) and "boom" in failed[-1].message
        assert isinstance(served[-1], Finished) and served[-1].finish_reason == "length"

    asyncio.run(main())


def test_each_job_runs_in_a_thread_that_ends_with_it() -> None:
    """One OpenMP team at a time (`engine.torch_thread`): a job's torch work runs on a thread of its own,
    neither the worker's nor the caller's, gone once the job is."""

    class Recording(ScriptedEngine):
        def __init__(self) -> None:
            super().__init__()
            self.threads: list[threading.Thread] = []
            self.gate.set()

        def generate(
            self, ids: list[int], params: SamplingParams, cancel: threading.Event
        ) -> Iterator[Delta]:
            self.threads.append(threading.current_thread())
            yield from super().generate(ids, params, cancel)

    async def main() -> None:
        engine = Recording()
        worker, _ = make(engine)
        loop = asyncio.get_running_loop()
        jobs = [EngineJob([i, 7], SamplingParams(), loop) for i in (1, 2)]
        worker.start()
        try:
            for job in jobs:
                worker.submit(job)
            for job in jobs:
                assert isinstance((await drain(job))[-1], Finished)
            assert worker._thread is not None
            assert worker._thread not in engine.threads
        finally:
            worker.stop()
        first, second = engine.threads
        assert first is not second and threading.main_thread() not in engine.threads
        assert first.name == second.name == "lossless-job"
        first.join(5), second.join(5)
        assert not first.is_alive() and not second.is_alive()

    asyncio.run(main())
