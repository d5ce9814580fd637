"""Records -> ``Summary``: per endpoint and load (and per prompt class), every metric of the table.

Only measured requests count (not warm-up, cool-down or probes). Throughput is the work done within the
measured window, [first measured send, last measured end] of each run: every request's output tokens
that arrived inside it, in proportion to its token events there, so that a warm-up request still streaming
when the window opens, and cool-down requests keeping the load up while it closes, add their share of the
window's work and nothing from outside it (with no such requests, the measured requests' tokens).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from functools import partial

from lossless.analyze.distribution import Distribution, describe
from lossless.analyze.metrics import METRICS
from lossless.analyze.probes import probe_stats
from lossless.analyze.ratios import compare_classes, comparisons
from lossless.analyze.repeats import by_run, repeats
from lossless.analyze.saturation import Saturation, judge_saturation
from lossless.analyze.server_side import metrics_moved, served_by, server_times, spec_stats, tally
from lossless.analyze.summary import (
    CacheStats,
    EndpointStats,
    GroupStats,
    LengthCheck,
    Requests,
    RunInfo,
    SessionStats,
    Stalls,
    Summary,
    Throughput,
)
from lossless.analyze.timing import Timing, meets, timing
from lossless.records import TOKEN_KINDS, Failure, RequestRecord, on_one_timeline

Counters = tuple[Mapping[str, float], Mapping[str, float]]  # a server's /metrics before and after
# USD per million tokens: (input, output) or (input, output, cached input); None: not priced
Price = tuple[float | None, float | None] | tuple[float | None, float | None, float | None]


def summarize(
    records: Sequence[RequestRecord],
    prices: Mapping[str, Price],
    *,
    spec: Mapping[tuple[str, str], Counters] | None = None,
    slo: Mapping[str, float] | None = None,
    stall_s: float = 1.0,
    seed: int = 0,
    run: RunInfo | None = None,
    class_seed: int | None = None,
    rebuilt: bool = False,
) -> Summary:
    """``prices`` maps endpoint names, in table order, to USD per million (input, output[, cached input])
    tokens.
    ``run``: what bench knows of the run besides its records. ``class_seed``: also compare the endpoints
    prompt class by prompt class, bootstrapped from this seed. ``rebuilt``: the records are all there is
    of the run (summary.json was lost)."""
    records = on_one_timeline(list(records))  # measured by several processes: one clock across records
    order = {name: i for i, name in enumerate(prices)}
    groups: dict[tuple[str, str], list[RequestRecord]] = {}
    around: dict[tuple[str, str], list[RequestRecord]] = {}  # every window's requests, for throughput
    probes: dict[tuple[str, str], list[RequestRecord]] = {}
    for r in records:
        (probes if r.probe else around).setdefault((r.endpoint, r.load), []).append(r)
        if r.measured:
            groups.setdefault((r.endpoint, r.load), []).append(r)
    keys = sorted(groups, key=lambda k: (_load_order(records, k[1]), order.get(k[0], len(order))))
    entries = []
    for name, load in keys:
        attempts, price = groups[(name, load)], prices.get(name, (None, None))
        counters = (spec or {}).get((name, load))
        overall = replace(
            _group(attempts, price, slo or {}, stall_s, seed, around[(name, load)]),
            sessions=_sessions(attempts, seed),
        )
        windows = {k: w for k, rs in by_run(attempts).items() if (w := _span(rs)) is not None}
        entries.append(
            EndpointStats(
                name,
                load,
                overall,
                {c: _group(part, price, slo or {}, stall_s, seed) for c, part in _by_class(attempts).items()},
                spec_stats(*counters) if counters else None,
                metrics_moved(*counters) if counters else None,
                saturation=_saturation(groups, keys, name, load),
                probes=probe_stats(
                    probes.get((name, load), []), probes.get((name, "idle"), []), windows, seed
                ),
                repeats=repeats(attempts, partial(_rates, around=around[(name, load)])),
            )
        )
    by_class = None if class_seed is None else tuple(compare_classes(records, list(prices), class_seed))
    compared = tuple(comparisons(groups, keys, seed))
    return Summary(tuple(entries), compared, dict(slo or {}), stall_s, run, by_class, rebuilt)


def _saturation(
    groups: Mapping[tuple[str, str], list[RequestRecord]],
    keys: Sequence[tuple[str, str]],
    name: str,
    load: str,
) -> Saturation | None:
    """The verdict on one endpoint's level; a closed loop's against its previous, lower concurrency."""
    levels = [lo for n, lo in keys if n == name]
    before = levels[: levels.index(load)]
    c, c_prev = _concurrency(load), _concurrency(before[-1]) if before else None
    if c is not None and c_prev is not None and c > c_prev:
        return judge_saturation(groups[(name, load)], groups[(name, before[-1])], (c_prev, c))
    return judge_saturation(groups[(name, load)])


def _concurrency(load: str) -> int | None:
    return int(load[2:]) if load.startswith("c=") and load[2:].isdigit() else None


def _load_order(records: Sequence[RequestRecord], load: str) -> int:
    return next(i for i, r in enumerate(records) if r.load == load)


def _by_class(attempts: Sequence[RequestRecord]) -> dict[str, list[RequestRecord]]:
    """In the order the workload first sent them (len-100, len-1k, len-10k), not alphabetical."""
    classes: dict[str, list[RequestRecord]] = {}
    for r in attempts:
        classes.setdefault(r.prompt_class, []).append(r)
    first = sorted(classes, key=lambda c: min(r.request_index for r in classes[c]))
    return {c: classes[c] for c in first}


def _group(
    attempts: list[RequestRecord],
    price: Price,
    slo: Mapping[str, float],
    stall_s: float,
    seed: int,
    around: Sequence[RequestRecord] | None = None,
) -> GroupStats:
    """One endpoint at one load (or one prompt class of it): counts, metrics, throughput, cost.
    ``around``: every request of the level, whose tokens within the measured window count as its work."""
    final = [r for r in attempts if not r.retried]
    ok = [r for r in final if r.ok]
    t = [timing(r) for r in ok]
    window = _window_s(attempts)
    return GroupStats(
        requests=_requests(attempts, final),
        metrics={m.key: describe(m.values(t), seed, m.per_request) for m in METRICS},
        n_out_sources=tally(r.n_out_source for r in ok),
        stalls=_stalls(t, stall_s * 1000.0),
        window_s=window,
        throughput=_throughput(ok, t, window, slo, _tokens(attempts, around or attempts)),
        server_ms=_server(ok, seed),
        cost_per_ok_request_usd=_cost(attempts, len(ok), price),
        served_by=served_by(final),
        slo_attainment=attainment(final, slo),
        prompt_cache=_prompt_cache(ok, t, seed),
        lengths=_lengths(ok),
    )


def _sessions(attempts: Sequence[RequestRecord], seed: int) -> SessionStats | None:
    """Conversations: each session's final attempts, turn by turn; complete when every turn was answered
    (a failed turn ends a session, and so does the run's end)."""
    turns: dict[str, list[RequestRecord]] = {}
    for r in attempts:
        if r.session is not None and not r.retried:
            turns.setdefault(r.session, []).append(r)
    if not turns:
        return None
    done = [rs for rs in turns.values() if all(r.ok for r in rs)]
    task = [(max(r.end_ns or 0 for r in rs) - min(r.sent_ns for r in rs)) / 1e9 for rs in done]
    model = [sum((r.end_ns or r.sent_ns) - r.sent_ns for r in rs) / 1e9 for rs in done]
    return SessionStats(
        sessions=len(turns),
        completed=len(done),
        turns_ok=sum(r.ok for rs in turns.values() for r in rs),
        task_s=describe(task, seed),
        model_s=describe(model, seed),
    )


def _lengths(ok: Sequence[RequestRecord]) -> LengthCheck | None:
    asked = [r for r in ok if r.asked_in is not None]
    if not asked:
        return None
    off = [abs(r.n_in - r.asked_in) for r in asked if r.n_in is not None and r.asked_in is not None]
    outs = [r for r in asked if r.asked_out is not None]
    return LengthCheck(
        requests=len(asked),
        input_exact=sum(1 for d in off if d == 0),
        input_off_most=max(off, default=0),
        output_asked=len(outs),
        output_exact=sum(1 for r in outs if r.n_out == r.asked_out),
    )


def _prompt_cache(ok: Sequence[RequestRecord], t: Sequence[Timing], seed: int) -> CacheStats | None:
    said = [(r, x) for r, x in zip(ok, t, strict=True) if r.n_cached is not None]
    if not said:
        return None
    hit = [x.ttft for r, x in said if r.n_cached and x.ttft is not None]
    miss = [x.ttft for r, x in said if not r.n_cached and x.ttft is not None]
    return CacheStats(
        reporting=len(said),
        hits=sum(1 for r, _ in said if r.n_cached),
        cached_tokens=sum(r.n_cached or 0 for r, _ in said),
        prompt_tokens=sum(r.n_in or 0 for r, _ in said),
        ttft_hit=describe(hit, seed),
        ttft_miss=describe(miss, seed),
    )


def attainment(final: Sequence[RequestRecord], slo: Mapping[str, float]) -> dict[str, float]:
    """The share of requests meeting each objective, and every one ("all"). A failed request meets none;
    one cut off by the run's end (cancelled) is not counted. Empty without objectives or requests."""
    counted = [r for r in final if r.error_kind != Failure.CANCELLED and not r.retried]
    if not slo or not counted:
        return {}
    times = [timing(r) for r in counted if r.ok]
    shares = {name: sum(meets(t, {name: limit}) for t in times) / len(counted) for name, limit in slo.items()}
    return shares | {"all": sum(meets(t, slo) for t in times) / len(counted)}


def _requests(attempts: Sequence[RequestRecord], final: Sequence[RequestRecord]) -> Requests:
    errors = tally(r.error_kind for r in attempts if r.error_kind is not None)
    return Requests(
        ok=sum(1 for r in final if r.ok),
        failed=sum(1 for r in final if not r.ok and r.error_kind != Failure.CANCELLED),
        cancelled=sum(1 for r in final if r.error_kind == Failure.CANCELLED),
        attempts=len(attempts),
        errors=dict(sorted(errors.items())),
    )


def _stalls(t: Sequence[Timing], threshold_ms: float) -> Stalls:
    stalls = [[g for g in x.gaps if g > threshold_ms] for x in t]
    return Stalls(
        count=sum(len(s) for s in stalls),
        requests_with_stalls=sum(1 for s in stalls if s),
        total_s=sum(sum(s) for s in stalls) / 1000.0,
    )


def _throughput(
    ok: Sequence[RequestRecord],
    t: Sequence[Timing],
    window: float | None,
    slo: Mapping[str, float],
    tokens: float,
) -> Throughput:
    if not window:
        return Throughput(None, None, None)
    good = sum(1 for x in t if meets(x, slo)) / window if slo else None
    return Throughput(tokens / window, len(ok) / window, good)


def _span(attempts: Sequence[RequestRecord]) -> tuple[int, int] | None:
    """One run's measured window: (first send, last end) of its measured attempts."""
    ends = [r.end_ns for r in attempts if r.end_ns is not None]
    if not attempts or not ends:
        return None
    return min(r.sent_ns for r in attempts), max(ends)


def _window_s(attempts: Sequence[RequestRecord]) -> float | None:
    """The measured windows' length, summed over the runs (bench --repeat: the pauses between runs and
    the other endpoints' turns are no part of it)."""
    spans = [s for rs in by_run(attempts).values() if (s := _span(rs)) is not None]
    total = sum(b - a for a, b in spans) / 1e9
    return total if total > 0 else None


def _tokens(attempts: Sequence[RequestRecord], around: Sequence[RequestRecord]) -> float:
    """Output tokens of successful requests that arrived within each run's measured window."""
    total = 0.0
    for k, rs in by_run(around).items():
        span = _span([r for r in attempts if r.repeat == k])
        if span is None:
            continue
        for r in rs:
            if r.ok and not r.retried and r.n_out:
                times = [t for t, kind in zip(r.event_ns, r.event_kinds, strict=True) if kind in TOKEN_KINDS]
                inside = sum(1 for t in times if span[0] <= t <= span[1])
                total += r.n_out * (inside / len(times) if times else float(r.measured))
    return total


def _rates(run: Sequence[RequestRecord], around: Sequence[RequestRecord]) -> tuple[float, float] | None:
    """One run's (output tokens/s, requests/s) over its measured window."""
    window = _window_s(run)
    if not window:
        return None
    ok = [r for r in run if r.ok and not r.retried]
    return _tokens(run, [r for r in around if r.repeat == run[0].repeat]) / window, len(ok) / window


def _server(ok: Sequence[RequestRecord], seed: int) -> dict[str, Distribution]:
    values: dict[str, list[float]] = {}
    for r in ok:
        for k, v in server_times(r.server_headers, r.server_timings).items():
            values.setdefault(k, []).append(v)
    return {k: describe(v, seed) for k, v in sorted(values.items())}


def _cost(attempts: Sequence[RequestRecord], n_ok: int, price: Price) -> float | None:
    """Every attempt that reported usage costs, failed and retried ones included; attempts without usage
    are charged the prompt's input tokens when another attempt of the same prompt reported them."""
    p_in, p_out, p_cached = (*price, None)[:3]  # a cached-input price, when the endpoint file has one
    if (p_in is None and p_out is None) or n_ok == 0:
        return None
    n_in_by_prompt = {r.prompt_id: r.n_in for r in attempts if r.n_in is not None}
    total = 0.0
    for r in attempts:
        n_in = r.n_in if r.n_in is not None else n_in_by_prompt.get(r.prompt_id, 0)
        cached = min(r.n_cached or 0, n_in or 0) if p_cached is not None else 0
        total += (
            ((n_in or 0) - cached) * (p_in or 0.0)
            + cached * (p_cached or 0.0)
            + (r.n_out or 0) * (p_out or 0.0)
        )
    return total / 1e6 / n_ok
