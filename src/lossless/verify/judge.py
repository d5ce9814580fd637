"""The gathered evidence -> the tests' findings and the decision (pure: no requests)."""

from __future__ import annotations

from typing import Any

from lossless.analyze.paired import paired_accuracy
from lossless.client.endpoints import Endpoint
from lossless.verify.collect import Greedy
from lossless.verify.decide import decide
from lossless.verify.evidence import Evidence, with_repeats
from lossless.verify.result import VerifyConfig, VerifyResult
from lossless.verify.two_sample import EFFECTS, compare, contexts, detectable, pooled_sd, score_se


def judge(baseline: Endpoint, candidate: Endpoint, config: VerifyConfig, ev: Evidence) -> VerifyResult:
    x1, x2, y, y2 = ev.sets
    pooled = [a + b for a, b in zip(x1, x2, strict=True)]
    b, c = config.budget, config.criteria
    # characters stand in for tokens when sampled answers came without token boundaries: ~4 a token
    kw = {"n_perm": b.permutations, "length": b.max_tokens * (1 if ev.draw_tokens else 4)}
    # thresholds at Holm's strictest level: the level of the smallest p-value of each family
    aa = compare(x1, x2, seed=config.seed, level=c.alpha / len(EFFECTS), **kw)
    ab = compare(pooled, y, seed=config.seed + 1, level=c.alpha / (len(EFFECTS) + 1), **kw)
    # contexts: each side's own draws against the baseline's distribution; A/A from its two sets
    aa_ctx = contexts(
        pooled, ev.known, n_null=b.permutations, seed=config.seed + 2, level=c.alpha / len(EFFECTS)
    )
    ab_ctx = contexts(
        with_repeats(y, y2), ev.known,
        n_null=b.permutations, seed=config.seed + 3, level=c.alpha / (len(EFFECTS) + 1),
    )  # fmt: skip
    if aa_ctx is not None and ab_ctx is not None:
        aa, ab = [*aa, aa_ctx], [*ab, ab_ctx]
    se = score_se(pooled, y)
    mde = None if se is None else detectable(se, c.alpha / (len(ab) + 1))
    answered = [(u, v) for u, v in zip(*ev.tasks, strict=True) if u is not None and v is not None]
    paired = (
        paired_accuracy([u for u, _ in answered], [v for _, v in answered], c.margin) if answered else None
    )
    sd = pooled_sd([a + b for a, b in zip(pooled, y, strict=True)])
    extra = ev.tool_parity.findings() if ev.tool_parity else ()
    decision = decide(
        aa, ab, c, detectable=mde, sample_sd=sd, tasks=paired, agreement=ev.agreement, problems=ev.problems,
        extra=extra,
    )  # fmt: skip
    return VerifyResult(
        baseline, candidate, b, decision, tuple(aa), tuple(ab), paired, ev.agreement,
        greedy_diagnostic(*ev.greedy), ev.notes, ev.capabilities, ev.tool_parity, config.api,
    )  # fmt: skip


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
