"""Schedule requests against endpoints: load levels, warm-up, time-outs, retries, cancellation, JSONL.

Concurrency is per endpoint: with ``--concurrency 4`` each endpoint has 4 requests in flight, and all
endpoints run side by side over the same prompts, so drift over time (a neighbour's load, a network
hiccup) lands on all of them. In open loop every arrival goes to every endpoint, in an order that
alternates from one arrival to the next, so no endpoint is always first.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import socket
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import replace

from lossless.bench.config import BenchConfig, LoadLevel, RunResult
from lossless.bench.phases import COOLDOWN, WARMUP, Phases, ramp_delay
from lossless.bench.policies import Attempt, send_with_policy
from lossless.bench.runtime import backoff, frozen_heap, scrape_apart
from lossless.bench.workload.arrivals import gamma, poisson, ramped
from lossless.bench.workload.conversation import Conversation, source
from lossless.bench.workload.synthetic import synthetic_prompts
from lossless.bench.workload.trace import replay
from lossless.client.apis import session as api_session
from lossless.client.call import CallCancelled, Job, call, unfinished
from lossless.client.endpoints import Endpoint
from lossless.client.prompt import Prompt
from lossless.records import ClientLoad, Failure, RequestRecord, retryable
from lossless.rundir import JsonlWriter

Clock = Callable[[], int]
OnRecord = Callable[[RequestRecord], None]  # called on the event loop: must return at once
HOST = socket.gethostname()
IDLE = "idle"  # the load label of probes sent before any load: what a lone user meets on an idle server
# A probe: a short, fixed request (the same every time, so that loaded and idle ones compare), cut at
# PROBE_TOKENS tokens: a count to 20 is longer than that, so most probes stream exactly that many
PROBE = Prompt("probe", "probe", (("user", "Count from 1 to 20, separated by commas."),), max_tokens=24)


class _PromptPool:
    """Prompts (or conversations) drawn once and shared, so every endpoint gets prompt i as its i-th."""

    def __init__(self, source: Iterator[Prompt] | Iterator[Conversation]) -> None:
        self._source: Iterator[Prompt | Conversation] = source
        self._drawn: list[Prompt | Conversation] = []

    def __getitem__(self, i: int) -> Prompt | Conversation:
        while len(self._drawn) <= i:
            self._drawn.append(next(self._source))
        return self._drawn[i]


class _Run:
    def __init__(
        self,
        cfg: BenchConfig,
        clock: Clock,
        result: RunResult,
        on_record: OnRecord | None,
        on_start: OnRecord | None = None,
    ) -> None:
        self.cfg, self.clock, self.result, self.on_record = cfg, clock, result, on_record
        self.on_start = on_start  # gets, as each attempt is sent, the record it would leave if lost
        self.wall_anchor_ns = time.time_ns() - clock()  # clock() + this = Unix time, in ns
        rng = random.Random(cfg.seed)
        self.offsets: list[float] = []  # a trace's arrival times, in seconds from its first
        if cfg.synthetic is not None and cfg.synthetic.trace is not None:
            arrivals = replay(cfg.synthetic, rng)
            self.offsets = [t for t, _ in arrivals]
            drawn: Iterator[Prompt] | Iterator[Conversation] = iter([p for _, p in arrivals])
        elif cfg.synthetic is not None:
            drawn = synthetic_prompts(cfg.synthetic, rng)
        else:
            drawn = source(cfg.suite, rng)
        self.pool = _PromptPool(drawn)
        self.rng = random.Random(cfg.seed + 1)  # retry jitter
        self.writer = JsonlWriter(cfg.records_path) if cfg.records_path else None
        every = cfg.policy.with_backup(cfg.endpoints)
        self.sessions = {e.name: api_session(e, cfg.call.api, cfg.connect_timeout) for e in every}

    def stamped(self, record: RequestRecord) -> RequestRecord:
        return replace(
            record,
            worker=self.cfg.worker,
            host=HOST,
            wall_anchor_ns=self.wall_anchor_ns,
            repeat=self.cfg.repeat,
        )

    def emit(self, record: RequestRecord) -> None:
        record = self.stamped(record)
        self.result.records.append(record)
        if self.writer:
            self.writer.write(record)
        if self.on_record:
            self.on_record(record)

    async def request(
        self, endpoint: Endpoint, i: int, level: LoadLevel, scheduled_ns: int, phase: str = ""
    ) -> None:
        """Request ``i`` of the workload, in window ``phase`` of its level: one prompt's attempts, or one
        conversation's turns in order."""
        item, warmup, cooldown = self.pool[i], phase == WARMUP, phase == COOLDOWN
        if (endpoint.name, level.label, i) in self.cfg.done:
            return  # finished by the run this one resumes
        if isinstance(item, Prompt):
            await self.attempts(Job(endpoint, item, i, level.label, warmup, scheduled_ns, cooldown=cooldown))
            return
        history: list[tuple[str, str]] = []
        for turn, said in enumerate(item.turns):
            job = Job(
                endpoint,
                item.prompt(turn, history),
                i,
                level.label,
                warmup,
                scheduled_ns if turn == 0 else self.clock(),
                item.id,
                turn + 1,
                cooldown=cooldown,
            )
            record = await self.attempts(job)
            if not record.ok:
                return  # the user gives up: the session ends on its failed turn
            history += [("user", said), ("assistant", record.text)]
            # the user thinks from the answer's end by this run's clock (uvloop's ms timers, on a clock read
            # once per loop turn, woke a sleep of 0.2 s at 0.1998 s: sleep again for what is left)
            think_until = (record.end_ns or self.clock()) + round(item.think_s * 1e9)
            while turn + 1 < len(item.turns) and (left := think_until - self.clock()) > 0:
                await asyncio.sleep(left / 1e9)

    async def send(self, job: Job, attempt: int, first_token: asyncio.Event | None = None) -> RequestRecord:
        if self.on_start is not None:  # the record it leaves if its process is lost (bench --workers)
            lost = unfinished(job, attempt, self.cfg.call, self.clock(), Failure.WORKER_LOST, "worker lost")
            self.on_start(self.stamped(lost))
        session = self.sessions[job.endpoint.name]
        return await call(session, job, attempt, self.cfg.call, self.clock, first_token)

    def start(self, job: Job, attempt: int) -> Attempt:
        """Attempt ``attempt`` of ``job``, sent now, running on its own (a policy's several at once)."""
        first_token = asyncio.Event()
        return Attempt(asyncio.create_task(self.send(job, attempt, first_token)), first_token)

    async def attempts(self, job: Job) -> RequestRecord:
        """Send ``job`` (again after a retryable failure, or as --hedge-after, --failover say): a record."""
        if self.cfg.policy.active:
            return await send_with_policy(self.cfg.policy, job, self.start, self.emit)
        for attempt in range(self.cfg.retries + 1):
            try:
                record = await self.send(job, attempt)
            except CallCancelled as cancelled:
                self.emit(cancelled.record)
                raise
            again = attempt < self.cfg.retries and retryable(record.error_kind)
            self.emit(replace(record, retried=True) if again else record)
            if not again:
                return record
            await asyncio.sleep(backoff(record, attempt, self.rng))
        raise AssertionError("unreachable: the last attempt is never retried")

    def phases(self) -> Phases:
        cfg = self.cfg
        return Phases(cfg.warmup, cfg.requests, cfg.duration, cfg.cooldown)

    def counter(self, level: LoadLevel, start: float) -> Iterator[tuple[int, str]]:
        """A closed loop's requests for one endpoint, in order, each with its window; shared by the
        endpoint's slots, so the windows follow the order requests go out."""
        phases = self.phases()
        for i in itertools.count():
            phase = phases.at(i, time.monotonic() - start)
            if phase is None:
                return
            if self.cfg.owns(i, level.concurrency):
                yield i, phase

    async def closed(self, level: LoadLevel) -> None:
        assert level.concurrency is not None
        cfg, start = self.cfg, time.monotonic()
        if cfg.serial:
            await self._serial(level, start)
            return
        async with asyncio.TaskGroup() as tg:
            for endpoint in cfg.endpoints:
                counter = self.counter(level, start)
                for k in range(cfg.share(level.concurrency)):
                    delay = ramp_delay(cfg.worker + k * cfg.workers, level.concurrency, cfg.ramp)
                    tg.create_task(self._worker(endpoint, counter, level, delay))

    async def _worker(
        self, endpoint: Endpoint, counter: Iterator[tuple[int, str]], level: LoadLevel, delay: float
    ) -> None:
        if delay:
            await asyncio.sleep(delay)  # --ramp: this slot joins later
        for i, phase in counter:
            await self.request(endpoint, i, level, self.clock(), phase)

    async def _serial(self, level: LoadLevel, start: float) -> None:
        n, phases = len(self.cfg.endpoints), self.phases()
        for i in itertools.count():
            phase = phases.at(i, time.monotonic() - start)
            if phase is None:
                return
            for k in range(n):
                endpoint = self.cfg.endpoints[(i + k) % n]  # rotate who goes first
                await self.request(endpoint, i, level, self.clock(), phase)

    def arrivals(self, level: LoadLevel) -> Iterator[float]:
        """Send times in seconds from the level's start: a trace's, sped up, or drawn at ``level.rate``
        (rising over --ramp)."""
        if level.replay is not None:
            return iter([t / level.replay for t in self.offsets])
        assert level.rate is not None
        rng = random.Random(self.cfg.seed + 2)
        drawn = (
            poisson(level.rate, rng) if level.burstiness == 1.0 else gamma(level.rate, level.burstiness, rng)
        )
        return ramped(drawn, self.cfg.ramp) if self.cfg.ramp else drawn

    async def open(self, level: LoadLevel) -> None:
        cfg, phases = self.cfg, self.phases()
        # --max-concurrency: arrivals beyond it wait in the client; the wait is their queue delay
        slots = asyncio.Semaphore(max(1, cfg.max_in_flight // cfg.workers))
        start_ns = cfg.start_ns if cfg.start_ns is not None else self.clock()
        n = len(cfg.endpoints)
        async with asyncio.TaskGroup() as tg:
            for i, offset in enumerate(self.arrivals(level)):
                phase = phases.at(i, offset)  # by the schedule: no arrival is slept for past the level
                if phase is None:
                    break
                if not cfg.owns(i, None):
                    continue
                scheduled = start_ns + int(offset * 1e9)
                await asyncio.sleep(max(0.0, (scheduled - self.clock()) / 1e9))
                for k in range(n):
                    endpoint = cfg.endpoints[(i + k) % n]  # rotate who goes first
                    tg.create_task(self._limited(slots, endpoint, i, level, scheduled, phase))

    async def probes(self, main: Awaitable[None], label: str) -> None:
        """``main`` (a level's load), with --probe-rate's probes beside it on every endpoint, at fixed
        intervals, until the load is done; the probes in flight then finish (worker 0 sends them all)."""
        if not self.cfg.probe_rate or self.cfg.worker != 0:
            await main
            return
        done = asyncio.Event()
        async with asyncio.TaskGroup() as tg:
            for endpoint in self.cfg.endpoints:
                tg.create_task(self._probing(endpoint, label, done))
            try:
                await main
            finally:
                done.set()

    async def _probing(self, endpoint: Endpoint, label: str, done: asyncio.Event) -> None:
        assert self.cfg.probe_rate
        async with asyncio.TaskGroup() as tg:
            for k in itertools.count():
                try:
                    await asyncio.wait_for(done.wait(), 1.0 / self.cfg.probe_rate)
                    return
                except TimeoutError:
                    tg.create_task(self.probe(endpoint, label, k))

    async def probe(self, endpoint: Endpoint, label: str, k: int) -> None:
        await self.attempts(Job(endpoint, PROBE, k, label, False, self.clock(), probe=True))

    async def _limited(
        self,
        slots: asyncio.Semaphore,
        endpoint: Endpoint,
        i: int,
        level: LoadLevel,
        scheduled_ns: int,
        phase: str,
    ) -> None:
        async with slots:
            await self.request(endpoint, i, level, scheduled_ns, phase)

    async def scrape_all(self) -> dict[str, dict[str, float]]:
        return await scrape_apart(self.cfg)

    async def close(self) -> None:
        for s in self.sessions.values():
            await s.aclose()
        if self.writer:
            self.writer.close()


async def run_bench(
    cfg: BenchConfig,
    clock: Clock = time.perf_counter_ns,
    on_record: OnRecord | None = None,
    on_start: OnRecord | None = None,
) -> RunResult:
    """Run every load level in turn; on cancellation (Ctrl-C) keep what finished and return."""
    result = RunResult()
    run = _Run(cfg, clock, result, on_record, on_start)
    try:
        with frozen_heap():
            await _levels(run, cfg, result)
    except asyncio.CancelledError:
        result.interrupted = True
    finally:
        await run.close()
    return result


async def _levels(run: _Run, cfg: BenchConfig, result: RunResult) -> None:
    if cfg.probe_rate and cfg.worker == 0:
        for k in range(cfg.probe_idle):  # one at a time: the server has nothing else to do
            for endpoint in cfg.endpoints:
                await run.probe(endpoint, IDLE, k)
    for level in cfg.loads:
        before = await run.scrape_all()
        # the event loop's own thread: not an embedded server answering in this process, nor a progress bar
        cpu, wall = time.thread_time(), time.monotonic()
        try:
            main = run.closed(level) if level.concurrency is not None else run.open(level)
            await run.probes(main, level.label)
        finally:
            cpu, wall = time.thread_time() - cpu, time.monotonic() - wall
            result.clients.append(ClientLoad(cfg.worker, HOST, level.label, cpu, wall))
        after = await run.scrape_all()
        for name, counters in after.items():
            if name in before:
                result.spec[(name, level.label)] = (before[name], counters)
