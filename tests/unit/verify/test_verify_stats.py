"""verify's statistics and verdict logic on synthetic data (pure; no server)."""

from __future__ import annotations

import numpy as np
import pytest

from lossless.analyze.paired import paired_accuracy
from lossless.verify.budget import Criteria
from lossless.verify.collect import _text_score
from lossless.verify.decide import Gap, decide
from lossless.verify.distance import PromptTokens, estimate
from lossless.verify.two_sample import (
    TAIL,
    Finding,
    Sample,
    _pair_sum,
    compare_sets,
    contexts,
    hamming_kernel,
    holm,
    pooled_sd,
    repeated_contexts,
    score_se,
    token_rank,
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
            rank = float(np.clip(rng.normal(0.5 - shift / 10, 0.1), 0, 1))
            tail = float(rng.binomial(8, 0.1 * (1 - shift / 2))) / 8
            group.append(Sample(units, 8, float(rng.normal(shift, 1.0)), rank, tail))
        out.append(group)
    return out


def test_permutation_p_values_are_calibrated_under_the_null() -> None:
    """Same distribution on both sides: over 40 seeds, a 5% test rejects about 5% of the time."""
    rejections = 0
    for seed in range(40):
        rng = np.random.default_rng(seed)
        x, y = _groups(rng, 0.0, 12, 8), _groups(rng, 0.0, 12, 8)
        results = compare_sets(x, y, n_perm=199, seed=seed, length=8, level=0.05)
        assert [r.name for r in results][3:] == ["mean_score", "rank", "tail"]
        rejections += sum(r.p_value < 0.05 for r in results)
    assert rejections <= 0.1 * 40 * 6  # at most twice the nominal rate, over all six tests


def test_a_rank_and_tail_shift_is_found_with_its_sign() -> None:
    rng = np.random.default_rng(2)
    x, y = _groups(rng, 0.0, 12, 10), _groups(rng, 1.0, 12, 10)  # y: likelier tokens, fewer from the tail
    found = {r.name: r for r in compare_sets(x, y, n_perm=499, seed=0, length=8, level=0.01)}
    assert found["rank"].p_value < 0.01 and found["rank"].effect == pytest.approx(-0.1, abs=0.02)
    assert found["tail"].p_value < 0.01 and found["tail"].effect < 0


def test_teacher_forced_tests_need_every_sample_scored() -> None:
    rng = np.random.default_rng(3)
    x, y = _groups(rng, 0.0, 12, 4), _groups(rng, 0.0, 12, 4)
    y[0][0] = Sample(y[0][0].units, 8, y[0][0].score)  # scored, but no alternatives: no rank, no tail
    names = [r.name for r in compare_sets(x, y, n_perm=19, seed=0, length=8, level=0.05)]
    assert names == ["mmd_hamming", "first_token", "lengths", "mean_score"]


def test_a_token_drawn_from_the_baseline_has_mean_rank_one_half() -> None:
    """Exactly 1/2 whatever the number of alternatives the endpoint lists (the rest is one category)."""
    probs = np.array([0.4, 0.25, 0.15, 0.1, 0.05, 0.03, 0.02])
    for k in (1, 3, 5, len(probs)):
        top = list(np.log(probs[:k]))
        ranks = [token_rank(float(np.log(p)), top) for p in probs]
        assert float(probs @ ranks) == pytest.approx(0.5)
    assert token_rank(float(np.log(0.4)), list(np.log(probs))) == pytest.approx(0.2)  # the likeliest
    assert token_rank(float(np.log(0.02)), list(np.log(probs[:5]))) == pytest.approx(1 - 0.05 / 2)


def test_scores_are_read_from_the_texts_tokens_only() -> None:
    """Legacy echo logprobs: the prompt's tokens (offsets before the text) are not the text's score."""
    lp = {
        "tokens": ["Hi", " there", " you"],
        "token_logprobs": [None, float(np.log(0.5)), float(np.log(0.1))],
        "text_offset": [0, 2, 8],
        "top_logprobs": [None, {" there": np.log(0.5), " all": np.log(0.3)}, {" me": np.log(0.8)}],
    }
    got = _text_score(lp, start=2, end=12, top=20)
    assert got is not None and got.mean == pytest.approx(float(np.log(0.5 * 0.1)) / 2)
    assert got.rank == pytest.approx((0.25 + (1 - 0.2 / 2)) / 2)  # " you" is outside the listed one
    assert got.tail == pytest.approx(0.5) and TAIL == 0.9
    assert got.tokens == ((2, " there", float(np.log(0.5))), (8, " you", float(np.log(0.1))))
    plain = _text_score({**lp, "top_logprobs": None}, start=2, end=12, top=0)
    assert plain is not None and plain.rank is None and plain.tail is None


def test_a_score_shift_is_found_and_sized() -> None:
    rng = np.random.default_rng(1)
    x, y = _groups(rng, 0.0, 12, 10), _groups(rng, 0.8, 12, 10)
    score = next(
        r for r in compare_sets(x, y, n_perm=499, seed=0, length=8, level=0.01) if r.name == "mean_score"
    )
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


def test_decide_follows_differences_then_calibration_then_power() -> None:
    c = Criteria()
    calm = [_t("mean_score", 0.5, 0.01), _t("lengths", 0.7, 0.02)]
    hit = [_t("mean_score", 0.001, 0.7), _t("lengths", 0.7, 0.02)]
    unstable = [_t("mean_score", 0.001, 0.7), _t("lengths", 0.7, 0.02)]
    assert decide(unstable, hit, c, detectable=0.1, sample_sd=1.0, tasks=None).verdict == "inconclusive"
    assert decide(calm, hit, c, detectable=0.1, sample_sd=1.0, tasks=None).verdict == "different"
    close = Gap(0.01, 0.1)  # TOST: 0.01 + 1.645 * 0.1 = 0.17 nats/token, within 0.6 sd of 1.0
    same = decide(calm, calm, c, detectable=0.3, sample_sd=1.0, gap=close, tasks=None)
    assert same.verdict == "equivalent" and same.bound == pytest.approx(0.01 + 1.6449 * 0.1, abs=1e-3)
    # 0.05 + 1.645 * 0.5 = 0.87 > 0.6: (0.82 / 0.55)^2 = 2.2x the samples would bring it within
    weak = decide(calm, calm, c, detectable=1.2, sample_sd=1.0, gap=Gap(0.05, 0.5), tasks=None)
    assert weak.verdict == "inconclusive" and "2.3x the samples" in weak.reasons[0]
    off = estimate([PromptTokens(i, (0.3,), ()) for i in range(10)], c.tolerance, "greedy")
    assert (
        decide(calm, calm, c, detectable=0.3, sample_sd=1.0, gap=close, tasks=None, distance=off).verdict
        == "different"
    )


def test_an_unstable_baseline_does_not_veto_a_difference_well_beyond_its_drift() -> None:
    c = Criteria()
    drifting = [_t("mean_score", 0.001, 0.2), _t("rank", 0.6, 0.01)]
    clear = decide(
        drifting,
        [_t("mean_score", 0.001, 0.7), _t("rank", 0.5, 0.01)],
        c,
        detectable=0.1,
        sample_sd=1.0,
        tasks=None,
    )
    assert clear.verdict == "different" and "baseline unstable" in clear.reasons[0]
    within = decide(
        drifting,
        [_t("mean_score", 0.001, 0.3), _t("rank", 0.5, 0.01)],
        c,
        detectable=0.1,
        sample_sd=1.0,
        tasks=None,
    )
    assert within.verdict == "inconclusive" and "differs from itself" in within.reasons[0]
    elsewhere = decide(
        drifting,
        [_t("mean_score", 0.5, 0.1), _t("rank", 0.001, 0.05)],
        c,
        detectable=0.1,
        sample_sd=1.0,
        tasks=None,
    )
    assert elsewhere.verdict == "different"  # a stable test's difference stands


def test_an_effect_within_the_baselines_own_noise_is_not_a_difference() -> None:
    noisy_aa = [_t("mean_score", 0.2, 0.9)]
    ab = [_t("mean_score", 0.001, 0.7)]
    d = decide(noisy_aa, ab, Criteria(), detectable=0.3, sample_sd=1.0, tasks=None)
    assert d.verdict == "equivalent"


# contexts: a two-token world. The first token is the prefill's (always the baseline's); the second
# is drawn either from the baseline's p or from a skewed P, as a speculative decoder without the
# residual draws it (mass moved between two tokens the baseline rates alike).
FIRST = {"a": 0.7, "b": 0.3}
SECOND = {"a": {"x": 0.4, "y": 0.4, "z": 0.2}, "b": {"x": 0.5, "w": 0.5}}
SKEWED = {"a": {"x": 0.55, "y": 0.25, "z": 0.2}, "b": {"x": 0.65, "w": 0.35}}


def _alts(dist: dict[str, float], listed: int = 2) -> tuple[tuple[str, float], ...]:
    """The baseline lists its ``listed`` likeliest tokens; the rest is one category."""
    return tuple((t, float(np.log(v))) for t, v in sorted(dist.items(), key=lambda kv: -kv[1])[:listed])


KNOWN = {(j, first): _alts(SECOND[first]) for j in range(4) for first in FIRST}


def _draws(rng: np.random.Generator, second: dict[str, dict[str, float]], n: int) -> list[list[Sample]]:
    groups = []
    for _ in range(4):  # prompts
        group = []
        for _ in range(n):
            t1 = str(rng.choice(list(FIRST), p=list(FIRST.values())))
            t2 = str(rng.choice(list(second[t1]), p=list(second[t1].values())))
            group.append(Sample((t1, t2, "."), 3))
        groups.append(group)
    return groups


def test_contexts_is_calibrated_when_draws_follow_the_baseline() -> None:
    rejections = 0
    for seed in range(60):
        groups = _draws(np.random.default_rng(seed), SECOND, 12)
        assert repeated_contexts(groups) <= set(KNOWN)
        found = contexts(groups, KNOWN, n_null=199, seed=seed, level=0.05)
        assert found is not None and found.name == "contexts" and 40 < found.n_y <= 48
        rejections += found.p_value < 0.05
    assert rejections <= 6  # nominal 3 of 60


def test_contexts_sees_mass_moved_between_equally_likely_tokens() -> None:
    found = contexts(_draws(np.random.default_rng(0), SKEWED, 100), KNOWN, n_null=499, seed=0, level=0.01)
    assert found is not None and found.p_value < 0.01
    assert found.effect == pytest.approx(0.045, abs=0.02)  # ||P - p||^2 = 0.045 after "a" and after "b"
    same = contexts(_draws(np.random.default_rng(0), SECOND, 100), KNOWN, n_null=499, seed=0, level=0.01)
    assert same is not None and same.p_value > 0.01 and abs(same.effect) < 0.01


def test_contexts_counts_pairs_against_the_known_distribution_only() -> None:
    draws = [[Sample(("a", "x"), 2), Sample(("a", "y"), 2), Sample(("a", "x"), 2), Sample(("b", "w"), 2)]]
    found = contexts(draws, {(0, "a"): _alts(SECOND["a"])}, n_null=19, seed=0, level=0.05)
    assert found is not None and found.n_y == 3  # "b" was drawn once, and its distribution is unknown
    # against p = (x 0.4, y 0.4, rest 0.2): <e_x - p, e_x - p> = 0.36 + 0.16 + 0.04 = 0.56 for the
    # (x, x) pair in both orders; <e_x - p, e_y - p> = -0.24 - 0.24 + 0.04 = -0.44 for the four (x, y)
    assert found.statistic == pytest.approx(2 * 0.56 + 4 * -0.44)
    assert contexts(draws, {}, n_null=19, seed=0, level=0.05) is None


def test_strings_several_tokens_share_join_the_rest() -> None:
    """'\ufffd' (a split character's bytes) names many tokens; the baseline lists one of them, so a
    draw shown so cannot be matched to it: both go to the rest category."""
    after = {"x": 0.5, "\ufffd": 0.3, "y": 0.2}
    draws = [[Sample(("a", "\ufffd"), 2)] * 2]
    found = contexts(draws, {(0, "a"): _alts(after, listed=3)}, n_null=19, seed=0, level=0.05)
    # p = (x 0.5, y 0.2, rest 0.3); both draws in the rest: 2 x (0.25 + 0.04 + 0.49)
    assert found is not None and found.statistic == pytest.approx(2 * (0.5**2 + 0.2**2 + 0.7**2))


def test_pair_sum_is_the_sum_over_pairs() -> None:
    rng = np.random.default_rng(2)
    p = np.array([0.5, 0.3, 0.2])
    draws = rng.choice(3, size=7, p=p)
    e = np.eye(3)[draws] - p
    brute = sum(float(e[i] @ e[k]) for i in range(7) for k in range(7) if i != k)
    counts = np.bincount(draws, minlength=3).astype(np.float64)
    assert _pair_sum(counts[None], 7, p)[0] == pytest.approx(brute)


def test_contexts_needs_the_baseline_to_reject_itself_before_its_effect_is_a_bar() -> None:
    """contexts' A/A is the baseline's few long draws against its own distribution: a noisy estimate
    of its own departure, not the A/B comparison's noise. A bar only where it rejects."""
    ab = [_t("contexts", 0.001, 0.015)]
    noisy = decide([_t("contexts", 0.3, 0.03)], ab, Criteria(), detectable=0.1, sample_sd=1.0, tasks=None)
    assert noisy.verdict == "different"
    off = decide([_t("contexts", 0.001, 0.03)], ab, Criteria(), detectable=0.1, sample_sd=1.0, tasks=None)
    assert off.verdict == "inconclusive"  # the baseline does not draw from what it reports
