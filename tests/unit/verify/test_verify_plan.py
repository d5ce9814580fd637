"""verify's plan: the looks a budget is drawn in, the error rates spent over them, what a budget can
show before it runs, and the decision at a look that does not settle it (pure; no server)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from lossless.verify.budget import (
    BUDGETS,
    SAMPLED_ALONE,
    Criteria,
    Look,
    alone_by_budget,
    can_show,
    describe_alone,
    describe_budget,
    looks,
    parse_budget,
    sampled_alone,
)
from lossless.verify.decide import Gap, decide
from lossless.verify.result import Procedure
from lossless.verify.two_sample import Finding


def _t(name: str, p: float, effect: float) -> Finding:
    return Finding(name, effect, p, effect, 10, 10, 0.0)


def test_the_default_budget_is_drawn_in_three_looks_that_spend_alpha_by_their_samples() -> None:
    b = BUDGETS["default"]
    assert b.schedule == (10, 20, 30)
    plan = looks(b)
    assert [x.final for x in plan] == [False, False, True]
    assert sum(x.share for x in plan) == pytest.approx(1.0)
    assert [x.level(0.01) for x in plan] == pytest.approx([0.01 / 3] * 3)
    uneven = looks(replace(b, samples=10, looks=3))  # 4, 7, 10: shares 0.4, 0.3, 0.3
    assert [x.samples for x in uneven] == [4, 7, 10]
    assert [x.share for x in uneven] == pytest.approx([0.4, 0.3, 0.3])


def test_a_budget_says_before_it_runs_whether_it_can_confirm_equivalence() -> None:
    c = Criteria()
    *_, cannot = can_show(BUDGETS["small"], c)
    assert "12 tasks bound an accuracy difference to +-0.12" in cannot
    assert can_show(BUDGETS["default"], c)[2] == ""
    assert "5 tasks" in can_show(BUDGETS["default"], c, tasks=5)[2]  # verify --set ... --limit 5
    tiny = parse_budget("2x3x8")
    assert "3 samples bound a score difference" in can_show(tiny, c)[2]
    detects = [can_show(BUDGETS[name], c)[0] for name in ("small", "default", "large")]
    assert detects == sorted(detects, reverse=True)  # a bigger budget detects smaller differences
    assert describe_budget(BUDGETS["small"], c).endswith("finds differences only")
    assert (
        describe_budget(BUDGETS["default"], c) == "8x30x16 in 3 looks: detects 0.35 sd, confirms equivalence"
    )


def test_the_sampled_texts_measured_power_alone_is_said_where_no_distance_was_tested() -> None:
    """Each named budget has its calibration figure; a budget of the user's own says it was not measured,
    with the named budgets' figures beside; a run whose distance was tested says nothing of it."""
    assert set(SAMPLED_ALONE) == set(BUDGETS)
    for name, (k, n) in SAMPLED_ALONE.items():
        assert sampled_alone(BUDGETS[name]) == (k, n) and 0 <= k <= n
        assert describe_alone((k, n)).endswith(f"different in {k} of {n} calibration runs at this budget")
    assert sampled_alone(parse_budget("8x12x16")) is None
    unmeasured = describe_alone(None)
    assert unmeasured.startswith("what the sampled texts detect alone was not measured at this budget")
    assert alone_by_budget() in unmeasured
    look = looks(BUDGETS["default"])[-1]
    alone = Procedure(look, 100, Criteria(), scored=False, distanced=False, alone=SAMPLED_ALONE["default"])
    assert alone.power() == describe_alone(SAMPLED_ALONE["default"])
    assert alone.as_dict()["sampled_alone"]["runs"] == SAMPLED_ALONE["default"][1]
    assert replace(alone, distanced=True).power() is None
    assert replace(alone, alone=None).as_dict()["sampled_alone"] is None


def test_a_given_budget_keeps_two_samples_a_look() -> None:
    assert parse_budget("8x12x16").schedule == (4, 8, 12)
    assert parse_budget("8x5x16").schedule == (3, 5)
    assert parse_budget("2x3x8").schedule == (3,)


def test_a_difference_must_clear_the_share_of_alpha_its_look_spends() -> None:
    calm = [_t("mean_score", 0.5, 0.0), _t("lengths", 0.7, 0.0)]
    hit = [_t("mean_score", 0.004, 0.7), _t("lengths", 0.7, 0.02)]  # Holm: 0.008
    kw = {"detectable": 0.1, "sample_sd": 1.0, "gap": Gap(0.0, 0.01), "tasks": None}
    assert decide(calm, hit, Criteria(), **kw).verdict == "different"  # one look: all of alpha 0.01
    first = Look(0, (10, 20, 30))  # a third of it: 0.0033
    d = decide(calm, hit, Criteria(), **kw, look=first)
    assert d.level == pytest.approx(0.01 / 3)
    # not a difference at this look; not equivalence either, so near one: the next look decides
    assert d.verdict == "inconclusive" and not d.settled and "near a difference on mean_score" in d.reasons[0]
    faint = [_t("mean_score", 0.2, 0.1), _t("lengths", 0.7, 0.02)]
    assert decide(calm, faint, Criteria(), **kw, look=first).verdict == "equivalent"


def test_an_unstable_baseline_draws_more_samples_until_the_last_look() -> None:
    drifting = [_t("mean_score", 0.001, 0.2), _t("rank", 0.6, 0.01)]
    calm = [_t("mean_score", 0.5, 0.1), _t("rank", 0.5, 0.01)]
    kw = {"detectable": 0.1, "sample_sd": 1.0, "gap": Gap(0.0, 0.01), "tasks": None}
    early = decide(drifting, calm, Criteria(), **kw, look=Look(1, (10, 20, 30)))
    assert early.verdict == "inconclusive" and not early.settled and "more samples" in early.reasons[0]
    last = decide(drifting, calm, Criteria(), **kw, look=Look(2, (10, 20, 30)))
    assert last.verdict == "inconclusive" and last.settled and "then rerun" in last.reasons[0]
    stable = decide(calm, calm, Criteria(), **kw, look=Look(0, (10, 20, 30)))
    assert stable.verdict == "equivalent" and stable.settled


def test_an_unbounded_score_difference_draws_more_samples_and_says_how_many_at_the_end() -> None:
    calm = [_t("mean_score", 0.5, 0.1)]
    wide = Gap(0.1, 0.2)  # 0.1 + z * 0.2 > 0.3 (0.6 sd of 0.5) at any look
    kw = {"detectable": 0.5, "sample_sd": 0.5, "gap": wide, "tasks": None}
    early = decide(calm, calm, Criteria(), **kw, look=Look(0, (10, 20)))
    assert not early.settled and "bounded to" in early.reasons[0]
    last = decide(calm, calm, Criteria(), **kw, look=Look(1, (10, 20)))
    assert (
        last.settled and last.verdict == "inconclusive" and "x the samples would settle it" in last.reasons[0]
    )
    # the bound spends the look's share of alpha_equivalent: wider at a look than in a single test
    assert early.bound is not None and last.bound is not None and early.bound == last.bound
    assert early.bound > decide(calm, calm, Criteria(), **kw).bound  # type: ignore[operator]


def test_problems_settle_at_once() -> None:
    calm = [_t("mean_score", 0.5, 0.1)]
    d = decide(
        calm, calm, Criteria(), detectable=None, tasks=None, problems=["down"], look=Look(0, (10, 20, 30))
    )
    assert d.verdict == "inconclusive" and d.settled


def test_without_scores_equivalence_waits_for_the_last_look() -> None:
    """Nothing bounds the difference when the baseline cannot score text: only the whole budget's power."""
    calm = [_t("lengths", 0.5, 0.1)]
    kw = {"detectable": None, "sample_sd": None, "gap": None, "tasks": None}
    early = decide(calm, calm, Criteria(), **kw, look=Look(0, (10, 20, 30)))
    assert early.verdict == "inconclusive" and not early.settled and "every look" in early.reasons[0]
    last = decide(calm, calm, Criteria(), **kw, look=Look(2, (10, 20, 30)))
    assert last.verdict == "equivalent" and last.settled and "no teacher-forced scores" in last.reasons[0]


def test_the_tasks_factor_counts_where_the_interval_sits_not_only_its_width() -> None:
    from lossless.analyze.paired import Paired

    off_centre = Paired(24, 20, 2, 0, -2 / 24, (-0.13, 0.05), 0.5, False, 0.1)
    d = decide([], [], Criteria(), detectable=None, tasks=off_centre)
    # half-width 0.09 around -0.04: it must shrink to 0.06, (0.09 / 0.06)^2 = 2.25x the tasks
    assert d.verdict == "inconclusive" and "about 2.3x the tasks would settle it" in d.reasons[0]
