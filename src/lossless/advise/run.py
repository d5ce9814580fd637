"""``lossless advise``: AdviseOptions -> the runs' records -> per endpoint and load level, time-outs and
the hedging trade-off; per load level with two or more endpoints, failover -> an ``AdviseResult``
(``report.advise`` renders it).
Nothing at this module's top imports numpy.
"""

from __future__ import annotations

import math
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lossless.advise.executed import chain_label, executed
from lossless.advise.options import AdviseOptions
from lossless.advise.result import AdviseResult, Estimate, Executed, GroupAdvice, Prediction
from lossless.errors import UsageError
from lossless.records import Failure, RequestRecord
from lossless.rundir import RECORDS, SUMMARY, read_records, saved_config

if TYPE_CHECKING:
    import numpy as np

    from lossless.advise.simulate import Policy, Samples

Price = tuple[float | None, float | None]  # USD per million (input, output) tokens
Key = tuple[str, str]  # (endpoint, load)
MIN_ATTEMPTS = 5  # fewer, and a p99 is the largest of a handful: no advice, a note instead
ALONE = "alone"


# --- reading ------------------------------------------------------------------------------------------


def _price(entry: object) -> tuple[str, Price] | None:
    """An endpoint entry of summary.json's config -> (name, price), None when it is not shaped so."""
    if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
        return None
    pair = entry.get("price_usd_per_million")
    if not (isinstance(pair, list) and len(pair) >= 2):
        return entry["name"], (None, None)
    # [input, output] or, from newer runs, [input, output, cached input]: every input token is charged at
    # the input price here, an upper bound where a provider bills cached ones for less
    p_in, p_out = (float(p) if isinstance(p, int | float) and math.isfinite(p) else None for p in pair[:2])
    return entry["name"], (p_in, p_out)


def _prices(run_dir: Path, notes: list[str]) -> dict[str, Price]:
    """Prices from summary.json, read leniently: they only add costs in USD, so a summary.json missing or
    unreadable (a run stopped before it wrote one) costs them, with a note, and nothing else."""
    try:
        config = saved_config(run_dir)
    except (OSError, ValueError, RecursionError) as exc:
        path = run_dir / SUMMARY
        notes.append(f"{path}: not read ({type(exc).__name__}), so no prices: costs are in attempts only")
        return {}
    entries = config.get("endpoints")
    pairs = (_price(e) for e in (entries if isinstance(entries, list) else []))
    return dict(p for p in pairs if p is not None)


def _policy(run_dir: Path) -> dict[str, Any] | None:
    """summary.json's ``config.policy``: the run was made under --hedge-after or --failover."""
    try:
        policy = saved_config(run_dir).get("policy")
    except (OSError, ValueError, RecursionError):
        return None
    return policy if isinstance(policy, dict) else None


def read_attempts(
    run_dirs: Sequence[Path],
) -> tuple[dict[Key, list[RequestRecord]], dict[str, Price], list[str]]:
    """The runs' measured attempts by (endpoint, load) in the order first sent (warm-up and attempts the
    run's end cancelled left out: neither says how the endpoint answers, nor does one a policy abandoned),
    prices and notes. Runs made under a policy are read only when no plain run is given (``run``)."""
    groups: dict[Key, list[RequestRecord]] = {}
    prices: dict[str, Price] = {}
    notes: list[str] = []
    where: dict[Key, Path] = {}
    for d in run_dirs:
        path = d / RECORDS
        if not path.is_file():
            raise UsageError(f"{d} holds no records.jsonl (what bench --out writes): nothing to advise from")
        records, found = read_records(path)
        notes += found
        if not records:
            raise UsageError(f"{path} holds no records: nothing to advise from")
        for name, price in _prices(d, notes).items():
            prices.setdefault(name, price)
        for r in records:
            if not r.measured or r.error_kind in (Failure.CANCELLED, Failure.ABANDONED):
                continue
            key = (r.endpoint, r.load)
            if where.setdefault(key, d) != d:
                notes.append(f"{key[0]} at {key[1]} is in {where[key]} and {d}: their attempts are pooled")
                where[key] = d  # one note per run that adds to the pool
            groups.setdefault(key, []).append(r)
    return groups, prices, list(dict.fromkeys(notes))


# --- predictions --------------------------------------------------------------------------------------

INDEPENDENT = (
    "Attempts are independent draws from the measured attempts of their endpoint at their load level: an "
    "endpoint that is slow or failing for every attempt at the same moment (an outage, a full queue) "
    "makes hedging and failover help less than predicted."
)
ASSUMPTIONS = (  # what every prediction's numbers mean
    INDEPENDENT,
    "Latency percentiles are over all requests, a request with no answer counting as never answered "
    "('no answer' when more requests failed than the percentile leaves room for).",
    "Costs count attempts sent; with prices in summary.json also USD, each attempt charged the tokens its "
    "record reports, a cancelled or abandoned one in full (an upper bound).",
)


def _prediction(
    kind: str,
    key: tuple[tuple[str, ...], str],
    delay: float | None,
    label: str,
    stats: Mapping[str, Estimate],
    priced: bool,
    assumptions: tuple[str, ...],
) -> Prediction:
    endpoints, load = key
    return Prediction(
        kind,
        load,
        endpoints,
        delay,
        label,
        stats["p50"],
        stats["p95"],
        stats["p99"],
        stats["error_rate"],
        stats["attempts_per_request"],
        stats["attempts_per_success"],
        stats["usd_per_success"] if priced else None,
        assumptions,
    )


def _hedging(
    key: Key, s: Samples, options: AdviseOptions, rng: np.random.Generator, also: Sequence[float] = ()
) -> tuple[Prediction, ...]:
    from lossless.advise import recommend, simulate

    name, load = key
    delays = options.hedge_delays if options.hedge_delays is not None else recommend.hedge_delays(s)
    delays = tuple(sorted({*delays, *also}))  # and the delays of the hedges executed beside it
    policies: dict[str, Policy] = {ALONE: simulate.single(name)}
    policies |= {f"{d:g}": simulate.hedge(name, d) for d in delays}
    found = simulate.evaluate(policies, {name: s}, rng, options.draws, options.resamples)
    at = f"Measured at load {load}: the prediction holds for traffic like the run's at that level."
    out = [
        _prediction(
            "single", ((name,), load), None, f"{name}, one attempt", found[ALONE], s.priced, (INDEPENDENT, at)
        )
    ]
    added = (
        "A hedge adds its extra requests to the load the run measured: near saturation that load lengthens "
        "every attempt, which is not modelled."
    )
    for d in delays:
        label = f"{name}, hedged after {d:g} ms"
        out.append(
            _prediction(
                "hedge", ((name,), load), d, label, found[f"{d:g}"], s.priced, (INDEPENDENT, at, added)
            )
        )
    return tuple(out)


def _chains(names: Sequence[str], baseline: Mapping[str, Prediction]) -> list[tuple[str, ...]]:
    """Every ordered pair; with three or more endpoints also all of them, fastest p99 (then p50) first."""
    pairs: list[tuple[str, ...]] = [(a, b) for a in names for b in names if a != b]
    if len(names) < 3:
        return pairs
    best = sorted(names, key=lambda n: (baseline[n].p99.value, baseline[n].p50.value))
    return [*pairs, tuple(best)]


def _failover(
    load: str,
    found: Mapping[str, Samples],
    baseline: Mapping[str, Prediction],
    options: AdviseOptions,
    rng: np.random.Generator,
    also: Sequence[float] = (),
) -> list[Prediction]:
    from lossless.advise import recommend, simulate

    policies: dict[str, Policy] = {}
    plans: dict[str, tuple[tuple[str, ...], float]] = {}
    for chain in _chains(list(found), baseline):
        given = options.failover_delays
        delays = (*given, math.inf) if given is not None else recommend.failover_delays(found[chain[0]])
        for d in sorted({*delays, *also}):  # and the waits of failovers executed beside it
            plans[chain_label(chain, d)] = (chain, d)
            policies[chain_label(chain, d)] = simulate.failover(chain, d)
    estimates = simulate.evaluate(policies, found, rng, options.draws, options.resamples)
    out = []
    for label, (chain, d) in plans.items():
        moved = (
            f"Measured at load {load}, each endpoint taking all of its run's traffic; in failover "
            f"{', '.join(chain[1:])} takes only the requests moved to it, and {chain[0]} all of them."
        )
        priced = all(found[n].priced for n in chain)
        delay = None if math.isinf(d) else d
        out.append(
            _prediction(
                "failover", (chain, load), delay, label, estimates[label], priced, (INDEPENDENT, moved)
            )
        )
    return out


def _group(
    key: Key,
    records: Sequence[RequestRecord],
    s: Samples,
    options: AdviseOptions,
    rng: np.random.Generator,
    also: Sequence[float] = (),
) -> GroupAdvice:
    from lossless.advise import recommend

    q, margin, b = options.timeout_quantile, options.timeout_margin, options.resamples
    timeouts = tuple(recommend.timeout(records, phase, q, margin, rng, b) for phase in recommend.PHASES)
    errors = Counter(r.error_kind for r in records if r.error_kind is not None)
    return GroupAdvice(
        key[0],
        key[1],
        len(records),
        sum(r.ok for r in records),
        dict(sorted(errors.items())),
        timeouts,
        _hedging(key, s, options, rng, also),
    )


def run(options: AdviseOptions) -> AdviseResult:
    import numpy as np

    from lossless.advise import simulate

    policies = {d: _policy(d) for d in options.run_dirs}
    plain = [d for d, p in policies.items() if p is None]
    # a policy's runs predict only when alone
    groups, prices, notes = read_attempts(plain or options.run_dirs)
    notes += [
        f"{d} was run under a policy (bench --hedge-after / --failover): its attempts are not independent, "
        "so predictions from them are biased; what it measured is under 'executed'"
        for d in ([] if plain else options.run_dirs)
    ]
    done = _executed(policies)
    for key, recs in list(groups.items()):
        if len(recs) < MIN_ATTEMPTS:
            notes.append(
                f"{key[0]} at {key[1]}: {len(recs)} attempts, too few to advise on (fewer than "
                f"{MIN_ATTEMPTS})"
            )
            del groups[key]
    if not groups:
        raise UsageError(f"no endpoint and load level with {MIN_ATTEMPTS} or more measured attempts")
    order = {load: i for i, load in enumerate(dict.fromkeys(load for _, load in groups))}
    keys = sorted(groups, key=lambda k: order[k[1]])  # by load level, then as first sent
    found = {k: simulate.samples(groups[k], prices.get(k[0], (None, None))) for k in keys}
    # a generator per group and per load's failover, seeded by their names: adding a run or an endpoint
    # leaves the other groups' numbers as they were
    rng = lambda *names: np.random.default_rng([options.seed, zlib.crc32("\0".join(names).encode())])  # noqa: E731
    hedged = {
        (e.endpoint, e.load): e.delay_ms for e in done if e.policy == "hedge" and e.delay_ms is not None
    }
    also = lambda k: (hedged[k],) if k in hedged else ()  # noqa: E731
    advice = tuple(_group(k, groups[k], found[k], options, rng(*k), also(k)) for k in keys)
    failover: list[Prediction] = []
    for load in order:
        here = {k[0]: found[k] for k in keys if k[1] == load}
        if len(here) >= 2:
            baseline = {g.endpoint: g.hedging[0] for g in advice if g.load == load}
            waits = [e.delay_ms for e in done if e.policy == "failover" and e.load == load and e.delay_ms]
            failover += _failover(load, here, baseline, options, rng("failover", load), waits)
    checked = tuple(_checked(e, advice, failover, notes) for e in done) if plain else done
    return AdviseResult(
        tuple(str(d) for d in options.run_dirs),
        advice,
        tuple(failover),
        ASSUMPTIONS,
        _settings(options),
        tuple(notes),
        checked,
    )


def _executed(policies: Mapping[Path, dict[str, Any] | None]) -> tuple[Executed, ...]:
    """What each run made under a policy measured, request by request."""
    out: list[Executed] = []
    for d, policy in policies.items():
        if policy is not None:
            out += executed(read_records(d / RECORDS)[0], policy)
    return tuple(out)


AGREE = 0.15  # a prediction and its execution agree when their p99s are this close (relative)


def _checked(
    e: Executed, advice: Sequence[GroupAdvice], failover: Sequence[Prediction], notes: list[str]
) -> Executed:
    """``e`` with the prediction of its policy from the plain runs, if one was made; a note where the two
    disagree by more than ``AGREE`` at p99."""
    candidates = [p for g in advice for p in g.hedging] if e.policy == "hedge" else failover
    found = next(
        (
            p
            for p in candidates
            if p.policy == e.policy
            and p.load == e.load
            and p.endpoints == e.chain
            and p.delay_ms == e.delay_ms
        ),
        None,
    )
    if found is None:
        return e
    measured, predicted = e.latency_ms["p99"], found.p99.value
    off = None if measured is None or predicted is None else measured / predicted - 1
    if (measured is None) != (predicted is None) or (off is not None and abs(off) > AGREE):
        said = "no answer" if measured is None else f"{measured:,.0f} ms"
        want = "no answer" if predicted is None else f"{predicted:,.0f} ms"
        notes.append(
            f"{e.label} at {e.load}: measured p99 {said} against {want} predicted from the plain run(s), "
            f"more than {AGREE:.0%} apart: the attempts of one request are not independent here (the "
            "same prompt slow every time, or a slow spell that hits every attempt): the prediction fails"
        )
    return replace(e, predicted=found)


def _settings(options: AdviseOptions) -> dict[str, Any]:
    return {
        "draws": options.draws,
        "resamples": options.resamples,
        "seed": options.seed,
        "timeout_rule": f"{options.timeout_margin:g} x p{options.timeout_quantile * 100:g}, rounded up",
        "hedge_delays_ms": None if options.hedge_delays is None else list(options.hedge_delays),
        "failover_delays_ms": None if options.failover_delays is None else list(options.failover_delays),
    }
