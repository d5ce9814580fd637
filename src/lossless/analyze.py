"""Records -> summary: pure numbers, no printing. Metric definitions are DESIGN.md's, to the letter.

Per request (successful attempts only, warm-up excluded):
    TTFB = headers - sent; TTFT = first content/reasoning/tool event - sent; TTFC = first content event - sent
    TPOT = (last token event - first token event) / (N_out - tokens in the first event); speed = 1/TPOT
    E2E = end - sent; queue delay = sent - scheduled; latency from schedule = end - scheduled
Gaps between token events are inter-chunk latencies; they become per-token ITL only when the server says
how many tokens each chunk holds (cumulative usage per chunk).
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lossless.errors import UsageError
from lossless.records import CONTENT, IDENTITY_HEADERS, TOKEN_KINDS, RequestRecord

PERCENTILES = {"p50": 50.0, "p90": 90.0, "p95": 95.0, "p99": 99.0, "p99.9": 99.9}
SLO_METRICS = ("ttft", "tpot", "e2e", "ttfb")
_BOOT = 1000  # bootstrap resamples
_CI_STATS = ("p50", "p90", "p99")  # statistics given a bootstrap 95% CI


@dataclass(frozen=True)
class Timing:
    """What one successful record says, in ms (None where undefined)."""

    ttfb: float | None
    ttft: float | None
    ttfc: float | None
    tpot: float | None
    e2e: float
    queue: float
    from_schedule: float
    gaps: tuple[float, ...]  # inter-chunk gaps between token events
    itl: tuple[float, ...]  # per-token gaps, only when per-chunk token counts are known


def timing(r: RequestRecord) -> Timing:
    ms = 1e-6
    token_idx = [i for i, k in enumerate(r.event_kinds) if k in TOKEN_KINDS]
    t_tok = [r.event_ns[i] for i in token_idx]
    content = next((r.event_ns[i] for i, k in enumerate(r.event_kinds) if k == CONTENT), None)
    assert r.end_ns is not None
    gaps = tuple((b - a) * ms for a, b in itertools.pairwise(t_tok))
    counts = [r.event_tokens[i] for i in token_idx]
    known = bool(counts) and all(c >= 0 for c in counts)
    first_tokens = counts[0] if known else 1
    tpot = None
    if r.n_out is not None and len(t_tok) >= 2 and r.n_out - first_tokens > 0:
        tpot = (t_tok[-1] - t_tok[0]) * ms / (r.n_out - first_tokens)
    itl: tuple[float, ...] = ()
    if known:
        per_chunk = [b - a for a, b in itertools.pairwise(counts)]
        itl = tuple(g / n for g, n in zip(gaps, per_chunk, strict=True) for _ in range(n) if n > 0)
    return Timing(
        ttfb=None if r.headers_ns is None else (r.headers_ns - r.sent_ns) * ms,
        ttft=(t_tok[0] - r.sent_ns) * ms if t_tok else None,
        ttfc=None if content is None else (content - r.sent_ns) * ms,
        tpot=tpot,
        e2e=(r.end_ns - r.sent_ns) * ms,
        queue=(r.sent_ns - r.scheduled_ns) * ms,
        from_schedule=(r.end_ns - r.scheduled_ns) * ms,
        gaps=gaps,
        itl=itl,
    )


def describe(values: Sequence[float] | np.ndarray, seed: int = 0, ci: bool = True) -> dict[str, Any]:
    """n, mean, std, min, percentiles, max, cv, and bootstrap 95% CIs of p50, p90 and p99.

    ``ci=False`` for values that are not one per request (inter-chunk gaps): gaps of one request are
    correlated, and a bootstrap that resamples them one by one would claim too narrow an interval.
    """
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        return {"n": 0}
    out: dict[str, Any] = {
        "n": int(x.size),
        "mean": float(x.mean()),
        "std": float(x.std(ddof=1) if x.size > 1 else 0.0),
    }
    out["min"] = float(x.min())
    for name, q in PERCENTILES.items():
        out[name] = float(np.percentile(x, q))
    out["max"] = float(x.max())
    out["cv"] = out["std"] / out["mean"] if out["mean"] else None
    if ci:
        boot = _boot_quantiles(x, np.random.default_rng(seed))
        for name, row in zip(_CI_STATS, boot, strict=True):
            out[f"{name}_ci95"] = [float(np.percentile(row, 2.5)), float(np.percentile(row, 97.5))]
    return out


def _boot_quantiles(x: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """[len(_CI_STATS), _BOOT]: p50, p90, p99 of each bootstrap resample (in slices, to bound memory)."""
    qs = [PERCENTILES[name] for name in _CI_STATS]
    if x.size < 2:
        return np.full((len(qs), _BOOT), float(x[0]))
    per_slice = max(1, min(_BOOT, 2_000_000 // x.size))
    parts = []
    for start in range(0, _BOOT, per_slice):
        idx = rng.integers(0, x.size, size=(min(per_slice, _BOOT - start), x.size))
        parts.append(np.percentile(x[idx], qs, axis=1))
    return np.concatenate(parts, axis=1)


def parse_slo(text: str | None) -> dict[str, float]:
    """``ttft=500,tpot=50ms,e2e=5s`` -> {"ttft": 500.0, "tpot": 50.0, "e2e": 5000.0} (milliseconds)."""
    if not text:
        return {}
    slo: dict[str, float] = {}
    for part in text.split(","):
        m = re.fullmatch(r"\s*(\w+)\s*=\s*([0-9]*\.?[0-9]+)\s*(ms|s)?\s*", part)
        if not m or m.group(1) not in SLO_METRICS:
            raise UsageError(
                f"bad --slo item {part.strip()!r}: expected NAME=VALUE[ms|s], NAME in {SLO_METRICS}"
            )
        slo[m.group(1)] = float(m.group(2)) * (1000.0 if m.group(3) == "s" else 1.0)
    return slo


def meets(t: Timing, slo: Mapping[str, float]) -> bool:
    # An undefined value (no TPOT for a one-token answer) does not fail its objective.
    return all((v := getattr(t, name)) is None or v <= limit for name, limit in slo.items())


def server_times(headers: Iterable[tuple[str, str]]) -> dict[str, float]:
    """Server-side timing headers in ms: envoy and OpenAI give ms; server-timing a dur= per metric."""
    out: dict[str, float] = {}
    for name, value in headers:
        if name in ("x-envoy-upstream-service-time", "openai-processing-ms"):
            try:
                out[name] = float(value)
            except ValueError:
                continue
        elif name == "server-timing":
            for entry in value.split(","):
                metric, _, params = entry.strip().partition(";")
                m = re.search(r"dur=([0-9.]+)", params)
                if metric and m:
                    out[f"server-timing:{metric.strip()}"] = float(m.group(1))
    return out


def spec_stats(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float] | None:
    """Acceptance rate = accepted / drafted tokens; mean accepted length = tokens per verify step
    (accepted / steps + 1 for the bonus or corrected token, vLLM's definition)."""
    d = {k: after[k] - before.get(k, 0.0) for k in after}
    for prefix in ("vllm:spec_decode_", "sglang:spec_decode_"):
        drafted, accepted = d.get(prefix + "num_draft_tokens"), d.get(prefix + "num_accepted_tokens")
        steps = d.get(prefix + "num_drafts")
        if drafted:
            return _spec(drafted, accepted or 0.0, steps)
    drafted = d.get("lossless_spec_drafted_tokens_total")
    if drafted:
        return _spec(
            drafted, d.get("lossless_spec_accepted_tokens_total", 0.0), d.get("lossless_spec_steps_total")
        )
    return None


def _spec(drafted: float, accepted: float, steps: float | None) -> dict[str, float]:
    out = {"drafted_tokens": drafted, "accepted_tokens": accepted, "acceptance_rate": accepted / drafted}
    if steps:
        out["mean_accepted_length"] = 1.0 + accepted / steps
    return out


def summarize(
    records: Sequence[RequestRecord],
    prices: Mapping[str, tuple[float | None, float | None]],
    *,
    spec: Mapping[tuple[str, str], tuple[Mapping[str, float], Mapping[str, float]]] | None = None,
    slo: Mapping[str, float] | None = None,
    stall_s: float = 1.0,
    seed: int = 0,
) -> dict[str, Any]:
    """``prices`` maps endpoint names, in table order, to USD per million (input, output) tokens."""
    order = {name: i for i, name in enumerate(prices)}
    groups: dict[tuple[str, str], list[RequestRecord]] = {}
    for r in records:
        if not r.warmup:
            groups.setdefault((r.endpoint, r.load), []).append(r)
    keys = sorted(groups, key=lambda k: (_load_order(records, k[1]), order.get(k[0], len(order))))
    entries = []
    for name, load in keys:
        e = _entry(groups[(name, load)], prices.get(name, (None, None)), slo or {}, stall_s, seed)
        counters = (spec or {}).get((name, load))
        entries.append(
            {"name": name, "load": load, **e, "speculative": spec_stats(*counters) if counters else None}
        )
    return {
        "endpoints": entries,
        "comparisons": _comparisons(groups, keys, seed),
        "slo_ms": dict(slo or {}),
        "stall_threshold_s": stall_s,
    }


def _load_order(records: Sequence[RequestRecord], load: str) -> int:
    return next(i for i, r in enumerate(records) if r.load == load)


def _entry(
    attempts: list[RequestRecord],
    price: tuple[float | None, float | None],
    slo: Mapping[str, float],
    stall_s: float,
    seed: int,
    by_class: bool = True,
) -> dict[str, Any]:
    """One endpoint at one load (or one prompt class of it): counts, metrics, throughput, cost."""
    final = [r for r in attempts if not r.retried]
    ok = [r for r in final if r.ok]
    t = [timing(r) for r in ok]
    entry: dict[str, Any] = {"requests": _requests(attempts, final)}
    entry |= _metrics(ok, t, seed)
    entry["stalls"] = _stalls(t, stall_s * 1000.0)
    entry["window_s"] = window = _window_s(attempts)
    entry["throughput"] = _throughput(ok, t, window, slo)
    entry["server_ms"] = _server(ok, seed)
    entry["cost_per_ok_request_usd"] = _cost(attempts, len(ok), price)
    entry["served_by"] = served_by(final)
    if by_class:
        classes: dict[str, list[RequestRecord]] = {}
        for r in attempts:
            classes.setdefault(r.prompt_class, []).append(r)
        # in the order the workload first sent them (len-100, len-1k, len-10k), not alphabetical
        first = sorted(classes, key=lambda c: min(r.request_index for r in classes[c]))
        entry["classes"] = {c: _entry(classes[c], price, slo, stall_s, seed, by_class=False) for c in first}
    return entry


def _requests(attempts: Sequence[RequestRecord], final: Sequence[RequestRecord]) -> dict[str, Any]:
    errors = _count(r.error_kind for r in attempts if r.error_kind is not None)
    return {
        "ok": sum(1 for r in final if r.ok),
        "failed": sum(1 for r in final if not r.ok and r.error_kind != "cancelled"),
        "cancelled": sum(1 for r in final if r.error_kind == "cancelled"),
        "attempts": len(attempts),
        "errors": dict(sorted(errors.items())),
    }


def _metrics(ok: Sequence[RequestRecord], t: Sequence[Timing], seed: int) -> dict[str, Any]:
    def d(values: Iterable[float | None], ci: bool = True) -> dict[str, Any]:
        return describe([v for v in values if v is not None], seed, ci)

    return {
        "ttfb_ms": d(x.ttfb for x in t),
        "ttft_ms": d(x.ttft for x in t),
        "ttfc_ms": d(x.ttfc for x in t),
        "tpot_ms": d(x.tpot for x in t),
        "output_tps": d(1000.0 / x.tpot if x.tpot else None for x in t),
        "e2e_ms": d(x.e2e for x in t),
        "e2e_from_schedule_ms": d(x.from_schedule for x in t),
        "queue_delay_ms": d(x.queue for x in t),
        "inter_chunk_ms": d((g for x in t for g in x.gaps), ci=False),
        "itl_ms": d((g for x in t for g in x.itl), ci=False),
        "n_out": d(r.n_out for r in ok),
        # "usage", "tokenizer:NAME", "chunks" (no usage and no tokenizer: TPOT is time per chunk) or "none"
        "n_out_sources": _count(r.n_out_source for r in ok),
    }


def _stalls(t: Sequence[Timing], threshold_ms: float) -> dict[str, Any]:
    stalls = [[g for g in x.gaps if g > threshold_ms] for x in t]
    return {
        "count": sum(len(s) for s in stalls),
        "requests_with_stalls": sum(1 for s in stalls if s),
        "total_s": sum(sum(s) for s in stalls) / 1000.0,
    }


def _throughput(
    ok: Sequence[RequestRecord], t: Sequence[Timing], window: float | None, slo: Mapping[str, float]
) -> dict[str, float | None]:
    if not window:
        return {"output_tokens_per_s": None, "requests_per_s": None, "goodput_requests_per_s": None}
    good = sum(1 for x in t if meets(x, slo)) / window if slo else None
    return {
        "output_tokens_per_s": sum(r.n_out or 0 for r in ok) / window,
        "requests_per_s": len(ok) / window,
        "goodput_requests_per_s": good,
    }


def served_by(records: Iterable[RequestRecord]) -> dict[str, Any]:
    """The distinct answers to "who served it", with how many requests gave each: the response's model
    and system_fingerprint, and each identifying header. One value each is one deployment, as far as
    the server lets it show; several say the URL led to more than one."""
    answered = [r for r in records if r.status == 200]
    headers: dict[str, list[str]] = {}
    for r in answered:
        for name, value in r.server_headers:
            if name in IDENTITY_HEADERS:
                headers.setdefault(name, []).append(value)
    return {
        "model": _count(r.served_model for r in answered if r.served_model is not None),
        "system_fingerprint": _count(
            r.system_fingerprint for r in answered if r.system_fingerprint is not None
        ),
        "headers": {name: _count(values) for name, values in sorted(headers.items())},
    }


def _count(items: Iterable[str]) -> dict[str, int]:
    out: dict[str, int] = {}
    for item in items:
        out[item] = out.get(item, 0) + 1
    return out


def _window_s(attempts: Sequence[RequestRecord]) -> float | None:
    """From the first send to the last end of the measured (non-warm-up) attempts."""
    ends = [r.end_ns for r in attempts if r.end_ns is not None]
    if not attempts or not ends:
        return None
    span = (max(ends) - min(r.sent_ns for r in attempts)) / 1e9
    return span if span > 0 else None


def _server(ok: Sequence[RequestRecord], seed: int) -> dict[str, Any]:
    values: dict[str, list[float]] = {}
    for r in ok:
        for k, v in server_times(r.server_headers).items():
            values.setdefault(k, []).append(v)
    return {k: describe(v, seed) for k, v in sorted(values.items())}


def _cost(
    attempts: Sequence[RequestRecord], n_ok: int, price: tuple[float | None, float | None]
) -> float | None:
    """Every attempt that reported usage costs, failed and retried ones included; attempts without usage
    are charged the prompt's input tokens when another attempt of the same prompt reported them."""
    p_in, p_out = price
    if (p_in is None and p_out is None) or n_ok == 0:
        return None
    n_in_by_prompt = {r.prompt_id: r.n_in for r in attempts if r.n_in is not None}
    total = 0.0
    for r in attempts:
        n_in = r.n_in if r.n_in is not None else n_in_by_prompt.get(r.prompt_id, 0)
        total += (n_in or 0) * (p_in or 0.0) + (r.n_out or 0) * (p_out or 0.0)
    return total / 1e6 / n_ok


_COMPARED = (("output_tps", "output speed"), ("ttft_ms", "TTFT"), ("e2e_ms", "E2E"))


def _comparisons(
    groups: Mapping[tuple[str, str], list[RequestRecord]], keys: Sequence[tuple[str, str]], seed: int
) -> list[dict[str, Any]]:
    """Each endpoint against the first at the same load: ratios of p50, p90 and p99, each with a bootstrap
    95% CI (the two endpoints resampled independently)."""
    out: list[dict[str, Any]] = []
    loads = list(dict.fromkeys(load for _, load in keys))
    for load in loads:
        names = [n for n, lo in keys if lo == load]
        per = {n: [timing(r) for r in groups[(n, load)] if r.ok and not r.retried] for n in names}
        for other in names[1:]:
            for metric, words in _COMPARED:
                a, b = _metric(per[names[0]], metric), _metric(per[other], metric)
                if a.size < 2 or b.size < 2:
                    continue
                rng = np.random.default_rng(seed)
                boot_a, boot_b = _boot_quantiles(a, rng), _boot_quantiles(b, rng)
                for i, stat in enumerate(_CI_STATS):
                    base = float(np.percentile(a, PERCENTILES[stat]))
                    if base == 0:
                        continue
                    ratio = float(np.percentile(b, PERCENTILES[stat])) / base
                    boot = boot_b[i] / np.maximum(boot_a[i], 1e-12)
                    lo, hi = float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))
                    text = f"{other}'s {stat} {words} is {ratio:.2f}x {names[0]}'s (95% CI {lo:.2f}-{hi:.2f})"
                    out.append(
                        {"load": load, "metric": metric, "stat": stat, "baseline": names[0], "other": other,
                         "ratio": ratio, "ci95": [lo, hi], "text": text}
                    )  # fmt: skip
    return out


def _metric(timings: Sequence[Timing], metric: str) -> np.ndarray:
    if metric == "output_tps":
        vals = [1000.0 / t.tpot for t in timings if t.tpot]
    elif metric == "ttft_ms":
        vals = [t.ttft for t in timings if t.ttft is not None]
    else:
        vals = [t.e2e for t in timings]
    return np.asarray(vals, dtype=float)


def compare_runs(
    a: Sequence[RequestRecord], b: Sequence[RequestRecord], names: tuple[str, str] = ("A", "B"), seed: int = 0
) -> list[dict[str, Any]]:
    """Two saved runs: each endpoint and load of run B against the same of run A, with the ratios and
    bootstrap CIs of ``_comparisons``. Endpoints pair by name, or by position when the runs name them
    differently (one provider measured twice under two labels)."""
    groups_a, groups_b = _final_groups(a), _final_groups(b)
    endpoints_a = list(dict.fromkeys(name for name, _ in groups_a))
    endpoints_b = list(dict.fromkeys(name for name, _ in groups_b))
    pairs = [(n, n) for n in endpoints_a if n in endpoints_b]
    if not pairs:
        pairs = list(zip(endpoints_a, endpoints_b, strict=False))
    out: list[dict[str, Any]] = []
    for ea, eb in pairs:
        for name, load in groups_a:
            if name != ea or (eb, load) not in groups_b:
                continue
            label = f"{ea} {load}" if ea == eb else f"{ea} vs {eb} {load}"
            groups = {(names[0], label): groups_a[(ea, load)], (names[1], label): groups_b[(eb, load)]}
            for c in _comparisons(groups, list(groups), seed):
                out.append({**c, "endpoint_a": ea, "endpoint_b": eb, "load": load, "label": label})
    return out


def _final_groups(records: Sequence[RequestRecord]) -> dict[tuple[str, str], list[RequestRecord]]:
    groups: dict[tuple[str, str], list[RequestRecord]] = {}
    for r in records:
        if not r.warmup:
            groups.setdefault((r.endpoint, r.load), []).append(r)
    return groups


def drift(records: Sequence[RequestRecord]) -> list[dict[str, Any]]:
    """Did latency change over the run? Per endpoint and load: median E2E of the first and the second
    half of the successful requests, in the order they were sent."""
    out = []
    for (name, load), group in _final_groups(records).items():
        ok = sorted((r for r in group if r.ok and not r.retried), key=lambda r: r.sent_ns)
        e2e = [timing(r).e2e for r in ok]
        if len(e2e) < 4:
            continue
        half = len(e2e) // 2
        first, second = float(np.median(e2e[:half])), float(np.median(e2e[half:]))
        out.append(
            {"name": name, "load": load, "n": len(e2e), "first_half_p50_ms": first,
             "second_half_p50_ms": second, "ratio": second / first if first else None}
        )  # fmt: skip
    return out


def compare_classes(
    records: Sequence[RequestRecord], names: Sequence[str], seed: int = 0
) -> list[dict[str, Any]]:
    """``_comparisons`` prompt class by prompt class: each endpoint against ``names[0]`` at the same load
    and on the same class of prompt (a workload mixing classes can hide a class's speed-up in its p50)."""
    groups: dict[tuple[str, str], list[RequestRecord]] = {}
    where: dict[str, tuple[str, str]] = {}
    for r in records:
        if not r.warmup and r.endpoint in names:
            label = f"{r.load} {r.prompt_class}"
            groups.setdefault((r.endpoint, label), []).append(r)
            where[label] = (r.load, r.prompt_class)
    keys = sorted(groups, key=lambda k: (list(where).index(k[1]), list(names).index(k[0])))
    return [
        {**c, "load": where[c["load"]][0], "class": where[c["load"]][1]}
        for c in _comparisons(groups, keys, seed)
    ]
