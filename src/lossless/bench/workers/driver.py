"""The driver: deals each load level to the workers, gathers their records, keeps the run whole.

Used by ``bench.measure`` in place of the one-process run when ``--workers`` or ``--ray`` is given; it
returns the same ``RunResult``, so summaries and reports do not know how many processes measured.
"""

from __future__ import annotations

import os
import signal
import time
from contextlib import suppress
from dataclasses import dataclass, field, replace
from typing import Any

from lossless.bench.config import BenchConfig, LoadLevel, RunResult
from lossless.bench.loop import OnRecord
from lossless.bench.runtime import scrape_once
from lossless.bench.workers import transport
from lossless.bench.workers.transport import Pool
from lossless.errors import EndpointError
from lossless.records import RequestRecord
from lossless.rundir import JsonlWriter

PINGS = 8  # round trips per worker and level; the fastest one measures the clock offset
START_TIMEOUT_S = 120.0  # a spawned interpreter importing lossless, or a Ray task being scheduled
STOP_GRACE_S = 10.0  # after Ctrl-C: time for workers to send what finished


class WorkerFailed(EndpointError):
    """A worker reported an error it could not measure through (the message names the worker)."""


@dataclass
class _Worker:
    index: int
    host: str = "?"
    offset_ns: int = 0  # driver's wall clock minus this worker's
    offset_err_ns: int = 0
    in_flight: dict[tuple[str, str, int, int | None, int], RequestRecord] = field(default_factory=dict)
    dead: bool = False
    done: bool = False  # with the current level


def run_on_workers(
    config: BenchConfig, workers: int | None, ray_address: str | None, on_record: OnRecord | None
) -> RunResult:
    """Run ``config``'s levels on ``workers`` processes (local, or Ray tasks at ``ray_address``)."""
    result = RunResult()
    signals = _Signals()
    with signals:
        pool = transport.start(workers, ray_address)
        writer = JsonlWriter(config.records_path) if config.records_path else None
        driver = _Driver(config, pool, result, writer, on_record, signals)
        try:
            driver.wait_for_hellos()
            for level in config.loads:
                driver.level(level)
                if driver.all_dead():
                    break
        except _Stop:
            result.interrupted = True
            driver.stop(grace=STOP_GRACE_S)
        finally:
            driver.stop(grace=0.0)
            pool.close()
            if writer is not None:
                writer.close()
    return result


class _Stop(Exception):
    """Ctrl-C or SIGTERM, raised by the driver itself between messages (never inside a queue read)."""


class _Signals:
    """Ctrl-C (to the whole process group, as a terminal sends it) and SIGTERM (``timeout``, ``docker
    stop``) only set a flag here: a KeyboardInterrupt raised inside a queue read would cut a message in
    half and leave the pipe unreadable. A second signal cuts the wait for the workers' last records."""

    def __init__(self) -> None:
        self.count = 0
        self._previous: dict[int, Any] = {}

    def _handle(self, signum: int, frame: object) -> None:
        self.count += 1

    def __enter__(self) -> _Signals:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: signals stay as they are
                break
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)


class _Driver:
    def __init__(
        self,
        config: BenchConfig,
        pool: Pool,
        result: RunResult,
        writer: JsonlWriter | None,
        on_record: OnRecord | None,
        signals: _Signals,
    ) -> None:
        self.config, self.pool, self.result, self.writer, self.on_record = (
            config,
            pool,
            result,
            writer,
            on_record,
        )
        self.workers = [_Worker(h.index) for h in pool.workers]
        self.pongs: dict[tuple[int, int], int] = {}  # (worker, token) -> the worker's wall clock
        self.level_label = ""
        self.signals, self.stopping = signals, False

    def live(self) -> list[_Worker]:
        return [w for w in self.workers if not w.dead]

    def all_dead(self) -> bool:
        return not self.live()

    # --- start, clocks, levels ------------------------------------------------------------------------

    def wait_for_hellos(self) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while any(w.host == "?" for w in self.live()):
            if time.monotonic() > deadline:
                raise WorkerFailed(f"workers did not start within {START_TIMEOUT_S:g} s")
            self.pump(0.2)

    def sync_clocks(self) -> None:
        """NTP's method, driver-initiated: the offset from the round trip with the least delay, its
        uncertainty half that delay (the reply's wall clock is read somewhere inside it)."""
        for w in self.live():
            best: tuple[int, int] | None = None
            for token in range(PINGS):
                t0 = time.time_ns()
                self.pool.workers[w.index].inbox.put(("ping", token))
                while (w.index, token) not in self.pongs and not w.dead:
                    self.pump(0.05)
                t1 = time.time_ns()
                if w.dead:
                    break
                sample = ((t0 + t1) // 2 - self.pongs.pop((w.index, token)), t1 - t0)
                best = sample if best is None or sample[1] < best[1] else best
            if best is not None:
                w.offset_ns, w.offset_err_ns = best[0], (best[1] + 1) // 2

    def level(self, level: LoadLevel) -> None:
        self.sync_clocks()
        self.level_label = level.label
        before = scrape_once(self.config)
        live = self.live()
        lead_ns = 200_000_000 + 4 * max(w.offset_err_ns for w in live)
        start_ns = time.time_ns() + lead_ns
        env = {
            e.api_key_env: os.environ[e.api_key_env]
            for e in self.config.endpoints
            if e.api_key_env and e.api_key_env in os.environ
        }
        for rank, w in enumerate(live):
            share = replace(
                self.config,
                loads=(level,),
                worker=rank,
                workers=len(live),
                records_path=None,
                scrape_metrics=False,
            )
            w.done = False
            self.pool.workers[w.index].inbox.put(("level", (share, start_ns - w.offset_ns, env)))
        while not all(w.done or w.dead for w in live):
            self.pump(0.2)
        after = scrape_once(self.config)
        for name, counters in after.items():
            if name in before:
                self.result.spec[(name, level.label)] = (before[name], counters)

    def stop(self, grace: float) -> None:
        """Tell every live worker to stop; with ``grace``, wait that long for what they finish."""
        for w in self.live():
            with suppress(Exception):  # its queue may be gone with it
                self.pool.workers[w.index].inbox.put(("stop", None))
        self.stopping = True
        deadline, signals = time.monotonic() + grace, self.signals.count
        while grace > 0 and not all(w.done or w.dead for w in self.workers) and time.monotonic() < deadline:
            if self.signals.count > max(signals, 1):  # a second Ctrl-C: do not wait
                break
            self.pump(0.2)
        for w in self.live():
            if w.in_flight and grace > 0:
                self.lost(w, "stopped before it sent this request's end")
            w.done = True

    # --- messages ---------------------------------------------------------------------------------------

    def pump(self, timeout: float) -> None:
        for index, kind, payload in self.pool.receive(timeout):
            self.handle(self.workers[index], kind, payload)
        if self.signals.count and not self.stopping:
            raise _Stop
        for w in self.live():
            if not w.done and not self.pool.workers[w.index].alive():
                self.lost(w, "died")

    def handle(self, w: _Worker, kind: str, payload: Any) -> None:
        if kind == "start":
            w.in_flight[_key(payload)] = payload
        elif kind == "record":
            w.in_flight.pop(_key(payload), None)
            self.emit(w, payload)
        elif kind == "pong":
            self.pongs[(w.index, payload[0])] = payload[1]
        elif kind == "level_done":
            w.done = True
            self.result.clients.extend(replace(c, worker=w.index) for c in payload["clients"])
            self.result.interrupted |= payload["interrupted"]
        elif kind == "hello":
            w.host = payload["host"]
        elif kind == "error":
            raise WorkerFailed(f"worker {w.index} on {w.host}: {payload}")

    def emit(self, w: _Worker, record: RequestRecord) -> None:
        record = replace(
            record, worker=w.index, clock_offset_ns=w.offset_ns, clock_offset_err_ns=w.offset_err_ns
        )
        self.result.records.append(record)
        if self.writer is not None:
            self.writer.write(record)
        if self.on_record is not None:
            self.on_record(record)

    def lost(self, w: _Worker, how: str) -> None:
        """A worker is gone: each attempt it had in flight becomes a ``worker_lost`` record, ended now."""
        name = self.pool.workers[w.index].name
        now_ns = time.time_ns()
        lost = list(w.in_flight.values())
        for r in lost:
            assert r.wall_anchor_ns is not None
            end = max(r.sent_ns, now_ns - w.offset_ns - r.wall_anchor_ns)
            self.emit(
                w,
                replace(r, end_ns=end, error=f"worker {w.index} ({name}) {how} with this request in flight"),
            )
        w.in_flight.clear()
        if how == "died":
            w.dead = True
            self.result.notes.append(
                f"worker {w.index} ({name}, {w.host}) died during {self.level_label}: {len(lost)} requests "
                "in flight recorded as worker_lost; the rest of its share of that level was not sent"
            )


def _key(r: RequestRecord) -> tuple[str, str, int, int | None, int]:
    return (r.endpoint, r.load, r.request_index, r.turn, r.attempt)
