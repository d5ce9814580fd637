"""The log-probability distance between two endpoints: an estimate with a confidence interval, tested
against a tolerance at stated error rates. Pure numpy, no I/O.

Both endpoints give the log-probability of the same token at the same context (paired_tokens.py
gathers them); the distance of one prompt is the mean |difference| over its tokens, and the distance
of a run is the mean over prompts. What is tested is its *excess* over the baseline's own: the same
measure taken between the baseline and itself (0 for a deterministic server), prompt by prompt, so that
a baseline whose numerics wander (batch-dependent kernels) is not held against the candidate.

The prompt is the unit that is resampled (a bootstrap over prompts, not tokens: tokens of one answer
share their context and their errors). The bootstrap is studentized (bootstrap-t: each resample's mean
in units of its own standard error), which corrects for the skew of distances, since they cannot go below
0 but can go far above: a plain percentile bootstrap called a distance exactly at the tolerance "below
it" in 11-18% of simulated runs at a nominal 5% (16 prompts, gamma-distributed), bootstrap-t in 6-9%,
a t-test in 11-17% (tests/unit/verify/test_verify_distance.py holds the simulation). It gives the
interval and both one-sided tests:

    different   H0: excess <= tolerance (a p-value beside the sampled tests, in their Holm family)
    equivalent  H0: excess >= tolerance (TOST's one side that matters: a distance is never negative)

With fewer than ``MIN_PROMPTS`` prompts the bootstrap has too few distinct resamples to carry such
levels: the distance is reported, and tests nothing.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

MIN_PROMPTS = 8
RESAMPLES = 20_000  # the smallest p-value is 1/(RESAMPLES+1): well under Holm's strictest level

# Where measured distances fall on the embedded SmolLM2 Q4_1 (docs/results/2026-12-06-verify-distance.md:
# benchmarks/verify_calibration.py's cells, and single development runs for Q5_1): (what was
# compared, nats a token, the lowest and highest figure over both pairings, teacher-forced and greedy).
# The verdict names the nearest, so a figure reads as a kind of difference.
SCALE: tuple[tuple[str, float, float], ...] = (
    ("the same server and weights", 0.0, 0.0),
    # teacher-forced 0.052-0.055 (either side the baseline), greedy 0.057-0.067, development runs 0.045
    ("two implementations of the same weights (llama.cpp's kernels and ours)", 0.045, 0.067),
    ("4-bit against bfloat16 of the same dequantized weights", 0.05, 0.06),
    ("a 4-bit to 5-bit requantization (Q4_1 to Q5_1)", 0.23, 0.29),
    # teacher-forced 0.25-0.26 (development runs); greedy 0.325-0.33 (5 calibration runs, two llama-servers)
    ("a 4-bit to 3-bit requantization (Q4_1 to Q3_K_M)", 0.25, 0.33),
    # teacher-forced 0.46-0.53 (development runs); greedy 0.754, where the answers part early
    ("a 4-bit to 2-bit requantization (Q4_1 to Q2_K)", 0.46, 0.754),
)


@dataclass(frozen=True)
class PromptTokens:
    """One prompt's paired tokens: |candidate - baseline| and |baseline - baseline again| per token."""

    prompt: int
    apart: tuple[float, ...]
    noise: tuple[float, ...]  # may be empty: the baseline's own measure found no common token


@dataclass(frozen=True)
class LogprobDistance:
    """The run's distance (nats a token) and what it says against the tolerance."""

    source: str  # how the tokens were paired (paired_tokens.SOURCES)
    value: float  # candidate vs baseline: the mean over prompts of a prompt's mean |difference|
    noise: float  # baseline vs itself, the same way
    excess: float  # value - noise: what is tested
    ci95: tuple[float, float]  # of the excess, a bootstrap over prompts
    prompts: int
    tokens: int
    tolerance: float
    p_above: float | None  # H0 excess <= tolerance; None: too few prompts to test
    p_below: float | None  # H0 excess >= tolerance
    nearest: str  # the SCALE entry nearest to the value


def estimate(
    prompts: Sequence[PromptTokens], tolerance: float, source: str, seed: int = 0
) -> LogprobDistance | None:
    """The distance from every prompt with paired tokens; None when none has any."""
    kept = [p for p in prompts if p.apart]
    if not kept:
        return None
    apart = np.array([np.mean(p.apart) for p in kept])
    noise = np.array([np.mean(p.noise) if p.noise else 0.0 for p in kept])
    excess = apart - noise
    mean, se, null = _bootstrap_t(excess, seed)
    with np.errstate(divide="ignore", invalid="ignore"):
        t = np.float64(mean - tolerance) / se  # +-inf when every prompt is as far as every other
    lo, hi = mean - float(np.quantile(null, 0.975)) * se, mean - float(np.quantile(null, 0.025)) * se
    testable = len(kept) >= MIN_PROMPTS
    p_above = (1 + int(np.sum(null >= t))) / (RESAMPLES + 1) if testable else None
    p_below = (1 + int(np.sum(null <= t))) / (RESAMPLES + 1) if testable else None
    value = float(apart.mean())
    return LogprobDistance(
        source=source,
        value=value,
        noise=float(noise.mean()),
        excess=float(excess.mean()),
        ci95=(float(lo), float(hi)),
        prompts=len(kept),
        tokens=sum(len(p.apart) for p in kept),
        tolerance=tolerance,
        p_above=p_above,
        p_below=p_below,
        nearest=nearest(value),
    )


def _bootstrap_t(x: np.ndarray, seed: int) -> tuple[float, float, np.ndarray]:
    """The mean, its standard error, and the studentized resampled means: (mean* - mean) / se*."""
    k = len(x)
    mean, se = float(x.mean()), float(x.std(ddof=1) / math.sqrt(k)) if k > 1 else 0.0
    rng = np.random.default_rng(seed)
    resampled = x[rng.integers(0, k, size=(RESAMPLES, k))]
    means = resampled.mean(axis=1)
    ses = resampled.std(axis=1, ddof=1) / math.sqrt(k) if k > 1 else np.zeros(RESAMPLES)
    with np.errstate(divide="ignore", invalid="ignore"):
        null = (means - mean) / ses
    return mean, se, np.nan_to_num(null, nan=0.0)  # 0/0: a resample of one repeated value, at the mean


def nearest(value: float) -> str:
    """The SCALE entry nearest to ``value`` on a log scale (a ratio, since distances span 100x), 0 apart."""
    if value <= 0.0:
        return SCALE[0][0]

    def far(entry: tuple[str, float, float]) -> float:
        _, lo, hi = entry
        if lo <= value <= hi:
            return 0.0
        edge = lo if value < lo else hi
        return math.inf if edge <= 0 else abs(math.log(value / edge))

    return min(SCALE, key=far)[0]
