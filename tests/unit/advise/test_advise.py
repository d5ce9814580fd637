"""``lossless advise``'s simulator against closed-form answers, its one promise as a property (a hedge
never makes a predicted percentile worse), and the time-out rule's shares on hand-made records."""

from __future__ import annotations

import io
import math
from dataclasses import fields, replace
from pathlib import Path

import click
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st
from rich.console import Console
from sample_records import make

from lossless.advise import recommend, simulate
from lossless.advise.options import AdviseOptions, ms_list
from lossless.advise.run import run
from lossless.advise.simulate import Samples
from lossless.cli import main
from lossless.errors import UsageError
from lossless.records import RequestRecord
from lossless.report import advise as show
from lossless.rundir import write_jsonl

MEAN = 100.0  # ms: X ~ Exp(1/MEAN)
MS = 1_000_000  # ns


def exponential(n: int = 20_000) -> np.ndarray:
    """n values at evenly spaced quantiles of Exp(1/MEAN): the distribution itself, without sampling noise."""
    return -MEAN * np.log(1.0 - (np.arange(n) + 0.5) / n)


def hedged_quantile(p: float, d: float) -> float:
    """Quantile p of T = min(X1, d + X2), X ~ Exp(1/MEAN): P(T > t) = exp(-t/MEAN) for t < d, and
    exp(-t/MEAN) exp(-(t-d)/MEAN) = exp(-(2t-d)/MEAN) from d on."""
    s = 1.0 - p
    return -MEAN * math.log(s) if s >= math.exp(-d / MEAN) else (d - MEAN * math.log(s)) / 2


def _evaluate(
    policies: dict[str, simulate.Policy],
    found: dict[str, Samples],
    draws: int = 400_000,
    resamples: int = 0,
    seed: int = 0,
) -> dict[str, dict[str, simulate.Estimate]]:
    return simulate.evaluate(policies, found, np.random.default_rng(seed), draws, resamples)


@pytest.mark.parametrize("d", [0.0, 50.0, 100.0, 250.0])
def test_hedge_on_exponential_latencies_matches_the_closed_form(d: float) -> None:
    found = {"a": Samples.of(exponential())}
    got = _evaluate({"one": simulate.single("a"), "hedge": simulate.hedge("a", d)}, found)
    for name, p in simulate.QUANTILES.items():
        assert got["one"][name].value == pytest.approx(-MEAN * math.log(1 - p), rel=0.02)
        assert got["hedge"][name].value == pytest.approx(hedged_quantile(p, d), rel=0.02)
    # the hedge goes out when the first has not answered by d: P(X1 > d)
    assert got["hedge"]["attempts_per_request"].value - 1 == pytest.approx(math.exp(-d / MEAN), abs=0.005)
    assert got["hedge"]["error_rate"].value == 0.0


def test_the_bootstrap_interval_covers_the_closed_form() -> None:
    found = {"a": Samples.of(exponential(5_000))}
    got = _evaluate({"hedge": simulate.hedge("a", 100.0)}, found, draws=20_000, resamples=200)["hedge"]
    for name, p in simulate.QUANTILES.items():
        e, exact = got[name], hedged_quantile(p, 100.0)
        assert e.lo is not None and e.hi is not None
        assert e.lo <= exact <= e.hi, (name, e, exact)
        assert e.hi - e.lo < 0.25 * exact  # and says something: 5000 records pin a p99 to within ~10%


def test_failover_after_a_first_token_delay_matches_the_closed_form() -> None:
    # A: first token X ~ Exp, answer 50 ms later; B: always 300 ms. At d = 200 without a token from A,
    # B starts: T = X + 50 when X <= 200, else 500 (probability e^-2).
    x = exponential()
    found = {"a": Samples.of(x + 50, first=x), "b": Samples.of(np.full(100, 300.0))}
    got = _evaluate({"f": simulate.failover(("a", "b"), 200.0)}, found)["f"]
    assert got["p50"].value == pytest.approx(50 - MEAN * math.log(0.5), rel=0.02)
    assert got["p95"].value == got["p99"].value == 500.0  # P(T <= 250) = 1 - e^-2 = 0.865 < 0.95
    assert got["attempts_per_request"].value == pytest.approx(1 + math.exp(-2), abs=0.005)
    assert got["error_rate"].value == 0.0


def test_failover_on_errors_only_matches_the_closed_form() -> None:
    # A: 10% answer 429 at 30 ms (retried elsewhere), 90% X + 50; B: always 300 ms. T = X + 50 with
    # probability 0.9, else 330: P(T <= t) = 0.9 F(t - 50) + 0.1 [t >= 330].
    x = exponential(18_000)
    end = np.concatenate([x + 50, np.full(2_000, 30.0)])
    ok = np.arange(end.size) < x.size
    found = {
        "a": Samples.of(end, ok=ok, first=np.where(ok, np.concatenate([x, x[:2_000]]), np.inf)),
        "b": Samples.of(np.full(10, 300.0)),
    }
    got = _evaluate({"f": simulate.failover(("a", "b"), math.inf)}, found)["f"]

    def exact(p: float) -> float:  # below 330 only A's answers; at 330 a jump of 0.1
        jump = 0.9 * (1 - math.exp(-280 / MEAN))
        if p <= jump:
            return 50 - MEAN * math.log(1 - p / 0.9)
        return 330.0 if p <= jump + 0.1 else 50 - MEAN * math.log(1 - (p - 0.1) / 0.9)

    for name, p in simulate.QUANTILES.items():
        assert got[name].value == pytest.approx(exact(p), rel=0.02), name
    assert got["attempts_per_request"].value == pytest.approx(1.1, abs=0.005)


def test_failover_down_a_chain_and_what_it_does_not_retry() -> None:
    always = lambda v, ok=True: Samples.of([v] * 4, ok=[ok] * 4)  # noqa: E731
    found = {"a": always(10.0, False), "b": always(20.0, False), "c": always(100.0)}
    got = _evaluate({"f": simulate.failover(("a", "b", "c"), 1_000.0)}, found, draws=1_000)["f"]
    assert got["p50"].value == got["p99"].value == 130.0  # 10 ms to A's 429, 20 to B's 500, then C
    assert got["attempts_per_request"].value == 3.0
    # a 400 is the request's own fault: no failover, no answer
    bad = Samples(np.zeros(4, bool), np.full(4, np.inf), np.full(4, 10.0), np.zeros(4, bool), np.zeros(4))
    got = _evaluate({"f": simulate.failover(("a", "c"), 1_000.0)}, {"a": bad, "c": always(100.0)}, 1_000)["f"]
    assert got["error_rate"].value == 1.0 and math.isinf(got["p50"].value)
    assert [
        simulate.fails_over(k) for k in ("http_429", "http_503", "http_400", "connection", "cancelled")
    ] == [True, True, False, True, False]


attempt = st.tuples(st.floats(0.0, 1e5), st.booleans())


@settings(max_examples=150, deadline=None, derandomize=True)
@given(st.lists(attempt, min_size=1, max_size=30), st.floats(0.0, 1e5), st.integers(0, 2**32 - 1))
def test_a_hedge_never_worsens_a_predicted_percentile(
    measured: list[tuple[float, bool]], d: float, seed: int
) -> None:
    end, ok = zip(*measured, strict=True)
    found = {"a": Samples.of(end, ok=ok)}
    got = _evaluate({"one": simulate.single("a"), "hedge": simulate.hedge("a", d)}, found, 2_000, 50, seed)
    for name in (*simulate.QUANTILES, "error_rate"):
        assert got["hedge"][name].value <= got["one"][name].value, name
        assert got["one"][name].lo is not None  # with intervals too, drawn after the point estimates


# --- time-outs ----------------------------------------------------------------------------------------


def rec(
    end: float, first: float | None = None, kind: str | None = None, headers: float | None = 5.0
) -> object:
    """An attempt sent at 0: response headers, first token and end in ms; ``kind`` an error."""
    events = () if first is None else (int(first * MS), int(end * MS))
    return make(
        sent_ns=0,
        scheduled_ns=0,
        headers_ns=None if headers is None else int(headers * MS),
        event_ns=events,
        event_kinds="cu"[: len(events)],
        event_tokens=(-1, 1)[: len(events)],
        end_ns=int(end * MS),
        error_kind=kind,
        status=None if kind in ("connection", "timeout_connect") else 200,
    )


def hand_made() -> list[RequestRecord]:
    return [
        *(rec(500, 100) for _ in range(4)),
        rec(1300, 900),  # answered
        rec(20, kind="http_429"),  # failed fast, before any time-out
        rec(60_000, kind="timeout_first_token"),  # bench's own time-out: no token in 60 s
        rec(5_000, kind="http_500"),  # failed late, no token
        rec(3_000, 50, kind="stream_error"),  # a first token, then the stream broke
        rec(10_000, kind="timeout_connect", headers=None),  # bench's connect time-out
    ]


def test_timeout_shares_on_hand_made_records() -> None:
    records, rng = hand_made(), np.random.default_rng(0)
    first = recommend.timeout(records, "first_token", 0.5, 2.0, rng, 0)
    # first tokens at 50, 100 x4, 900 -> median 100 -> 2 x 100 = 200 ms
    assert first.timeout_ms is not None and first.timeout_ms.value == 200.0
    assert first.reached == 6 and first.censored == 1
    assert first.cut.value == pytest.approx(1 / 10)  # the answer whose first token came at 900 ms
    # no token and ended after 200 ms: the 60 s time-out, the 500 at 5 s and the connect time-out at 10 s
    assert first.saved.value == pytest.approx(3 / 10)
    assert first.wait_saved_ms == pytest.approx((59_800 + 4_800 + 9_800) / 3)
    total = recommend.timeout(records, "total", 0.5, 2.0, rng, 0)
    # ends of the answers: 500 x4, 1300 -> 2 x 500 = 1000 ms; cut: the one at 1300; saved: every failure
    # that ended after 1 s (60 s, 5 s, 3 s, 10 s)
    assert total.timeout_ms is not None and total.timeout_ms.value == 1_000.0
    assert (total.cut.value, total.saved.value) == (pytest.approx(0.1), pytest.approx(0.4))
    connect = recommend.timeout(records, "connect", 0.5, 2.0, rng, 200)
    assert connect.timeout_ms is not None and connect.timeout_ms.value == 10.0  # headers at 5 ms
    assert connect.saved.value == pytest.approx(0.1) and connect.censored == 1  # the connect time-out
    assert connect.cut.value == 0.0 and connect.cut.hi == 0.0
    lo, hi = connect.saved.lo, connect.saved.hi
    assert lo is not None and hi is not None and lo <= 0.1 <= hi


def test_round_sig_and_delays() -> None:
    assert [recommend.round_sig(x, up=True) for x in (1234.0, 200.0, 0.123, 0.0)] == [
        1300.0,
        200.0,
        0.13,
        0.0,
    ]
    assert recommend.round_sig(1234.0) == 1200.0
    delays = recommend.hedge_delays(Samples.of(exponential(1_000)))
    assert delays == tuple(sorted(delays)) and delays[0] >= 20 and delays[-1] <= 500
    assert math.isinf(recommend.failover_delays(Samples.of([1.0, 2.0]))[-1])


# --- options, the stage, the CLI's defaults -----------------------------------------------------------


def test_ms_list_and_options_refuse_bad_values() -> None:
    assert ms_list("250, 100,1s,100", "--x") == (100.0, 250.0, 1000.0)
    assert ms_list(None, "--x") is None
    for bad in ("fast", "-5", "nan", "1,,2"):
        with pytest.raises(UsageError, match="--x"):
            ms_list(bad, "--x")
    for kw in ({"timeout_quantile": 1.0}, {"timeout_margin": 0.5}, {"draws": 10}, {"resamples": 3}):
        with pytest.raises(UsageError):
            AdviseOptions(**kw)


def test_help_defaults_are_the_options_own() -> None:
    defaults = AdviseOptions()
    known = {f.name: getattr(defaults, f.name) for f in fields(defaults)}
    command = main.commands["advise"]
    compared = 0
    no_default = (None, click.Option(["--x"]).default)  # what click holds for an option given none
    for param in command.params:
        if not isinstance(param, click.Option) or param.name not in known or param.is_flag:
            continue
        if param.default not in no_default:
            assert param.type_cast_value(click.Context(command), param.default) == known[param.name]
            compared += 1
    assert compared >= 5


def test_stage_on_saved_runs_pools_groups_and_notes_too_few(tmp_path: Path) -> None:
    first, second = tmp_path / "one", tmp_path / "two"
    fast = [rec(200 + 10 * i, 50 + i) for i in range(12)]
    slow = [replace(rec(900, 400), endpoint="b", request_index=i) for i in range(8)]
    lone = [replace(rec(900, 400), endpoint="c")]
    refused = [replace(rec(20, kind="http_429"), endpoint="d") for _ in range(6)]  # never answers
    write_jsonl(first / "records.jsonl", [*fast, *slow, *lone, *refused])
    write_jsonl(second / "records.jsonl", fast[:3])  # more of a at c=1: pooled
    result = run(AdviseOptions(run_dirs=(first, second), draws=2_000, resamples=0))
    assert [(g.endpoint, g.attempts) for g in result.groups] == [("a", 15), ("b", 8), ("d", 6)]
    assert any("c at c=1: 1 attempts, too few" in n for n in result.notes)
    assert any("a at c=1 is in" in n and "pooled" in n for n in result.notes)
    d = result.groups[2]
    assert [p.policy for p in d.hedging] == ["single"] and d.hedging[0].error_rate.value == 1.0
    assert d.timeouts[1].timeout_ms is None  # no first token ever came: no first-token time-out to advise
    labels = [p.label for p in result.failover]
    assert "a, then b (on 429/5xx/network errors)" in labels
    assert any(lb.startswith("d, then a (") for lb in labels)  # every ordered pair
    assert any(lb.startswith("a, then b, then d (") for lb in labels)  # and, of three, all: best p99 first
    assert all(p.usd_per_success is None for p in result.failover)  # no summary.json, no prices
    page, console = show.render_html(result), Console(file=io.StringIO(), width=200)
    show.render_terminal(result, console)
    assert "no answer" in page and "d at c=1" in console.file.getvalue()  # type: ignore[attr-defined]
    with pytest.raises(UsageError, match=r"no records\.jsonl"):
        run(AdviseOptions(run_dirs=(tmp_path / "nothing",)))
