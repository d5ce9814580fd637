"""What a bench process runs on: its event loop, a garbage collector kept out of the run, retry backoff,
and the servers' /metrics read between levels (by the loop, or by a driver of workers on its own).
"""

from __future__ import annotations

import asyncio
import gc
import random
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from lossless.client.apis import session as api_session
from lossless.client.endpoints import Endpoint
from lossless.client.http import Session
from lossless.client.prometheus import scrape_all
from lossless.records import RequestRecord

if TYPE_CHECKING:
    from lossless.bench.config import BenchConfig


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


def backoff(record: RequestRecord, attempt: int, rng: random.Random) -> float:
    for name, value in record.server_headers:
        if name == "retry-after":
            try:
                return min(60.0, max(0.0, float(value)))
            except ValueError:
                break  # an HTTP date: fall back to exponential backoff
    return min(8.0, 0.5 * 2**attempt) * (0.5 + rng.random())


# --- a server's /metrics, read between levels -------------------------------------------------------


async def scrape_endpoints(
    sessions: dict[str, Session], endpoints: tuple[Endpoint, ...]
) -> dict[str, dict[str, float]]:
    found = {}
    for e in endpoints:
        counters = await scrape_all(sessions[e.name], e.base_url)
        if counters:
            found[e.name] = counters
    return found


async def scrape_apart(cfg: BenchConfig) -> dict[str, dict[str, float]]:
    """Every endpoint's /metrics counters, read on sessions of their own: the run's sessions open their
    connections with their first request, so its new connection is timed, not a scrape's reused."""
    if not cfg.scrape_metrics:
        return {}
    sessions = {e.name: api_session(e, cfg.call.api, cfg.connect_timeout) for e in cfg.endpoints}
    try:
        return await scrape_endpoints(sessions, cfg.endpoints)
    finally:
        for session in sessions.values():
            await session.aclose()


def scrape_once(cfg: BenchConfig) -> dict[str, dict[str, float]]:
    """``scrape_apart`` now, from outside an event loop (a driver of workers, between levels)."""
    return asyncio.run(scrape_apart(cfg)) if cfg.scrape_metrics else {}
