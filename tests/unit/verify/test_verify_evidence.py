"""verify's evidence rules on synthetic data: the decision when requests failed (pure; no server)."""

from __future__ import annotations

from lossless.verify.budget import Criteria
from lossless.verify.decide import decide
from lossless.verify.two_sample import Finding


def finding(name: str, p: float, effect: float) -> Finding:
    return Finding(name, 1.0, p, effect, 10, 10, 1.0)


def test_problems_make_it_inconclusive_and_keep_what_was_found() -> None:
    aa = [finding("mmd_hamming", 0.5, 0.1)]
    ab = [finding("mmd_hamming", 0.001, 0.9)]
    kw = {"detectable": None, "tasks": None}
    assert decide(aa, ab, Criteria(), **kw).verdict == "different"
    problem = "candidate: 40 of 100 requests failed (http_500 40)"
    d = decide(aa, ab, Criteria(), **kw, problems=[problem])
    assert d.verdict == "inconclusive" and d.reasons[0] == problem
    assert d.reasons[1].startswith("found anyway: mmd_hamming")
