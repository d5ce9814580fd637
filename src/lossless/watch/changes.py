"""Has it changed? Two rules over one key figure's per-run values, oldest first. Pure numbers.

band          A run is flagged when it lies outside median ± K(n) x 1.4826 x MAD of the n runs before it
              (the last WINDOW at most; judged once MIN_HISTORY came before). 1.4826 x MAD estimates the
              standard deviation of normal noise without being dragged by the outliers it is there to
              find; but from a few runs it is itself noisy (from 5 runs, under 60% of the truth more
              than a third of the time), so K(n) is the 99.9th percentile of |new - median| / (1.4826 x
              MAD) when all n + 1 runs are normal noise: a stable run is flagged one time in a thousand,
              whatever n. The band is never narrower than its figure's ``Floor`` (± 10% of the median and
              5 ms for times, 10% for speeds, 5 points for the error rate): runs that agree to the
              millisecond would otherwise make every wobble a flag, and a client's own jitter is a few ms
              on a busy machine.
change point  Pettitt's test (1979): at each split of the series into before and after (MIN_SIDE runs or
              more each side) the Mann-Whitney statistic of before against after; K is its largest absolute
              value. Its p-value is the share of random orderings of the same values whose K is as large
              (PERMUTATIONS of them, seeded, so the same history always gives the same answer). Where K is
              reached is a poor place for the change when it is not mid-series (|U_t| is largest mid-series
              for any perfect step), so the change is placed at the split whose two medians fit the values
              best (least absolute deviations). A change is reported when p < ALPHA and the medians either
              side differ by more than the floor: significant and big enough to matter.

The band catches a run that is off now (a bad hour); the change point, a level that moved and stayed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.stats import rankdata

MAD_SIGMA = 1.4826  # MAD x this = the standard deviation, for normal noise
WINDOW = 20  # the band is drawn from at most this many runs before: a level that moved becomes the norm
MIN_HISTORY = 5  # runs before a run, for it to be judged against a band
# BAND_K[n] = K(n): the 99.9th percentile of |new - median| / (1.4826 x MAD) over n earlier runs, all
# standard normal; simulated, 4 million draws per n (numpy default_rng(20261201)); test_history.py checks
# a few.
# (Odd n estimate the median from one run, even n from two: hence the steps.)
BAND_K = {5: 47.6, 6: 18.34, 7: 17.87, 8: 11.6, 9: 11.32, 10: 8.75, 11: 8.67, 12: 7.41, 13: 7.31, 14: 6.52,
     15: 6.47, 16: 5.96, 17: 5.9, 18: 5.54, 19: 5.54, 20: 5.26}  # fmt: skip
ALPHA = 0.05  # Pettitt's test: the p-value under which a change is reported
MIN_SIDE = 2  # runs on each side of a change point, at least
MIN_RUNS = 6  # runs in a series, for the change-point test to run at all
PERMUTATIONS = 4999
SEED = 0


@dataclass(frozen=True)
class Floor:
    """The band's least half-width, and the least change point reported: the larger of the two."""

    relative: float  # a share of the median
    absolute: float  # in the figure's unit

    def at(self, center: float) -> float:
        return max(self.relative * abs(center), self.absolute)


FLOORS = {  # by unit
    "ms": Floor(0.10, 5.0),
    "tok/s": Floor(0.10, 0.0),
    "": Floor(0.0, 0.05),  # a share (the error rate): 5 percentage points
}


@dataclass(frozen=True)
class Band:
    center: float  # the median of the earlier runs
    lo: float
    hi: float
    runs: int  # how many earlier runs drew it


@dataclass(frozen=True)
class Change:
    at: int  # index of the first value after the change
    before: float  # median of the values before it
    after: float  # ... and from it on
    statistic: float  # Pettitt's K
    p: float


def band(earlier: Sequence[float], floor: Floor) -> Band | None:
    """The band a next run should fall in, from the runs before it; None with fewer than MIN_HISTORY.
    Every figure here is positive, so the band starts at 0 at the lowest."""
    recent = np.asarray(list(earlier)[-WINDOW:], dtype=float)
    if len(recent) < MIN_HISTORY:
        return None
    center = float(np.median(recent))
    mad = float(np.median(np.abs(recent - center)))
    half = max(BAND_K[len(recent)] * MAD_SIGMA * mad, floor.at(center))
    return Band(center, max(0.0, center - half), center + half, len(recent))


def outside_band(values: Sequence[float], floor: Floor) -> list[tuple[int, Band]]:
    """Each run outside the band of the runs before it: (its index, that band)."""
    found = []
    for i, v in enumerate(values):
        b = band(values[:i], floor)
        if b is not None and not b.lo <= v <= b.hi:
            found.append((i, b))
    return found


def pettitt(
    values: Sequence[float], permutations: int = PERMUTATIONS, seed: int = SEED
) -> tuple[int, float, float]:
    """(the change's index, K, the permutation p-value). With ranks r (mid-ranks for ties) of T values,
    the Mann-Whitney statistic of the first t against the rest is U_t = 2 x (r_1 + ... + r_t) - t(T + 1);
    K = max |U_t| over t in MIN_SIDE..T-MIN_SIDE."""
    ranks = rankdata(np.asarray(values, dtype=float))
    splits = np.arange(MIN_SIDE, len(ranks) - MIN_SIDE + 1)
    if len(splits) == 0:
        raise ValueError(f"Pettitt's test needs {2 * MIN_SIDE} values or more, got {len(ranks)}")

    def u(cumulative: np.ndarray) -> np.ndarray:  # [..., T] running rank sums -> [..., splits] |U_t|
        return np.abs(2 * cumulative[..., splits - 1] - splits * (len(ranks) + 1))

    observed = u(np.cumsum(ranks))
    k = float(observed.max())
    rng = np.random.default_rng(seed)
    as_large = 0
    for start in range(0, permutations, 1000):  # in blocks: [1000, T] at a time, whatever T is
        block = rng.permuted(np.tile(ranks, (min(1000, permutations - start), 1)), axis=1)
        as_large += int((u(np.cumsum(block, axis=1)).max(axis=1) >= k - 1e-9).sum())
    return int(splits[int(observed.argmax())]), k, (as_large + 1) / (permutations + 1)


def best_split(values: Sequence[float]) -> int:
    """The split (MIN_SIDE values or more each side) whose two medians leave the least absolute
    deviation: where a step is."""
    x = np.asarray(values, dtype=float)
    costs = {
        t: float(np.abs(x[:t] - np.median(x[:t])).sum() + np.abs(x[t:] - np.median(x[t:])).sum())
        for t in range(MIN_SIDE, len(x) - MIN_SIDE + 1)
    }
    return min(costs, key=lambda t: costs[t])  # the first of equal ones


def change_point(values: Sequence[float], floor: Floor) -> Change | None:
    """The series' one most likely change, when Pettitt's test finds it and it is big enough to matter."""
    if len(values) < MIN_RUNS:
        return None
    _, k, p = pettitt(values)
    at = best_split(values)
    before, after = float(np.median(values[:at])), float(np.median(values[at:]))
    if p < ALPHA and abs(after - before) > floor.at(before):
        return Change(at, before, after, k, p)
    return None


_T, _S, _E = FLOORS["ms"], FLOORS["tok/s"], FLOORS[""]
RULES = (
    f"band: a run outside median ± K(n) x 1.4826 x MAD of the n runs before it ({MIN_HISTORY} to "
    f"{WINDOW}), K(n) set so that a stable run with normal noise is flagged 1 time in 1000 "
    f"({BAND_K[5]:g} from 5 runs, {BAND_K[10]:g} from 10, {BAND_K[20]:g} from 20); the band is at least "
    f"± {_T.relative:.0%} of the median and ± {_T.absolute:g} ms for times, ± {_S.relative:.0%} for "
    f"speeds, ± {_E.absolute:g} for the error rate",
    f"change point: Pettitt's test on the per-run values (a Mann-Whitney statistic at every split, at "
    f"least {MIN_SIDE} runs each side; permutation p-value), from {MIN_RUNS} runs; placed where the two "
    f"sides' medians fit best (least absolute deviations); reported when "
    f"p < {ALPHA:g} and the medians before and after differ by more than the band's least width",
)
