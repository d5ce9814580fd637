"""The speculation verdict on synthetic streams: plain, n-gram-like and draft-model-like servers, chunked
per verify step (ours, vLLM) or token by token in bursts (llama-cpp-python), under load that drifts from
round to round, which the pairing must cancel."""

from __future__ import annotations

import random

import pytest

from lossless.inspect import speculation as sp
from lossless.inspect.arms import ARMS
from lossless.inspect.collect import Collected
from lossless.inspect.run import _with_counters
from lossless.records import RequestRecord

MS = 1_000_000
PLAIN = {"copy": 1.0, "count": 1.0, "free": 1.0, "free-t1": 1.0}  # tokens per verify step, by arm
NGRAM = {"copy": 3.2, "count": 1.0, "free": 1.0, "free-t1": 1.0}
DRAFT = {"copy": 3.4, "count": 2.8, "free": 1.5, "free-t1": 1.1}


def _stream(
    arm: str,
    round_: int,
    per_step: float,
    rng: random.Random,
    load: float,
    *,
    per_token: bool,
    n: int,
    even: bool = False,
) -> RequestRecord:
    """``n`` tokens, emitted in verify steps of ~``per_step`` tokens; a step over k tokens costs 30 ms x
    (1 + 0.15 k) x ``load`` x noise; ``per_token``: each token its own event, 0.05 ms apart in a step;
    ``even``: re-paced evenly over the step instead (a proxy that hides bursts)."""
    sent = round_ * 60_000 * MS + rng.randrange(1000) * MS
    t = sent + 200 * MS
    events: list[int] = []
    left = n
    while left:
        k = min(left, max(1, round(rng.expovariate(1 / per_step)) if per_step > 1 else 1))
        step = int(30 * MS * (1 + 0.15 * (k - 1)) * load * rng.uniform(0.85, 1.15))
        if even:
            events += [t + step * (j + 1) // k for j in range(k)]
        else:
            events += [t + step + int(j * 0.05 * MS) for j in range(k)] if per_token else [t + step]
        t += step
        left -= k
    return RequestRecord(
        endpoint="e",
        request_index=round_,
        attempt=0,
        prompt_id=f"{arm}-{round_}",
        prompt_class=arm,
        api="chat",
        stream=True,
        warmup=False,
        load="c=1",
        scheduled_ns=sent,
        sent_ns=sent,
        headers_ns=sent + MS,
        event_ns=tuple(events),
        event_kinds="c" * len(events),
        event_tokens=(-1,) * len(events),
        end_ns=events[-1] + MS,
        status=200,
        error_kind=None,
        error=None,
        retried=False,
        n_in=50,
        n_out=n,
        n_out_source="usage",
        n_reasoning=None,
        finish_reason="length",
        text="x",
        reasoning_text="",
        tool_call_chars=0,
        server_headers=(),
    )


def server(
    steps: dict[str, float],
    rounds: int = 6,
    seed: int = 0,
    per_token: bool = False,
    n: int = 48,
    even: bool = False,
) -> list[RequestRecord]:
    rng = random.Random(seed)
    out = []
    for r in range(rounds):
        load = rng.uniform(0.6, 1.8)  # another process comes and goes between rounds, not within one
        out += [
            _stream(a.name, r, steps[a.name], rng, load, per_token=per_token, n=n, even=even) for a in ARMS
        ]
    return out


@pytest.mark.parametrize("per_token", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_a_plain_server_under_drifting_load_is_never_evident(seed: int, per_token: bool) -> None:
    got = sp.judge(server(PLAIN, seed=seed, per_token=per_token))
    assert got.verdict == "not evident", got.note
    assert got.drafter is None and got.accepted_length == pytest.approx(1.0)


@pytest.mark.parametrize("per_token", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_an_ngram_server_speeds_up_copying_only(seed: int, per_token: bool) -> None:
    got = sp.judge(server(NGRAM, seed=seed, per_token=per_token))
    assert got.verdict == "evident"
    assert got.drafter == "n-gram (prompt lookup)", [(r.arm, r.of, r.sped_up) for r in got.ratios]
    copy = next(a for a in got.arms if a.arm == "copy")
    assert copy.tokens_per_burst is not None and copy.tokens_per_burst > 2.0


@pytest.mark.parametrize("per_token", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_a_draft_model_also_speeds_up_text_not_in_the_prompt(seed: int, per_token: bool) -> None:
    got = sp.judge(server(DRAFT, seed=seed, per_token=per_token))
    assert got.verdict == "evident" and got.drafter == "draft model or head"
    assert got.accepted_length is not None and 1.5 < got.accepted_length < 3.5


def test_bursts_token_by_token_are_told_apart_from_steady_gaps() -> None:
    got = sp.judge(server(NGRAM, per_token=True))
    copy = next(a for a in got.arms if a.arm == "copy")
    ref = next(a for a in got.arms if a.arm == "free-t1")
    assert copy.near_zero_gaps is not None and copy.near_zero_gaps > 0.4
    assert ref.near_zero_gaps == 0.0 and ref.tokens_per_burst == pytest.approx(1.0)


def test_a_server_that_sends_four_tokens_a_chunk_whatever_the_text_is_not_evident() -> None:
    # a plain server behind a buffer: bursts everywhere, alike in every arm
    got = sp.judge(server({a.name: 4.0 for a in ARMS}, seed=3))
    assert got.verdict != "evident"


@pytest.mark.parametrize("seed", range(3))
def test_bursts_evened_out_by_a_proxy_leave_the_speed_to_tell(seed: int) -> None:
    got = sp.judge(server(NGRAM, rounds=8, seed=seed, per_token=True, even=True))
    copy = {r.of: r for r in got.ratios if r.arm == "copy"}
    assert copy["tokens per burst"].sped_up != "yes"  # no burst left to see ...
    assert copy["speed"].sped_up == "yes" and got.verdict == "evident"  # ... but copying is 2x as fast


def test_too_few_rounds_cannot_tell() -> None:
    got = sp.judge(server(NGRAM, rounds=2))
    assert got.verdict == "inconclusive" and "cannot tell" in got.note
    assert not sp.settled(server(NGRAM, rounds=2))


def test_failed_and_short_answers_are_left_out() -> None:
    records = server(PLAIN)
    broken = [r if i % 7 else _failed(r) for i, r in enumerate(records)]
    assert sp.judge(broken).evidence["answered"] == len(records) - len(range(0, len(records), 7))
    assert all(q.speed is None for q in sp.requests(server(PLAIN, n=4)))


def _failed(r: RequestRecord) -> RequestRecord:
    from dataclasses import replace

    return replace(r, error_kind="http_500", status=500, n_out=None)


def test_plain_and_ngram_settle_within_the_default_rounds() -> None:
    assert sp.settled(server(PLAIN, rounds=4)) and sp.settled(server(NGRAM, rounds=4))


def _collected(before: dict[str, float] | None, after: dict[str, float] | None) -> Collected:
    return Collected((), 6, "settled", 1.0, before, after)


def test_accepted_drafts_on_the_servers_counters_make_it_evident_and_say_so() -> None:
    behaviour = sp.judge(server(PLAIN, rounds=2))  # inconclusive by timings
    names = (
        "lossless_spec_drafted_tokens_total",
        "lossless_spec_accepted_tokens_total",
        "lossless_spec_verify_steps_total",
    )
    after = dict(zip(names, (90.0, 60.0, 40.0), strict=True))
    got = _with_counters(behaviour, _collected(dict.fromkeys(names, 0.0), after))
    assert got.verdict == "evident" and "counters" in got.note
    assert got.evidence["behaviour"] == "inconclusive"
    assert got.counters == {
        "drafted_tokens": 90,
        "accepted_tokens": 60,
        "acceptance_rate": pytest.approx(2 / 3),
        "mean_accepted_length": 2.5,
    }


def test_counters_that_never_move_or_do_not_exist_change_nothing() -> None:
    plain = sp.judge(server(PLAIN))
    zero = {"lossless_spec_drafted_tokens_total": 0.0}
    assert _with_counters(plain, _collected(zero, zero)).counters == {"drafted_tokens": 0.0}
    assert _with_counters(plain, _collected({}, {})).evidence["counters"].startswith("no speculative")
    assert _with_counters(plain, _collected(None, None)).evidence["counters"] == "no /metrics"
    assert _with_counters(plain, _collected(zero, zero)).verdict == "not evident"


def test_our_servers_verify_steps_are_read_from_its_metrics() -> None:
    """The mean accepted length needs the step count, which our server exports by accepted count."""
    from lossless.analyze.server_side import spec_stats
    from lossless.client.prometheus import parse_counters
    from lossless.server.http.metrics import ExportedMetrics

    metrics = ExportedMetrics()
    before = parse_counters(metrics.render())
    metrics.record_spec_stats({"drafted": 12, "accepted": 6, "accept_counts": [2, 0, 3]})  # 5 steps
    got = spec_stats(before, parse_counters(metrics.render()))
    assert got is not None and got.mean_accepted_length == pytest.approx(1 + 6 / 5)
