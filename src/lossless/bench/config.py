"""What a bench run is given and what it gives back: the schedule (``BenchConfig``), its load levels
(``LoadLevel``), and the records and counters of a run (``RunResult``); ``loop`` runs the schedule."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lossless.bench.phases import Window
from lossless.bench.policies import Policy
from lossless.bench.workload.synthetic import Synthetic
from lossless.client.call import CallOptions
from lossless.client.endpoints import Endpoint
from lossless.records import ClientLoad, RequestRecord


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
    # per endpoint and level: unmeasured requests sent first, and after the measured ones (phases.py)
    warmup: Window = field(default_factory=Window)
    cooldown: Window = field(default_factory=Window)
    ramp: float = 0.0  # seconds over which the concurrency or the rate rises linearly to the level's
    retries: int = 0  # extra attempts after a retryable failure
    connect_timeout: float = 10.0
    max_in_flight: int = 1024  # open loop: arrivals beyond this wait (and show as queue delay)
    probe_rate: float | None = None  # light probe requests per second per endpoint beside each level's load
    probe_idle: int = 0  # probes per endpoint sent one at a time before the first level (load "idle")
    repeat: int = 0  # which of bench --repeat's runs this is (stamped on every record)
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
