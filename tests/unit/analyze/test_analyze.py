"""Invariants pinned with a scripted clock, and the pure statistics."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import numpy as np
import pytest

from lossless.analyze import Summary, describe, parse_slo, server_times, spec_stats, summarize, timing
from lossless.analyze.server_side import Speculative
from lossless.client.call import CallOptions, Job, call
from lossless.client.endpoints import Endpoint
from lossless.client.http import Connection
from lossless.client.prompt import Prompt
from lossless.errors import UsageError


def sse(obj: object) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def delta(text: str) -> bytes:
    return sse({"choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}]})


USAGE = sse({"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}})
DONE = sse(b"[DONE]")


class FakeResponse:
    status = 200
    headers = (("server-timing", "queue;dur=1.5, infer;dur=20"),)
    connection = Connection("reused")

    def __init__(self, reads: list[bytes]) -> None:
        self.reads = reads

    async def chunks(self) -> AsyncIterator[bytes]:
        for r in self.reads:
            yield r

    async def drain(self) -> None:
        pass


class FakeSession:
    def __init__(self, reads: list[bytes]) -> None:
        self.reads = reads

    @asynccontextmanager
    async def post(self, path: str, body: bytes) -> AsyncIterator[FakeResponse]:
        yield FakeResponse(self.reads)

    def redact(self, text: str) -> str:
        return text


def scripted_clock(times: list[int]) -> Iterator[int]:
    return itertools.chain(times, itertools.repeat(times[-1]))


def run_call(reads: list[bytes], times: list[int]):  # type: ignore[no-untyped-def]
    job = Job(Endpoint("e", "http://x/v1", "m"), Prompt("p", "short", (("user", "hi"),)), 0, "c=1", False, 0)
    clock = scripted_clock(times).__next__
    return asyncio.run(call(FakeSession(reads), job, 0, CallOptions("chat", True, 8, None, None), clock))  # type: ignore[arg-type]


def test_e2e_minus_ttft_is_the_sum_of_gaps_when_done_comes_with_the_last_token() -> None:
    # clock reads: sent, headers, then one per network read
    reads = [delta("a"), delta("b") + delta("c"), delta("d"), delta("e") + USAGE + DONE]
    r = run_call(reads, [1_000_000, 3_000_000, 10_000_000, 17_000_000, 30_000_000, 41_000_000])
    t = timing(r)
    assert t.ttft == 9.0 and t.ttfb == 2.0 and t.e2e == 40.0
    assert t.e2e - t.ttft == pytest.approx(sum(t.gaps))
    assert len(t.gaps) == 4  # events in one read share its time: a zero gap, not a lost one
    # TPOT: (last token - first token) / (N_out - 1) with N_out from usage
    assert r.n_out == 5 and t.tpot == pytest.approx((41 - 10) / 4)


def test_a_trailing_usage_chunk_does_not_extend_the_last_token_time() -> None:
    reads = [delta("a"), delta("b"), USAGE, DONE]
    r = run_call(reads, [0, 1_000_000, 5_000_000, 8_000_000, 20_000_000, 21_000_000])
    t = timing(r)
    assert r.event_kinds == "ccu"
    assert t.ttft == 5.0 and t.gaps == (3.0,) and t.e2e == 21.0  # end = the read holding [DONE]
    assert t.tpot == pytest.approx(3.0 / 4)


def test_role_only_first_chunk_is_not_the_first_token() -> None:
    role = sse({"choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]})
    r = run_call([role, delta("a"), DONE], [0, 1_000_000, 2_000_000, 6_000_000, 7_000_000])
    assert timing(r).ttft == 6.0 and r.event_kinds == "nc"


def test_describe_and_bootstrap() -> None:
    x = np.arange(1, 101, dtype=float)
    d = describe(x)
    assert d.n == 100 and d.p50 == 50.5 and d.max == 100 and (d.get("p99.9") or 0) <= 100
    assert d.cv == pytest.approx(x.std(ddof=1) / x.mean())
    lo, hi = d.ci95["p50"]
    assert lo < 50.5 < hi and hi - lo < 25
    for stat in ("p90", "p99"):  # the tails get intervals too, around their point estimates
        lo, hi = d.ci95[stat]
        assert lo <= (d.get(stat) or 0) <= hi and lo < hi
    assert d.ci95["p99"][0] > d.ci95["p50"][1]
    assert "p50_ci95" in d.as_dict() and "p50_ci95" not in describe(x, ci=False).as_dict()
    assert describe([]).as_dict() == {"n": 0}


def test_bootstrap_of_many_values_stays_in_bounded_memory() -> None:
    d = describe(np.random.default_rng(1).exponential(size=50_000))
    assert d.ci95["p99"][0] < (d.p99 or 0) < d.ci95["p99"][1]


def test_comparison_ratios_of_medians_and_tails() -> None:
    ok = run_call([delta("a"), delta("b"), USAGE + DONE], [0, 1, 1_000_000, 11_000_000])
    fast = [ok.__class__(**{**ok.__dict__, "request_index": i}) for i in range(20)]
    slow_events = (1_000_000, 41_000_000, 41_000_000)
    slow = [
        ok.__class__(**{**ok.__dict__, "endpoint": "b", "event_ns": slow_events, "end_ns": 41_000_000})
    ] * 20
    s = summarize(fast + slow, {"e": (None, None), "b": (None, None)})
    compared = {c.stat: c for c in s.comparisons if c.metric == "output_tps"}
    assert set(compared) == {"p50", "p90", "p99"}
    for c in compared.values():
        assert c.ratio == pytest.approx(0.25) and c.ci95[0] <= 0.25 <= c.ci95[1]
    assert "b's p50 output speed is 0.25x e's" in compared["p50"].text


def test_classes_get_the_same_metric_objects() -> None:
    ok = run_call([delta("a"), delta("b"), USAGE + DONE], [0, 1, 1_000_000, 11_000_000])
    short = [ok.__class__(**{**ok.__dict__, "request_index": i}) for i in range(4)]
    long = [ok.__class__(**{**ok.__dict__, "prompt_class": "long", "end_ns": 99_000_000})] * 2
    (entry,) = summarize(short + long, {"e": (None, None)}).endpoints
    assert list(entry.classes) == ["short", "long"]
    assert entry.classes["short"].requests.ok == 4
    assert entry.classes["long"].stat("e2e_ms", "p50") == 99
    as_json = entry.as_dict()
    of_the_endpoint = {
        "name",
        "load",
        "speculative",
        "server_metrics",
        "classes",
        "saturation",
        "probes",
        "repeats",
    }
    assert set(as_json["classes"]["long"]) == set(as_json) - of_the_endpoint
    assert entry.overall.metrics["e2e_ms"].n == 6


def test_parse_slo() -> None:
    assert parse_slo("ttft=500, tpot=50ms,e2e=5s") == {"ttft": 500.0, "tpot": 50.0, "e2e": 5000.0}
    for bad in ("ttft", "speed=3", "ttft=-1", "e2e=5min"):
        with pytest.raises(UsageError):
            parse_slo(bad)


def test_server_time_headers() -> None:
    parsed = server_times(
        [("x-envoy-upstream-service-time", "12"), ("server-timing", "queue;dur=1.5, infer;desc=x;dur=20")]
    )
    assert parsed == {
        "x-envoy-upstream-service-time": 12.0,
        "server-timing:queue": 1.5,
        "server-timing:infer": 20.0,
    }


def test_spec_stats_ours_and_missing() -> None:
    before = {
        "lossless_spec_drafted_tokens_total": 10.0,
        "lossless_spec_accepted_tokens_total": 5.0,
        "lossless_spec_steps_total": 4.0,
    }
    after = {k: v * 3 for k, v in before.items()}
    stats = spec_stats(before, after)
    assert stats == Speculative(
        drafted_tokens=20.0, accepted_tokens=10.0, acceptance_rate=0.5, mean_accepted_length=1 + 10 / 8
    )
    assert spec_stats({}, {}) is None


def test_summary_reads_back_from_its_json_equal() -> None:
    """summary.json -> Summary.from_dict -> the same Summary, and the same JSON again."""
    ok = run_call([delta("a"), delta("b"), USAGE + DONE], [0, 1_000_000, 1_000_000, 11_000_000])
    classes = ("short", "long") * 4
    fast = [
        ok.__class__(**{**ok.__dict__, "request_index": i, "prompt_class": c}) for i, c in enumerate(classes)
    ]
    slow = [ok.__class__(**{**r.__dict__, "endpoint": "b", "end_ns": 41_000_000}) for r in fast]
    s = summarize(fast + slow, {"e": (1.0, 2.0), "b": (None, None)}, slo={"ttft": 5.0}, class_seed=0)
    as_json = json.loads(json.dumps(s.as_dict()))
    assert Summary.from_dict(as_json) == s and Summary.from_dict(as_json).as_dict() == s.as_dict()
    assert s.class_comparisons is not None and as_json["class_comparisons"][0]["class"] == "short"
    for broken, why in (({"requests": 1}, "object"), ({"stalls": {"count": "1"}}, "count")):
        entry = {**as_json["endpoints"][0], **broken}
        with pytest.raises(TypeError, match=why):
            Summary.from_dict({**as_json, "endpoints": [entry]})
