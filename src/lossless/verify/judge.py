"""The gathered evidence -> the tests' findings and the decision (pure: no requests)."""

from __future__ import annotations

import math
from typing import Any

from lossless.analyze.paired import paired_accuracy
from lossless.client.endpoints import Endpoint
from lossless.verify.budget import sampled_alone
from lossless.verify.collect import Greedy
from lossless.verify.decide import Gap, decide
from lossless.verify.distance import estimate
from lossless.verify.evidence import Evidence, with_repeats
from lossless.verify.result import Procedure, VerifyConfig, VerifyResult
from lossless.verify.two_sample import (
    EFFECTS,
    Finding,
    Sample,
    compare_sets,
    contexts,
    detectable,
    pooled_sd,
    score_se,
)


def judge(baseline: Endpoint, candidate: Endpoint, config: VerifyConfig, ev: Evidence) -> VerifyResult:
    """The evidence of one look -> its findings and decision (``settled`` or not)."""
    x1, x2, y, _ = ev.sets
    pooled = [a + b for a, b in zip(x1, x2, strict=True)]
    b, c, look = config.budget, config.criteria, ev.look
    extra = ev.tool_parity.findings() if ev.tool_parity else ()
    # Holm's strictest level: the A/B tests, task accuracy, tool parity and the distance are its m
    level = look.level(c.alpha) / (len(EFFECTS) + 1 + len(extra) + 1)
    seed = config.seed + 4 * look.index  # each look's permutations its own
    aa, ab = _findings(config, ev, pooled, level, seed)
    se = score_se(pooled, y)
    mde = None if se is None else detectable(se, level)
    score = next((t for t in ab if t.name == "mean_score"), None)
    gap = None if se is None or score is None else Gap(score.effect, se)
    answered = [(u, v) for u, v in zip(*ev.tasks, strict=True) if u is not None and v is not None]
    paired = (
        paired_accuracy([u for u, _ in answered], [v for _, v in answered], c.margin) if answered else None
    )
    sd = pooled_sd([a + b for a, b in zip(pooled, y, strict=True)])
    distance = None if ev.source is None else estimate(ev.paired, c.tolerance, ev.source, seed=seed)
    decision = decide(
        aa,
        ab,
        c,
        detectable=mde,
        sample_sd=sd,
        gap=gap,
        tasks=paired,
        distance=distance,
        problems=ev.problems,
        extra=extra,
        look=look,
    )
    tested = distance is not None and distance.p_above is not None
    procedure = Procedure(look, ev.requests, c, gap is not None, tested, sampled_alone(b))
    return VerifyResult(
        baseline,
        candidate,
        b,
        decision,
        tuple(aa),
        tuple(ab),
        paired,
        distance,
        greedy_diagnostic(*ev.greedy),
        ev.notes,
        ev.capabilities,
        ev.tool_parity,
        config.api,
        procedure,
    )


def _findings(
    config: VerifyConfig, ev: Evidence, pooled: list[list[Sample]], level: float, seed: int
) -> tuple[list[Finding], list[Finding]]:
    """The A/A tests (the baseline's two sets) and the A/B ones (its pooled sets against the candidate's),
    the contexts test with them where both sides drew at repeated contexts."""
    x1, x2, y, y2 = ev.sets
    b, c = config.budget, config.criteria
    aa_level = c.alpha_aa / len(EFFECTS)
    # enough permutations that the smallest p-value they can give, 1 / (n + 1), is well below Holm's
    # strictest level at this look (its share of alpha, over the family)
    n_perm = max(b.permutations, math.ceil(4 / min(level, aa_level)))
    # characters stand in for tokens when sampled answers came without token boundaries: ~4 a token
    kw = {"n_perm": n_perm, "length": b.max_tokens * (1 if ev.draw_tokens else 4)}
    aa = compare_sets(x1, x2, seed=seed, level=aa_level, **kw)
    ab = compare_sets(pooled, y, seed=seed + 1, level=level, **kw)
    # contexts: does each side sample what it reports? The baseline's two sets against its distribution
    # (A/A); the candidate's draws against its own where it reports one, else against the baseline's.
    # Its own, not the baseline's: servers of the same weights differ there by a few percent (their
    # numerics, which the log-probability distance weighs), and many draws at one context show that
    aa_ctx = contexts(pooled, ev.known, n_null=n_perm, seed=seed + 2, level=aa_level)
    reference = ev.known | {c: alts for c, alts in ev.own.items() if c in ev.known}
    ab_ctx = contexts(with_repeats(y, y2), reference, n_null=n_perm, seed=seed + 3, level=level)
    if aa_ctx is not None and ab_ctx is not None:
        aa, ab = [*aa, aa_ctx], [*ab, ab_ctx]
    return aa, ab


def greedy_diagnostic(
    first: list[Greedy | None], again: list[Greedy | None], cand: list[Greedy | None]
) -> dict[str, Any]:
    """Exact-match rates and first divergent positions at temperature 0, over the prompts all three
    answered. A diagnostic only: greedy decoding is not deterministic on many servers (batching
    changes the arithmetic)."""

    def diverge(a: tuple[str, ...], b: tuple[str, ...]) -> int | None:
        return next(
            (i for i, (u, v) in enumerate(zip(a, b, strict=False)) if u != v),
            None if len(a) == len(b) else min(len(a), len(b)),
        )

    trios = [(a.units, b.units, c.units) for a, b, c in zip(first, again, cand, strict=True) if a and b and c]
    firsts = [diverge(a, c) for a, _, c in trios]
    n = max(1, len(trios))
    return {
        "prompts": len(trios),
        "baseline_self_match": sum(a == b for a, b, _ in trios) / n,
        "candidate_match": sum(d is None for d in firsts) / n,
        "first_divergence": firsts,
        "first_divergent_tokens": [
            None if d is None else [a[d] if d < len(a) else None, c[d] if d < len(c) else None]
            for d, (a, _, c) in zip(firsts, trios, strict=True)
        ],
    }
