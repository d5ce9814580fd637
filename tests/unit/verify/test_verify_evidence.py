"""verify's evidence rules on synthetic data: greedy log-prob agreement, and the decision when requests
failed or the baseline does not sample (pure; no server)."""

from __future__ import annotations

import pytest

from lossless.verify.budget import Criteria
from lossless.verify.collect import Greedy, TextScore
from lossless.verify.decide import Agreement, decide
from lossless.verify.evidence import _same_tokens, greedy_agreement
from lossless.verify.two_sample import Finding


def g(text: str, *lps: float) -> Greedy:
    return Greedy(tuple(text), tuple(lps))


def test_greedy_agreement_reads_the_common_prefix_only() -> None:
    base = [g("abc", -0.1, -0.2, -0.3), g("xy", -1.0, -2.0)]
    again = [g("abc", -0.1, -0.2, -0.3), g("xy", -1.0, -2.0)]
    # the candidate parts from the baseline at "c"/"d": the third position is another context, unread
    cand = [g("abd", -0.2, -0.2, -9.0), g("xy", -1.0, -2.5)]
    got = greedy_agreement(base, again, cand)
    assert got is not None and got.source == "greedy" and got.n == 4
    assert got.mean_abs_diff == pytest.approx((0.1 + 0 + 0 + 0.5) / 4) and got.baseline_noise == 0


def test_greedy_agreement_needs_logprobs_on_every_side() -> None:
    base = [g("ab", -0.1, -0.2), None]
    cand = [Greedy(("a", "b"), None), g("xy", -1.0, -2.0)]
    assert greedy_agreement(base, base, cand) is None


def test_text_agreement_is_token_by_token_where_the_mean_would_cancel() -> None:
    """A change of numerics moves tokens both ways: the text's mean stays put, its tokens do not. Tokens are
    paired by offset and text: another tokenizer's differently cut token is not compared."""
    base = TextScore(-1.0, None, None, ((0, "a", -0.5), (1, "b", -1.5), (2, "cd", -1.0)))
    cand = TextScore(-1.0, None, None, ((0, "a", -0.6), (1, "b", -1.4), (2, "c", -3.0), (3, "d", 1.0)))
    assert cand.mean == base.mean
    assert _same_tokens(base, cand) == pytest.approx([0.1, 0.1])
    assert _same_tokens(base, base) == [0.0, 0.0, 0.0]


def finding(name: str, p: float, effect: float) -> Finding:
    return Finding(name, 1.0, p, effect, 10, 10, 1.0)


def test_problems_make_it_inconclusive_and_keep_what_was_found() -> None:
    aa = [finding("mmd_hamming", 0.5, 0.1)]
    ab = [finding("mmd_hamming", 0.001, 0.9)]
    kw = {"detectable": None, "tasks": None, "agreement": None}
    assert decide(aa, ab, Criteria(), **kw).verdict == "different"
    problem = "candidate: 40 of 100 requests failed (http_500 40)"
    d = decide(aa, ab, Criteria(), **kw, problems=[problem])
    assert d.verdict == "inconclusive" and d.reasons[0] == problem
    assert d.reasons[1].startswith("found anyway: mmd_hamming")


def test_a_greedy_disagreement_says_tokens_not_texts() -> None:
    aa = [finding("mmd_hamming", 0.5, 0.1)]
    agreement = Agreement(0.3, 0.0, 35, source="greedy")
    d = decide(aa, aa, Criteria(), detectable=None, tasks=None, agreement=agreement)
    assert d.verdict == "different" and "35 greedy tokens" in d.reasons[0]
