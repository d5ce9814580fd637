"""Schedule requests against endpoints: load levels, warm-up, time-outs, retries, cancellation, JSONL.

Concurrency is per endpoint: with ``--concurrency 4`` each endpoint has 4 requests in flight, and all
endpoints run side by side over the same prompts, so drift over time (a neighbour's load, a network
hiccup) lands on all of them. In open loop every arrival goes to every endpoint, in an order that
alternates from one arrival to the next, so no endpoint is always first.
"""

from __future__ import annotations

import asyncio
import gc
import random
import socket
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from lossless.bench.policies import Attempt, Policy, execute
from lossless.bench.workload.arrivals import gamma, poisson
from lossless.bench.workload.conversation import Conversation, source
from lossless.bench.workload.synthetic import Synthetic, synthetic_prompts
from lossless.bench.workload.trace import replay
from lossless.client.apis import session as api_session
from lossless.client.call import CallCancelled, CallOptions, Job, call, unfinished
from lossless.client.endpoints import Endpoint
from lossless.client.http import Session
from lossless.client.prometheus import scrape_all
from lossless.client.prompt import Prompt
from lossless.records import ClientLoad, Failure, RequestRecord, retryable
from lossless.rundir import JsonlWriter

Clock = Callable[[], int]
OnRecord = Callable[[RequestRecord], None]  # called on the event loop: must return at once
HOST = socket.gethostname()


@dataclass(frozen=True)
class LoadLevel:
    concurrency: int | None = None  # closed loop: requests in flight per endpoint
    rate: float | None = None  # open loop: arrivals per second
    burstiness: float = 1.0  # gamma shape for open loop; 1 = Poisson
    replay: float | None = None  # a trace's own arrival times, this many times faster

    @property
    def label(self) -> str:
        if self.replay is not None:
            return f"replay={self.replay:g}x"
        if self.rate is not None:
            suffix = "" if self.burstiness == 1.0 else f",b={self.burstiness:g}"
            return f"rate={self.rate:g}{suffix}"
        return f"c={self.concurrency}"


@dataclass(frozen=True)
class BenchConfig:
    endpoints: tuple[Endpoint, ...]
    call: CallOptions
    suite: str = "short"  # workload suite name or file:PATH
    loads: tuple[LoadLevel, ...] = (LoadLevel(concurrency=1),)  # run one after another (a sweep)
    requests: int | None = 20  # measured requests per endpoint and load level
    duration: float | None = None  # or: stop dispatching after this many seconds
    warmup: int = 0  # requests per endpoint and level run first and marked warmup
    retries: int = 0  # extra attempts after a retryable failure
    connect_timeout: float = 10.0
    max_in_flight: int = 1024  # open loop: arrivals beyond this wait (and show as queue delay)
    seed: int = 0
    records_path: Path | None = None  # records.jsonl, one flushed line per finished attempt
    scrape_metrics: bool = True  # read /metrics before and after each level
    # closed loop, one request at a time over all endpoints, taking turns to go first (prompt i to each,
    # then prompt i+1): endpoints sharing one machine (demo: two servers, one CPU) never slow each other
    serial: bool = False
    # this process's share of the load when several processes make it (bench --workers / --ray): of each
    # level's concurrency the slots worker, worker + workers, ...; of an open loop's arrivals (drawn from
    # the same seed in every worker) every workers-th, starting at worker
    worker: int = 0
    workers: int = 1
    start_ns: int | None = None  # on this process's clock: the open loop's time zero, shared by the workers
    synthetic: Synthetic | None = None  # token-exact prompts (--input-tokens) instead of ``suite``
    # --hedge-after, --failover: several attempts of one request at once
    policy: Policy = field(default_factory=Policy)
    # bench --resume: (endpoint, load label, request index) that the killed run finished: not sent again
    done: frozenset[tuple[str, str, int]] = frozenset()

    def share(self, concurrency: int) -> int:
        """How many of a closed loop's ``concurrency`` slots this worker runs (the remainder spread)."""
        return concurrency // self.workers + (1 if self.worker < concurrency % self.workers else 0)

    def owns(self, i: int, concurrency: int | None) -> bool:
        """Whether request ``i`` is this worker's: closed loop, by the slot it falls in (so a worker's share
        of requests follows its share of the concurrency); open loop, every workers-th arrival."""
        if self.workers == 1:
            return True
        slot = i if concurrency is None else i % concurrency
        return slot % self.workers == self.worker


@dataclass
class RunResult:
    records: list[RequestRecord] = field(default_factory=list)
    # (endpoint name, load label) -> (counters before, counters after), when /metrics answered
    spec: dict[tuple[str, str], tuple[dict[str, float], dict[str, float]]] = field(default_factory=dict)
    interrupted: bool = False
    clients: list[ClientLoad] = field(default_factory=list)  # each load process's CPU per level
    notes: list[str] = field(default_factory=list)  # what went wrong with the run itself (a worker died)


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
        self, cfg: BenchConfig, clock: Clock, result: RunResult, on_record: OnRecord | None,
        on_start: OnRecord | None = None,
    ) -> None:  # fmt: skip
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
        return replace(record, worker=self.cfg.worker, host=HOST, wall_anchor_ns=self.wall_anchor_ns)

    def emit(self, record: RequestRecord) -> None:
        record = self.stamped(record)
        self.result.records.append(record)
        if self.writer:
            self.writer.write(record)
        if self.on_record:
            self.on_record(record)

    async def request(self, endpoint: Endpoint, i: int, level: LoadLevel, scheduled_ns: int) -> None:
        """Request ``i`` of the workload: one prompt's attempts, or one conversation's turns in order."""
        item, warmup = self.pool[i], i < self.cfg.warmup
        if (endpoint.name, level.label, i) in self.cfg.done:
            return  # finished by the run this one resumes
        if isinstance(item, Prompt):
            await self.attempts(Job(endpoint, item, i, level.label, warmup, scheduled_ns))
            return
        history: list[tuple[str, str]] = []
        for turn, said in enumerate(item.turns):
            job = Job(endpoint, item.prompt(turn, history), i, level.label, warmup,
                      scheduled_ns if turn == 0 else self.clock(), item.id, turn + 1)  # fmt: skip
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
            return await execute(self.cfg.policy, job, self.start, self.emit)
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
            await asyncio.sleep(_backoff(record, attempt, self.rng))
        raise AssertionError("unreachable: the last attempt is never retried")

    async def closed(self, level: LoadLevel) -> None:
        assert level.concurrency is not None
        cfg = self.cfg
        phases: list[tuple[int, int | None]] = [(0, cfg.warmup)] if cfg.warmup else []
        phases.append((cfg.warmup, None if cfg.requests is None else cfg.warmup + cfg.requests))
        for first, stop in phases:
            deadline = None if stop is not None and stop <= cfg.warmup else self._deadline()
            if cfg.serial:
                await self._serial(first, stop, level, deadline)
                continue
            async with asyncio.TaskGroup() as tg:
                for endpoint in cfg.endpoints:
                    indices = range(first, stop if stop is not None else 1 << 62)
                    counter = (i for i in indices if cfg.owns(i, level.concurrency))
                    for _ in range(cfg.share(level.concurrency)):
                        tg.create_task(self._worker(endpoint, counter, level, deadline))

    async def _worker(
        self, endpoint: Endpoint, counter: Iterator[int], level: LoadLevel, deadline: float | None
    ) -> None:
        for i in counter:
            if deadline is not None and time.monotonic() >= deadline:
                return
            await self.request(endpoint, i, level, self.clock())

    async def _serial(self, first: int, stop: int | None, level: LoadLevel, deadline: float | None) -> None:
        n = len(self.cfg.endpoints)
        for i in range(first, stop if stop is not None else 1 << 62):
            if deadline is not None and time.monotonic() >= deadline:
                return
            for k in range(n):
                endpoint = self.cfg.endpoints[(i + k) % n]  # rotate who goes first
                await self.request(endpoint, i, level, self.clock())

    def _deadline(self) -> float | None:
        return None if self.cfg.duration is None else time.monotonic() + self.cfg.duration

    def arrivals(self, level: LoadLevel) -> Iterator[float]:
        """Send times in seconds from the level's start: a trace's, sped up, or drawn at ``level.rate``."""
        if level.replay is not None:
            return iter([t / level.replay for t in self.offsets])
        assert level.rate is not None
        rng = random.Random(self.cfg.seed + 2)
        return (
            poisson(level.rate, rng) if level.burstiness == 1.0 else gamma(level.rate, level.burstiness, rng)
        )

    async def open(self, level: LoadLevel) -> None:
        cfg = self.cfg
        gaps = self.arrivals(level)
        total = None if cfg.requests is None else cfg.warmup + cfg.requests
        slots = asyncio.Semaphore(max(1, cfg.max_in_flight // cfg.workers))
        start_ns, deadline = cfg.start_ns if cfg.start_ns is not None else self.clock(), self._deadline()
        n = len(cfg.endpoints)
        async with asyncio.TaskGroup() as tg:
            for i, offset in enumerate(gaps):
                if (total is not None and i >= total) or (
                    deadline is not None and time.monotonic() >= deadline
                ):
                    break
                scheduled = start_ns + int(offset * 1e9)
                wait = (scheduled - self.clock()) / 1e9
                if deadline is not None and time.monotonic() + wait >= deadline:
                    break  # the next arrival falls after --duration: do not sleep until it
                if not cfg.owns(i, None):
                    continue
                await asyncio.sleep(max(0.0, wait))
                for k in range(n):
                    endpoint = cfg.endpoints[(i + k) % n]  # rotate who goes first
                    tg.create_task(self._limited(slots, endpoint, i, level, scheduled))

    async def _limited(
        self, slots: asyncio.Semaphore, endpoint: Endpoint, i: int, level: LoadLevel, scheduled_ns: int
    ) -> None:
        async with slots:
            await self.request(endpoint, i, level, scheduled_ns)

    async def scrape_all(self) -> dict[str, dict[str, float]]:
        return await _scrape(self.sessions, self.cfg.endpoints) if self.cfg.scrape_metrics else {}

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
    for level in cfg.loads:
        before = await run.scrape_all()
        # the event loop's own thread: not an embedded server answering in this process, nor a progress bar
        cpu, wall = time.thread_time(), time.monotonic()
        try:
            await (run.closed(level) if level.concurrency is not None else run.open(level))
        finally:
            cpu, wall = time.thread_time() - cpu, time.monotonic() - wall
            result.clients.append(ClientLoad(cfg.worker, HOST, level.label, cpu, wall))
        after = await run.scrape_all()
        for name, counters in after.items():
            if name in before:
                result.spec[(name, level.label)] = (before[name], counters)


async def _scrape(
    sessions: dict[str, Session], endpoints: tuple[Endpoint, ...]
) -> dict[str, dict[str, float]]:
    found = {}
    for e in endpoints:
        counters = await scrape_all(sessions[e.name], e.base_url)
        if counters:
            found[e.name] = counters
    return found


def scrape_once(cfg: BenchConfig) -> dict[str, dict[str, float]]:
    """Every endpoint's /metrics counters, read now on sessions of its own (a driver between levels)."""

    async def read() -> dict[str, dict[str, float]]:
        sessions = {e.name: api_session(e, cfg.call.api, cfg.connect_timeout) for e in cfg.endpoints}
        try:
            return await _scrape(sessions, cfg.endpoints)
        finally:
            for session in sessions.values():
                await session.aclose()

    return asyncio.run(read()) if cfg.scrape_metrics else {}


def loop_factory(name: str = "auto") -> tuple[str, Callable[[], asyncio.AbstractEventLoop] | None]:
    """The event loop to run a benchmark on: uvloop where installed ("auto"), else asyncio's own.

    uvloop halves the client's CPU per streamed event (measured 35 -> 17 us with aiohttp at 256 streams)
    and with it the time events wait for the loop; the summary records which loop measured.
    """
    if name in ("auto", "uvloop"):
        try:
            import uvloop
        except ImportError:
            if name == "uvloop":
                raise
        else:
            return "uvloop", uvloop.new_event_loop
    return "asyncio", None


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep the objects that exist before a run out of garbage collections until it ends.

    A full collection walks every object the process holds (aiohttp, numpy, rich...): measured at 13 ms
    in the middle of 256 streams, and every stream's next timestamp is that much late. What exists before
    the run is never the run's garbage, so only the run's own objects are walked.
    """
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _backoff(record: RequestRecord, attempt: int, rng: random.Random) -> float:
    for name, value in record.server_headers:
        if name == "retry-after":
            try:
                return min(60.0, max(0.0, float(value)))
            except ValueError:
                break  # an HTTP date: fall back to exponential backoff
    return min(8.0, 0.5 * 2**attempt) * (0.5 + rng.random())
