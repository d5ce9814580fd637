"""Send the arms' rounds to one endpoint (``arms``), one streamed request at a time, and read its
speculative-decoding counters from ``/metrics`` before and after.

The requests go through bench's own client (``client.call``: a timestamp per SSE event, a record per
request), so the timings mean what bench's do. Rounds go on until ``settled`` says the records decide
every question, or ``max_rounds`` or ``budget_s`` is reached, whichever comes first; never fewer than
``min_rounds``. One unmeasured request first: a server's first forward passes are slow (allocation,
kernel selection), and would fall on one arm only.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from lossless.client.apis import session as api_session
from lossless.client.call import CallOptions, Job, call
from lossless.client.endpoints import Endpoint
from lossless.client.prometheus import scrape
from lossless.inspect.arms import ARMS, Arm, order, prompt
from lossless.records import RequestRecord

Settled = Callable[[Sequence[RequestRecord]], bool]


@dataclass(frozen=True)
class Plan:
    """How much to send (``InspectOptions`` holds the defaults)."""

    max_tokens: int  # per request
    min_rounds: int  # rounds of the four arms before ``settled`` is asked
    max_rounds: int
    budget_s: float  # no round starts after this many seconds
    timeout_s: float = 60.0  # one request, start to end
    connect_timeout_s: float = 10.0
    api: str = "chat"  # chat, responses or messages: the API the requests are made in


@dataclass(frozen=True)
class Collected:
    records: tuple[RequestRecord, ...]  # the measured requests, in the order they were sent
    rounds: int
    stopped: str  # "settled", "max rounds" or "time budget"
    wall_s: float
    counters_before: dict[str, float] | None  # /metrics' speculative counters (None: no /metrics)
    counters_after: dict[str, float] | None


async def collect(
    endpoint: Endpoint,
    plan: Plan,
    settled: Settled,
    clock: Callable[[], int] = time.perf_counter_ns,
) -> Collected:
    session = api_session(endpoint, plan.api, plan.connect_timeout_s)
    opts = CallOptions(plan.api, True, plan.max_tokens, plan.timeout_s, plan.timeout_s)
    start = clock()
    records: list[RequestRecord] = []
    stopped = "max rounds"
    try:
        before = await scrape(session, endpoint.base_url)
        await call(session, _job(endpoint, ARMS[0], 0, clock(), warmup=True), 0, opts, clock)
        for round_ in range(plan.max_rounds):
            for arm in order(round_):
                records.append(await call(session, _job(endpoint, arm, round_, clock()), 0, opts, clock))
            if round_ + 1 >= plan.min_rounds and settled(records):
                stopped = "settled"
                break
            if (clock() - start) / 1e9 > plan.budget_s:
                stopped = "time budget"
                break
        after = await scrape(session, endpoint.base_url)
    finally:
        await session.aclose()
    rounds = 1 + max((r.request_index for r in records), default=-1)
    return Collected(tuple(records), rounds, stopped, (clock() - start) / 1e9, before, after)


def _job(endpoint: Endpoint, arm: Arm, round_: int, now: int, warmup: bool = False) -> Job:
    # the arm's temperature first: a body the user gave the endpoint wins, as it does in bench
    sampled = replace(endpoint, body={"temperature": arm.temperature, **endpoint.body})
    return Job(sampled, prompt(arm, round_), round_, "c=1", warmup, now)
