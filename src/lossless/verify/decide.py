"""The verdict at one look, from the tests' numbers alone (pure): equivalent, different, inconclusive, or
not settled yet (more samples at the next look).

1. A/B: the candidate against the baseline's pooled samples, Holm-corrected over every test (the
   sampling tests, the teacher-forced ones, the task accuracy) at this look's share of ``alpha``
   (budget.py's spending plan). A rejection is a difference when its effect also exceeds what the
   baseline shows against itself (A/A: two sets of its own samples) on that test, and ``aa_margin``
   times that when the A/A test itself rejects. The log-probability distance (distance.py: the same
   tokens scored by both, its excess over the baseline's own) is one more test in that family, of
   H0: the distance is within the tolerance.
   The contexts test is the exception: it tests each side against the baseline's own distribution,
   so its A/A effect is the baseline's own departure from it, not the noise of the A/B comparison (the
   A/A draws are fewer, and their estimate noisier); it sets a bar only when the A/A test rejects.
   "Different" rests on a Holm rejection at a level spent from ``alpha`` and nothing else, so a
   candidate that serves the baseline's distribution, within the tolerance of its log-probabilities,
   is flagged at most ``alpha`` of the time over all looks, whatever the A/A tests say.
2. The A/A tests (at ``alpha_aa``, each look) guard against a baseline that is not a fixed
   distribution (load-dependent kernels, caching, a pool of replicas): a drift shows there as much as
   between the endpoints, and a difference no larger than the drift is not evidence. They do not veto
   a difference well beyond it. Nothing found while the baseline differs from itself -> more samples;
   still so at the last look -> inconclusive.
3. Equivalent when every bound the run can compute is within its margin: the log-probability distance
   below the tolerance and the score difference by TOST, each at this look's share of
   ``alpha_equivalent`` (the score within ``tolerance_sd`` of one sample's score spread), and the task
   accuracy by TOST (90%). Not yet -> more samples; at the last look ->
   inconclusive, with the factor of more samples that would settle it. Before the last look, a test
   near a difference (Holm p below ``hint``, not yet below the look's level) also draws more samples:
   the samples a subtle difference needs (the contexts test's) are not cut short by equivalence on the
   score; this changes no error rate above, only where the run stops. Where the baseline cannot
   score text, nothing bounds the difference: equivalent only at the last look, when the tests have
   found nothing with every sample the budget buys.
4. Before all that: when the data cannot carry a verdict (too many failed requests, a baseline that
   does not sample at all), inconclusive at once, saying why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any, Literal

from lossless.analyze.paired import Paired
from lossless.verify.budget import Criteria, Look
from lossless.verify.distance import LogprobDistance
from lossless.verify.two_sample import Finding, holm

Verdict = Literal["equivalent", "different", "inconclusive"]
ONE_SAMPLE = frozenset({"contexts"})  # tests of each side against the baseline's own distribution
ONE_LOOK = Look()  # a run decided at once, at its only look


@dataclass(frozen=True)
class Gap:
    """The stratified difference of mean scores (candidate - baseline, nats/token) and its standard error."""

    difference: float
    se: float


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reasons: tuple[str, ...]
    aa_adjusted: tuple[float, ...]  # Holm-adjusted p-values, in the order of the A/A tests
    ab_adjusted: tuple[float, ...]  # ... of the A/B tests, then the task accuracy when present
    detectable: float | None  # nats/token: the score difference this look detects with 80% power
    sample_sd: float | None = None  # nats/token: one sample's score spread (the tolerance's unit)
    settled: bool = True  # False: inconclusive for now, the next look may settle it
    level: float = 0.0  # the Holm family's level at this look (its share of Criteria.alpha)
    bound: float | None = None  # nats/token: TOST's bound on the score difference at this look


def decide(
    aa: Sequence[Finding],
    ab: Sequence[Finding],
    criteria: Criteria,
    *,
    detectable: float | None,
    sample_sd: float | None = None,
    gap: Gap | None = None,
    tasks: Paired | None,
    distance: LogprobDistance | None = None,
    problems: Sequence[str] = (),
    extra: Sequence[tuple[str, float]] = (),
    look: Look = ONE_LOOK,
) -> Decision:
    """``distance``: the log-probability distance, when both sides gave log-probabilities (tested
    only with enough prompts). ``problems``: why the data cannot carry a verdict (too many failed
    requests, a baseline that does not sample); any of them makes it inconclusive, with whatever was
    found listed beside. ``extra``: further A/B tests as (what a rejection means, p-value), last in the
    Holm family. ``look``: where this look stands in the run (the default: a single, final look)."""
    level = look.level(criteria.alpha)
    aa_adj = holm([t.p_value for t in aa])
    if distance is not None and distance.p_above is not None:
        extra = [*extra, (distance_above(distance), distance.p_above)]
    ab_p = [t.p_value for t in ab] + ([tasks.p_mcnemar] if tasks else []) + [p for _, p in extra]
    ab_adj = holm(ab_p)
    bound = _bound(gap, look.level(criteria.alpha_equivalent))
    base: dict[str, Any] = {
        "aa_adjusted": tuple(aa_adj),
        "ab_adjusted": tuple(ab_adj),
        "detectable": detectable,
        "sample_sd": sample_sd,
        "level": level,
        "bound": bound,
    }
    unstable = {t.name: p for t, p in zip(aa, aa_adj, strict=True) if p < criteria.alpha_aa}
    found = _differences(aa, ab, ab_adj, criteria, unstable, level)
    found += _beside(ab_adj[len(ab) :], level, tasks, extra)
    if problems:
        return Decision("inconclusive", (*problems, *(f"found anyway: {f}" for f in found)), **base)
    if found:
        return Decision("different", tuple(found), **base)
    if unstable:
        listed = ", ".join(f"{name} (p={p:.3g})" for name, p in unstable.items())
        why = f"the baseline differs from itself on {listed}: its noise cannot be told from a difference"
        if not look.final:
            return Decision("inconclusive", (why + ": more samples",), **base, settled=False)
        return Decision(
            "inconclusive", (why + "; check for load, caching or unseeded randomness, then rerun",), **base
        )
    eq_level = look.level(criteria.alpha_equivalent)
    verdict, said = _equivalence(criteria, gap, bound, detectable, sample_sd, tasks, distance, eq_level)
    if verdict == "equivalent" and not look.final:
        names = [t.name for t in ab] + ["task accuracy"] * bool(tasks) + [what for what, _ in extra]
        if wait := _wait(names, ab_adj, criteria, level, scored=gap is not None):
            return Decision("inconclusive", (wait,), **base, settled=False)
    return Decision(verdict, said, **base, settled=verdict == "equivalent" or look.final)


def _distance_short(distance: LogprobDistance | None, level: float) -> list[str]:
    """Why the distance does not yet bound the difference below the tolerance ([] when it does, or when
    there is no test of it)."""
    if distance is None or distance.p_below is None or distance.p_below < level:
        return []
    return [
        f"the log-probability distance {distance.value:.3g} nats a token (excess 95% CI "
        f"[{distance.ci95[0]:.3g}, {distance.ci95[1]:.3g}]) is not yet below the tolerance "
        f"{distance.tolerance:g} (p={distance.p_below:.3g}, this look's level {level:.2g})"
    ]


def _score_short(
    criteria: Criteria, gap: Gap | None, bound: float | None, sample_sd: float | None
) -> list[str]:
    tolerance = None if sample_sd is None else criteria.tolerance_sd * sample_sd
    if gap is None or bound is None or tolerance is None or bound <= tolerance:
        return []
    room = tolerance - abs(gap.difference)
    more = (
        f"about {math.ceil(((bound - abs(gap.difference)) / room) ** 2 * 10) / 10:g}x the samples would "
        "settle it"
        if room > 0
        else "the difference itself is at the tolerance"
    )
    return [
        f"the score difference is bounded to +-{bound:.3g} nats/token, not within the tolerance "
        f"+-{tolerance:.3g} ({criteria.tolerance_sd:g} sd): {more}"
    ]


def _tasks_short(criteria: Criteria, tasks: Paired | None) -> list[str]:
    if not tasks or tasks.equivalent:
        return []
    width, centre = (tasks.ci90[1] - tasks.ci90[0]) / 2, abs(tasks.ci90[1] + tasks.ci90[0]) / 2
    room = criteria.margin - centre  # what the half-width must shrink to, the centre staying put
    more = (
        f"about {math.ceil((width / room) ** 2 * 10) / 10:g}x the tasks would settle it"
        if room > 0
        else "the difference itself is at the margin"
    )
    return [
        f"task accuracy difference 90% CI [{tasks.ci90[0]:+.2f}, {tasks.ci90[1]:+.2f}] is not within "
        f"+-{criteria.margin:g}: {more}"
    ]


def _beside(
    adjusted: Sequence[float], level: float, tasks: Paired | None, extra: Sequence[tuple[str, float]]
) -> list[str]:
    """Differences beside the two-sample tests: task accuracy and ``extra`` (the distance among them;
    their Holm-adjusted p-values, in that order, in ``adjusted``)."""
    found = []
    if tasks and adjusted[0] < level:
        found.append(
            f"task accuracy {tasks.difference:+.0%} over {tasks.n} tasks (McNemar p={adjusted[0]:.3g})"
        )
    found += [
        f"{what} (Holm p={p:.3g})"
        for (what, _), p in zip(extra, adjusted[bool(tasks) :], strict=True)
        if p < level
    ]
    return found


def distance_above(d: LogprobDistance) -> str:
    """What a rejection of "within the tolerance" says."""
    return (
        f"log-probabilities: the same tokens are {d.value:.3g} nats apart (baseline against itself "
        f"{d.noise:.3g}; excess 95% CI [{d.ci95[0]:.3g}, {d.ci95[1]:.3g}] over {d.prompts} prompts), above "
        f"the tolerance {d.tolerance:g}: as far apart as {d.nearest}"
    )


def _wait(
    names: Sequence[str], adjusted: Sequence[float], criteria: Criteria, level: float, *, scored: bool
) -> str:
    """Why an equivalent look before the last is not the answer yet ("" when it is): a test near a
    difference, or no score to bound the difference (then only every sample the budget buys will do)."""
    near = [f"{n} (Holm p={p:.3g})" for n, p in zip(names, adjusted, strict=True) if p < criteria.hint]
    if near:
        return f"near a difference on {', '.join(near)} (this look's level: {level:.2g}): more samples"
    if not scored:
        return "no teacher-forced scores bound the score difference: equivalence needs every look"
    return ""


def _bound(gap: Gap | None, level: float) -> float | None:
    """TOST at ``level``: the score difference lies within +-bound with confidence 1 - 2 * level (each
    one-sided test at ``level``)."""
    return None if gap is None else abs(gap.difference) + NormalDist().inv_cdf(1 - level) * gap.se


def _differences(
    aa: Sequence[Finding],
    ab: Sequence[Finding],
    adjusted: Sequence[float],
    criteria: Criteria,
    unstable: dict[str, float],
    level: float,
) -> list[str]:
    noise = {t.name: max(0.0, t.effect) if t.name in ONE_SAMPLE else abs(t.effect) for t in aa}
    found = []
    for t, p in zip(ab, adjusted, strict=False):
        drift = noise.get(t.name, 0.0)
        bar = criteria.aa_margin * drift if t.name in unstable else 0.0 if t.name in ONE_SAMPLE else drift
        if p < level and abs(t.effect) > bar:
            flag = ", baseline unstable on it" if t.name in unstable else ""
            found.append(f"{t.name}: effect {t.effect:+.3g} (A/A {drift:.3g}{flag}), Holm p={p:.3g}")
    return found


def _equivalence(
    criteria: Criteria,
    gap: Gap | None,
    bound: float | None,
    detectable: float | None,
    sample_sd: float | None,
    tasks: Paired | None,
    distance: LogprobDistance | None = None,
    level: float = 0.05,
) -> tuple[Verdict, tuple[str, ...]]:
    """``level``: this look's share of ``alpha_equivalent``, for the distance's test."""
    close = distance is not None and distance.p_below is not None and distance.p_below < level
    short = [
        *_distance_short(distance, level),
        *_score_short(criteria, gap, bound, sample_sd),
        *_tasks_short(criteria, tasks),
    ]
    if short:
        return "inconclusive", tuple(short)
    said = []
    if distance is not None and close:
        said.append(
            f"the same tokens' log-probabilities are {distance.value:.3g} nats apart (excess 95% CI "
            f"[{distance.ci95[0]:.3g}, {distance.ci95[1]:.3g}] over {distance.prompts} prompts), below the "
            f"tolerance {distance.tolerance:g}: as far apart as {distance.nearest}"
        )
    if bound is not None and sample_sd:
        said.append(
            f"the score difference is within +-{bound:.3g} nats/token ({bound / sample_sd:.2g} sd; "
            f"tolerance {criteria.tolerance_sd:g} sd)"
        )
    if detectable is not None and sample_sd:
        said.append(
            f"a score difference of {detectable:.3g} nats/token ({detectable / sample_sd:.2g} sd) "
            "would have been detected (80% power)"
        )
    if gap is None:
        said.append(
            "no teacher-forced scores (the baseline cannot score text): "
            "the sampling tests' thresholds bound the difference"
        )
    if tasks:
        said.append(
            f"task accuracy equivalent within +-{criteria.margin:g} "
            f"(90% CI [{tasks.ci90[0]:+.2f}, {tasks.ci90[1]:+.2f}])"
        )
    return "equivalent", tuple(said)
