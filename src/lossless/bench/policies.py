"""Request policies bench can execute, so that what ``lossless advise`` predicts can be checked by a run.

    --hedge-after MS         a 2nd attempt at the same endpoint goes out MS after the 1st unless the 1st
                             has answered by then; the first answer wins and the other is cancelled
    --failover URL           a 2nd attempt at URL when the 1st fails with an error worth another try
    --failover-after MS      ... or when it has no first token MS after it was sent (it is cancelled)

Exactly advise's policies (``advise.simulate``): a 1st attempt that fails before the hedge delay does not
start the hedge early, and a failover's 1st attempt that has streamed a first token runs to its end. Every
attempt is a record of the same request (``request_index``, ``attempt`` 0 and 1); the request's outcome is
the record with ``retried`` false: the first answer, or the last attempt when none answered. An attempt the
policy cancelled is ``abandoned``. The request's latency, from its first send to its first answer, is what
advise predicted (``advise.executed``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from lossless.client.call import CallCancelled, Job
from lossless.client.endpoints import Endpoint
from lossless.records import Failure, RequestRecord, retryable


@dataclass(frozen=True)
class Policy:
    hedge_after_s: float | None = None
    failover: Endpoint | None = None
    failover_after_s: float | None = None  # None: fail over on errors only

    def with_backup(self, endpoints: tuple[Endpoint, ...]) -> tuple[Endpoint, ...]:
        """The endpoints a run sends to: the measured ones, and the one failed over to."""
        return (*endpoints, *([self.failover] if self.failover is not None else []))

    @property
    def active(self) -> bool:
        return self.hedge_after_s is not None or self.failover is not None

    def describe(self) -> dict[str, object]:
        """For summary.json's config block (advise reads it)."""
        return {
            "hedge_after_ms": None if self.hedge_after_s is None else self.hedge_after_s * 1000,
            "failover": None if self.failover is None else self.failover.name,
            "failover_after_ms": None if self.failover_after_s is None else self.failover_after_s * 1000,
        }


@dataclass
class Attempt:
    task: asyncio.Task[RequestRecord]
    first_token: asyncio.Event  # set when the attempt's first token arrives


Start = Callable[[Job, int], Attempt]  # sends attempt k of a job
Emit = Callable[[RequestRecord], None]


async def send_with_policy(policy: Policy, job: Job, start: Start, emit: Emit) -> RequestRecord:
    """The request ``job`` under ``policy``; every attempt's record emitted; the outcome returned. On
    cancellation (the run's end) every attempt in flight is emitted as cancelled."""
    running: list[Attempt] = []
    emitted: set[int] = set()  # attempt numbers

    def launch(j: Job, k: int) -> Attempt:
        running.append(start(j, k))
        return running[-1]

    def out(record: RequestRecord) -> None:
        emitted.add(record.attempt)
        emit(record)

    try:
        if policy.hedge_after_s is not None:
            return await _hedged(job, policy.hedge_after_s, launch, out)
        assert policy.failover is not None
        return await _failed_over(job, policy.failover, policy.failover_after_s, launch, out)
    except asyncio.CancelledError:
        for k, a in enumerate(running):
            if k not in emitted and (record := await _stop(a)) is not None:
                emit(record)  # cut by the run's end (Failure.CANCELLED), or ended before it
        raise


async def _hedged(job: Job, delay: float, launch: Start, emit: Emit) -> RequestRecord:
    loop = asyncio.get_running_loop()
    first = launch(job, 0)
    await asyncio.sleep(0)  # the attempt runs to its first wait: it has stamped its send time
    due = loop.time() + delay
    await asyncio.wait([first.task], timeout=delay)
    if first.task.done() and first.task.result().ok:
        emit(first.task.result())
        return first.task.result()
    await asyncio.sleep(max(0.0, due - loop.time()))  # a 1st attempt that failed early: still at the delay
    second = launch(job, 1)
    return await _first_answer([first, second], emit, "hedge: the other attempt answered first")


async def _failed_over(
    job: Job, backup: Endpoint, delay: float | None, launch: Start, emit: Emit
) -> RequestRecord:
    first = launch(job, 0)
    await asyncio.sleep(0)  # the attempt runs to its first wait: it has stamped its send time
    token = asyncio.ensure_future(first.first_token.wait())
    await asyncio.wait([first.task, token], timeout=delay, return_when=asyncio.FIRST_COMPLETED)
    token.cancel()
    if not first.task.done() and not first.first_token.is_set():
        assert delay is not None  # (without one the wait ends only with a token or the attempt's end)
        record = await _stop(first)  # no first token at the delay: abandoned
        if record is not None:
            emit(_abandoned(record, f"failover: no first token within {delay * 1000:g} ms"))
    else:
        record = await first.task
        if record.ok or not retryable(record.error_kind):
            emit(record)
            return record
        emit(replace(record, retried=True))
    second = await launch(replace(job, endpoint=backup), 1).task
    emit(second)
    return second


async def _first_answer(running: list[Attempt], emit: Emit, why: str) -> RequestRecord:
    """The first successful record of ``running``; the rest cancelled (or, failed, marked retried)."""
    pending = {a.task for a in running}
    by_task = {a.task: a for a in running}
    last: RequestRecord | None = None
    while pending:
        done, pending = await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
        for task in _in_order(done, running):
            record = task.result()
            if record.ok:
                for other in _in_order(pending, running):
                    stopped = await _stop(by_task[other])
                    if stopped is not None:
                        emit(_abandoned(stopped, why))
                emit(record)
                return record
            if pending:
                emit(replace(record, retried=True))  # another attempt may still answer
            last = record
    assert last is not None
    emit(last)
    return last


def _in_order(tasks: Iterable[asyncio.Task[RequestRecord]], running: list[Attempt]) -> list:
    chosen = set(tasks)
    return [a.task for a in running if a.task in chosen]


async def _stop(a: Attempt) -> RequestRecord | None:
    """Cancel an attempt and wait for its record (None: it was cancelled before it could leave one)."""
    a.task.cancel()
    try:
        return await a.task
    except CallCancelled as cancelled:
        return cancelled.record
    except asyncio.CancelledError:
        return None


def _abandoned(record: RequestRecord, why: str) -> RequestRecord:
    if record.ok:  # it answered in the same instant: kept as it is, not the outcome
        return replace(record, retried=True)
    return replace(record, error_kind=Failure.ABANDONED, error=why, retried=True)
