"""``inspect/context.py`` at its unit seam: which answers are refusals for length, and a wire that
times out or a clock past the budget (the real servers are in
tests/integration/inspect/test_inspect_context.py)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lossless.client.wire import Reply
from lossless.inspect.context import ContextLimit, measure, outcome


def ok(tokens: int | None) -> Reply:
    return Reply(200, 0.01, usage=None if tokens is None else {"prompt_tokens": tokens})


@pytest.mark.parametrize(
    ("reply", "kind"),
    [
        (ok(120), "accepted"),
        (ok(None), "unclear"),  # answered, uncounted: nothing to place
        (Reply(400, 0.0, error="This model's maximum context length is 4096 tokens"), "refused"),
        (Reply(400, 0.0, error="the request exceeds the available context size"), "refused"),  # llama.cpp
        (Reply(422, 0.0, error="`inputs` tokens + `max_new_tokens` must be <= 2048"), "refused"),  # TGI
        (Reply(400, 0.0, error="temperature must be positive"), "unclear"),
        (Reply(413, 0.0, error="request entity too long"), "unclear"),  # the body's size, not tokens
        (Reply(429, 0.0, error="too many tokens per minute"), "unclear"),  # a rate limit
        (Reply(500, 0.0, error="context overflow in worker"), "unclear"),  # 5xx: never a limit
        (Reply(0, 60.0, error="no complete answer within 60 s"), "unclear"),  # a time-out
    ],
)
def test_what_counts_as_a_refusal_for_length(reply: Reply, kind: str) -> None:
    assert outcome(reply)[0] == kind


class FakeWire:
    """Counts words as tokens (+5) up to ``limit``; past ``hang`` tokens (and within it), a time-out."""

    def __init__(self, limit: int, hang: int | None = None) -> None:
        self.limit, self.hang, self.sent = limit, hang, 0

    async def post(self, body: dict[str, Any]) -> Reply:
        self.sent += 1
        tokens = 5 + len(body["messages"][0]["content"].split())
        if tokens + 1 > self.limit:  # refused before any prefill, as servers do
            return Reply(400, 0.0, error="maximum context length exceeded")
        if self.hang is not None and tokens > self.hang:
            return Reply(0, 120.0, error="no complete answer within 120 s")
        return ok(tokens)


def run(wire: FakeWire, declared: int | None, **kw: Any) -> ContextLimit:
    return asyncio.run(measure(wire, declared, **kw))  # type: ignore[arg-type]


def test_a_time_out_just_over_the_declaration_is_not_a_confirmation() -> None:
    got = run(FakeWire(10**6, hang=8192), 8192)
    assert got.status == "not measured" and got.limit is None and "time-out" in got.note
    assert got.requests == 3  # 2 calibrating, just over


def test_a_time_out_just_under_keeps_the_refusal_over() -> None:
    got = run(FakeWire(8192, hang=8000), 8192)  # a slow prefill: refused fast, long prompts time out
    assert (got.status, got.limit, got.refused) == ("refused at 8,256", None, 8256)
    assert "declared 8,192" in got.note and "time-out" in got.note and got.requests == 4


def test_a_time_out_in_the_search_keeps_the_bounds_found() -> None:
    got = run(FakeWire(100_000, hang=5000), None)
    assert (got.status, got.accepted, got.refused) == ("accepted at 4,096", 4096, None)


def test_the_time_budget_stops_the_search() -> None:
    ticks = iter(range(0, 1000, 10))  # every reading of the clock: 10 s later
    got = run(FakeWire(3000), None, budget_s=35, clock=lambda: next(ticks))
    assert got.status.startswith(("refused at", "accepted at")) and "the budget: 35 s" in got.note


def test_the_cap_ends_a_search_that_is_never_refused() -> None:
    got = run(FakeWire(10**9), None, cap=20_000)
    assert got.status == "accepted at 20,000" and got.refused is None and got.limit is None
    assert got.requests == 2 + 6  # 1k, 2k, 4k, 8k, 16k, then the cap itself
