"""The verdict, from the tests' numbers alone (pure): equivalent, different, or inconclusive.

1. A/B: the candidate against the baseline's pooled samples, Holm-corrected over every test (the
   sampling tests, the teacher-forced ones, the task accuracy). A rejection is a difference when its
   effect also exceeds what the baseline shows against itself (A/A: two sets of its own samples) on
   that test, and ``aa_margin`` times that when the A/A test itself rejects. Log-probabilities of the
   same text disagreeing by more than the tolerance (when both endpoints score) -> different.
   The contexts test is the exception: it tests each side against the baseline's own distribution,
   so its A/A effect is the baseline's own departure from it, not the noise of the A/B comparison (the
   A/A draws are fewer, and their estimate noisier); it sets a bar only when the A/A test rejects.
   Apart from that deterministic check, "different" rests on a Holm rejection, so a candidate that
   serves the baseline's distribution is flagged at most ``alpha`` of the time, whatever the A/A
   tests say.
2. The A/A tests guard against a baseline that is not a fixed distribution (load-dependent
   kernels, caching, a pool of replicas): a drift shows there as much as between the endpoints, and
   a difference no larger than the drift is not evidence. They do not veto a difference well beyond
   it: a 5% A/A false alarm would otherwise cost every lossy candidate 5% of its power.
   Nothing found while the baseline differs from itself -> inconclusive.
3. Otherwise equivalent only if the run had the power: the teacher-forced score difference it
   would detect (80% power) is within the tolerance (in sd of one sample's score), and the task
   accuracy is equivalent by TOST.
   Else inconclusive, with the factor of more samples that would settle it.
4. Before all that: when the data cannot carry a verdict (too many failed requests, a baseline that
   does not sample at all), inconclusive, saying why.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from lossless.analyze.paired import Paired
from lossless.verify.two_sample import Finding, holm

Verdict = Literal["equivalent", "different", "inconclusive"]
AGREE_FLOOR = 10.0  # agreement must exceed this many times the baseline's own scoring noise
ONE_SAMPLE = frozenset({"contexts"})  # tests of each side against the baseline's own distribution


@dataclass(frozen=True)
class Criteria:
    alpha: float = 0.05  # family-wise error rate of each family (A/A, A/B)
    # The score difference equivalence must be able to rule out, in standard deviations of one sample's
    # score: a scale-free margin (nats/token mean little across models). The default budget detects
    # about 0.5 sd with 80% power at the Holm family's strictest level.
    tolerance_sd: float = 0.6
    margin: float = 0.1  # task accuracy: the TOST equivalence margin (absolute)
    agreement: float = 0.02  # nats/token: scoring the same text may differ this much (kernels, batching)
    aa_margin: float = 2.0  # a test the baseline fails against itself needs this many times its drift


@dataclass(frozen=True)
class Agreement:
    """Teacher-forced scores of the same texts under both endpoints (when both can score)."""

    mean_abs_diff: float  # candidate vs baseline, nats/token
    baseline_noise: float  # baseline vs itself, nats/token
    n: int  # texts (teacher-forced) or tokens (greedy)
    source: str = "teacher-forced"  # or "greedy": chosen tokens' log-probabilities until the answers part


@dataclass(frozen=True)
class Decision:
    verdict: Verdict
    reasons: tuple[str, ...]
    aa_adjusted: tuple[float, ...]  # Holm-adjusted p-values, in the order of the A/A tests
    ab_adjusted: tuple[float, ...]  # ... of the A/B tests, then the task accuracy when present
    detectable: float | None  # nats/token: the score difference this run detects with 80% power
    sample_sd: float | None = None  # nats/token: one sample's score spread (the tolerance's unit)


def decide(
    aa: Sequence[Finding],
    ab: Sequence[Finding],
    criteria: Criteria,
    *,
    detectable: float | None,
    sample_sd: float | None = None,
    tasks: Paired | None,
    agreement: Agreement | None,
    problems: Sequence[str] = (),
    extra: Sequence[tuple[str, float]] = (),
) -> Decision:
    """``problems``: why the data cannot carry a verdict (too many failed requests, a baseline that
    does not sample); any of them makes it inconclusive, with whatever was found listed beside.
    ``extra``: further A/B tests as (what a rejection means, p-value), last in the Holm family."""
    aa_adj = holm([t.p_value for t in aa])
    ab_p = [t.p_value for t in ab] + ([tasks.p_mcnemar] if tasks else []) + [p for _, p in extra]
    ab_adj = holm(ab_p)
    base: dict[str, Any] = {
        "aa_adjusted": tuple(aa_adj),
        "ab_adjusted": tuple(ab_adj),
        "detectable": detectable,
        "sample_sd": sample_sd,
    }
    unstable = {t.name: p for t, p in zip(aa, aa_adj, strict=True) if p < criteria.alpha}
    found = _differences(aa, ab, ab_adj, criteria, unstable)
    at = len(ab) + bool(tasks)  # where extra's adjusted p-values start
    if tasks and ab_adj[at - 1] < criteria.alpha:
        found.append(
            f"task accuracy {tasks.difference:+.0%} over {tasks.n} tasks (McNemar p={ab_adj[at - 1]:.3g})"
        )
    found += [
        f"{what} (Holm p={p:.3g})"
        for (what, _), p in zip(extra, ab_adj[at:], strict=True)
        if p < criteria.alpha
    ]
    if agreement and agreement.mean_abs_diff > max(
        criteria.agreement, AGREE_FLOOR * agreement.baseline_noise
    ):
        what = (
            f"{agreement.n} texts" if agreement.source == "teacher-forced" else f"{agreement.n} greedy tokens"
        )
        found.append(
            f"log-probabilities of the same {what} differ by "
            f"{agreement.mean_abs_diff:.3g} nats/token "
            f"(baseline vs itself: {agreement.baseline_noise:.3g})"
        )
    if problems:
        return Decision("inconclusive", (*problems, *(f"found anyway: {f}" for f in found)), **base)
    if found:
        return Decision("different", tuple(found), **base)
    if unstable:
        listed = ", ".join(f"{name} (p={p:.3g})" for name, p in unstable.items())
        why = f"the baseline differs from itself on {listed}: its noise cannot be told from a difference"
        return Decision(
            "inconclusive", (why + "; check for load, caching or unseeded randomness, then rerun",), **base
        )
    return Decision(*_power(criteria, detectable, sample_sd, tasks), **base)


def _differences(
    aa: Sequence[Finding],
    ab: Sequence[Finding],
    adjusted: Sequence[float],
    criteria: Criteria,
    unstable: dict[str, float],
) -> list[str]:
    noise = {t.name: max(0.0, t.effect) if t.name in ONE_SAMPLE else abs(t.effect) for t in aa}
    found = []
    for t, p in zip(ab, adjusted, strict=False):
        drift = noise.get(t.name, 0.0)
        bar = criteria.aa_margin * drift if t.name in unstable else 0.0 if t.name in ONE_SAMPLE else drift
        if p < criteria.alpha and abs(t.effect) > bar:
            flag = ", baseline unstable on it" if t.name in unstable else ""
            found.append(f"{t.name}: effect {t.effect:+.3g} (A/A {drift:.3g}{flag}), Holm p={p:.3g}")
    return found


def _power(
    criteria: Criteria, detectable: float | None, sample_sd: float | None, tasks: Paired | None
) -> tuple[Verdict, tuple[str, ...]]:
    short: list[str] = []
    tolerance = None if sample_sd is None else criteria.tolerance_sd * sample_sd
    if detectable is not None and tolerance is not None and detectable > tolerance:
        factor = math.ceil((detectable / tolerance) ** 2 * 10) / 10
        short.append(
            f"the run detects score differences of {detectable:.3g} nats/token, above the tolerance "
            f"{tolerance:.3g} ({criteria.tolerance_sd:g} sd): about {factor:g}x the samples would settle it"
        )
    if tasks and not tasks.equivalent:
        width = (tasks.ci90[1] - tasks.ci90[0]) / 2
        factor = math.ceil((width / criteria.margin) ** 2 * 10) / 10
        short.append(
            f"task accuracy difference 90% CI [{tasks.ci90[0]:+.2f}, {tasks.ci90[1]:+.2f}] is not within "
            f"+-{criteria.margin:g}: about {factor:g}x the tasks would settle it"
        )
    if short:
        return "inconclusive", tuple(short)
    said = []
    if detectable is not None and sample_sd:
        said.append(
            f"a score difference of {detectable:.3g} nats/token ({detectable / sample_sd:.2g} sd) "
            "would have been detected (80% power)"
        )
    if detectable is None:
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
