"""verify's statistics and verdict logic on synthetic data (pure; no server)."""

from __future__ import annotations

import numpy as np
import pytest

from lossless.verify.decide import Agreement, Criteria, decide
from lossless.verify.stats import (
    Finding,
    Sample,
    compare,
    hamming_kernel,
    holm,
    paired_accuracy,
    pooled_sd,
    score_se,
)


def test_holm_matches_the_step_down_definition() -> None:
    assert holm([0.01, 0.04, 0.03, 0.5]) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert holm([0.9, 0.2]) == pytest.approx([0.9, 0.4])


def test_hamming_kernel_counts_agreeing_positions_and_treats_ended_alike() -> None:
    k = hamming_kernel([("a", "b", "c"), ("a", "x", "c"), ("a",)], 4)
    assert k[0, 1] == pytest.approx(3 / 4)  # a, c agree, and position 4 is padding in both
    assert k[0, 2] == pytest.approx(2 / 4)  # a, and the padding at position 4
    assert np.allclose(np.diag(k), 1.0)


def _groups(rng: np.random.Generator, shift: float, vocab: int, n: int) -> list[list[Sample]]:
    probs = np.exp(-np.arange(vocab) / 3.0)
    out = []
    for _ in range(6):
        group = []
        for _ in range(n):
            units = tuple(str(t) for t in rng.choice(vocab, size=8, p=probs / probs.sum()))
            group.append(Sample(units, 8, float(rng.normal(shift, 1.0))))
        out.append(group)
    return out


def test_permutation_p_values_are_calibrated_under_the_null() -> None:
    """Same distribution on both sides: over 40 seeds, a 5% test rejects about 5% of the time."""
    rejections = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        x, y = _groups(rng, 0.0, 12, 8), _groups(rng, 0.0, 12, 8)
        results = compare(x, y, n_perm=199, seed=seed, length=8, level=0.05)
        rejections += sum(r.p_value < 0.05 for r in results)
    assert rejections <= 0.1 * 40 * 4  # at most twice the nominal rate, over all four tests


def test_a_score_shift_is_found_and_sized() -> None:
    rng = np.random.default_rng(1)
    x, y = _groups(rng, 0.0, 12, 10), _groups(rng, 0.8, 12, 10)
    score = next(r for r in compare(x, y, n_perm=499, seed=0, length=8, level=0.01) if r.name == "mean_score")
    assert score.p_value < 0.01 and 0.5 < score.effect < 1.1
    se = score_se(x, y)
    assert se is not None and 0.1 < se < 0.25  # sqrt(2/10)/sqrt(6) ~ 0.18
    assert pooled_sd(x) == pytest.approx(1.0, abs=0.2)


def test_tost_on_paired_accuracy() -> None:
    same = paired_accuracy([True] * 10 + [False] * 14, [True] * 10 + [False] * 14, margin=0.1)
    assert same.equivalent and same.p_mcnemar == 1.0 and same.ci90[0] < 0 < same.ci90[1]
    worse = paired_accuracy([True] * 12 + [False] * 12, [False] * 24, margin=0.1)
    assert not worse.equivalent and worse.p_mcnemar < 0.001 and worse.difference == -0.5
    few = paired_accuracy([True, False], [True, False], margin=0.1)
    assert not few.equivalent  # two tasks cannot establish anything


def _t(name: str, p: float, effect: float) -> Finding:
    return Finding(name, effect, p, effect, 10, 10, 0.0)


def test_decide_follows_calibration_then_differences_then_power() -> None:
    c = Criteria()
    calm = [_t("mean_score", 0.5, 0.01), _t("lengths", 0.7, 0.02)]
    hit = [_t("mean_score", 0.001, 0.7), _t("lengths", 0.7, 0.02)]
    unstable = [_t("mean_score", 0.001, 0.7), _t("lengths", 0.7, 0.02)]
    assert (
        decide(unstable, hit, c, detectable=0.1, sample_sd=1.0, tasks=None, agreement=None).verdict
        == "inconclusive"
    )
    assert (
        decide(calm, hit, c, detectable=0.1, sample_sd=1.0, tasks=None, agreement=None).verdict == "different"
    )
    assert (
        decide(calm, calm, c, detectable=0.3, sample_sd=1.0, tasks=None, agreement=None).verdict
        == "equivalent"
    )
    weak = decide(calm, calm, c, detectable=1.2, sample_sd=1.0, tasks=None, agreement=None)
    assert weak.verdict == "inconclusive" and "4x the samples" in weak.reasons[0]
    off = Agreement(mean_abs_diff=0.3, baseline_noise=0.0, n=10)
    assert (
        decide(calm, calm, c, detectable=0.3, sample_sd=1.0, tasks=None, agreement=off).verdict == "different"
    )


def test_an_effect_within_the_baselines_own_noise_is_not_a_difference() -> None:
    noisy_aa = [_t("mean_score", 0.2, 0.9)]
    ab = [_t("mean_score", 0.001, 0.7)]
    d = decide(noisy_aa, ab, Criteria(), detectable=0.3, sample_sd=1.0, tasks=None, agreement=None)
    assert d.verdict == "equivalent"
