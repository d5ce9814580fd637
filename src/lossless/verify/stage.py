"""``lossless verify``: collect from both endpoints, test, decide -> ``VerifyResult``; render elsewhere."""

from __future__ import annotations

import asyncio
import json
import math
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

from lossless.endpoints import Endpoint
from lossless.errors import UsageError
from lossless.probe.wire import Wire
from lossless.verify import collect
from lossless.verify.collect import Caller, Drawn
from lossless.verify.decide import Agreement, Criteria, Decision, decide
from lossless.verify.stats import (
    EFFECTS,
    Alternatives,
    Context,
    Finding,
    Paired,
    Sample,
    compare,
    contexts,
    detectable,
    paired_accuracy,
    pooled_sd,
    repeated,
    score_se,
)

EXIT_CODES = {"equivalent": 0, "different": 1, "inconclusive": 3}
SEED_STRIDE = 1_000_000  # seeds of the four sample sets never overlap
# Texts per prompt scored by both endpoints: different weights or kernels shift every text's score,
# so a few show it as well as all of them.
AGREEMENT_SAMPLES = 3


@dataclass(frozen=True)
class Budget:
    prompts: int  # distinct prompts (at most len(collect.PROMPTS))
    samples: int  # completions per prompt and set (three sets: A, A', candidate)
    max_tokens: int  # per completion
    tasks: int  # bundled tasks, greedy, on both endpoints
    # Short completions, candidate only, for the contexts test: many draws at the same few contexts
    # (the baseline's distribution there is asked for, so it needs none), split over the ``focus``
    # prompts whose first token the baseline is surest of, so that they share their first token.
    repeats: int = 0
    focus: int = 1
    repeat_tokens: int = 3  # the first token comes from the prefill; speculation acts from the second
    permutations: int = 2000  # permutation-null draws per comparison


BUDGETS = {
    "small": Budget(4, 6, 16, 12, repeats=48),
    # Against the embedded SmolLM2 on 2 cores it must finish within 5 minutes; 16 tokens rather than 20
    # cost the tiny-model power benchmark nothing (benchmarks/verify_power.py). The 192 repeats (three
    # tokens each) cost about 40 s there.
    "default": Budget(8, 10, 16, 24, repeats=192),
    "large": Budget(16, 16, 32, 24, repeats=384, focus=2),
}


def parse_budget(text: str) -> Budget:
    if text in BUDGETS:
        return BUDGETS[text]
    m = re.fullmatch(r"(\d+)x(\d+)x(\d+)", text.strip())
    if not m or min(int(g) for g in m.groups()) < 1:
        raise UsageError(
            f"--budget: expected {'|'.join(BUDGETS)} or PROMPTSxSAMPLESxTOKENS like 8x8x24, got {text!r}"
        )
    prompts, samples, tokens = (int(g) for g in m.groups())
    if samples < 2 or prompts > len(collect.PROMPTS):
        raise UsageError(
            f"--budget: 2 or more samples and at most {len(collect.PROMPTS)} prompts, got {text!r}"
        )
    return replace(BUDGETS["default"], prompts=prompts, samples=samples, max_tokens=tokens)


@dataclass(frozen=True)
class VerifyConfig:
    endpoints: tuple[Endpoint, Endpoint] | None  # (baseline, candidate); None: the embedded engine
    budget: Budget = BUDGETS["default"]
    api: str = "completions"  # "chat" works with any provider, but cannot be teacher-forced as exactly
    seed: int = 0
    embedded_model: str | None = None
    criteria: Criteria = field(default_factory=Criteria)
    concurrency: int = 4  # requests in flight, both endpoints together


@dataclass(frozen=True)
class VerifyResult:
    baseline: Endpoint
    candidate: Endpoint
    budget: Budget
    decision: Decision
    aa: tuple[Finding, ...]
    ab: tuple[Finding, ...]
    tasks: Paired | None
    agreement: Agreement | None
    greedy: dict[str, Any]
    notes: tuple[str, ...] = ()

    @property
    def verdict(self) -> str:
        return self.decision.verdict

    def as_dict(self) -> dict[str, Any]:
        def ep(e: Endpoint) -> dict[str, str]:
            return {"name": e.name, "base_url": e.base_url, "model": e.model}

        return {
            "verdict": self.verdict,
            "reasons": list(self.decision.reasons),
            "detectable_score_difference": self.decision.detectable,
            "baseline": ep(self.baseline),
            "candidate": ep(self.candidate),
            "budget": asdict(self.budget),
            "tests": [
                {
                    "name": b.name,
                    "effect_meaning": EFFECTS[b.name],
                    "aa": asdict(a),
                    "ab": asdict(b),
                    "aa_holm_p": pa,
                    "ab_holm_p": pb,
                }
                for a, b, pa, pb in zip(
                    self.aa, self.ab, self.decision.aa_adjusted, self.decision.ab_adjusted, strict=False
                )
            ],
            "tasks": None if self.tasks is None else asdict(self.tasks),
            "logprob_agreement": None if self.agreement is None else asdict(self.agreement),
            "greedy": self.greedy,
            "notes": list(self.notes),
        }


async def verify(baseline: Endpoint, candidate: Endpoint, config: VerifyConfig) -> VerifyResult:
    b, t = config.budget, collect.load_tasks()[: config.budget.tasks]
    every = collect.PROMPTS
    prompts = every[: b.prompts]
    gate = asyncio.Semaphore(config.concurrency)
    async with Wire(baseline) as wb, Wire(candidate) as wc:
        base, cand = Caller(wb, config.api, gate), Caller(wc, config.api, gate)
        focus = await _focus(base, b.focus) if b.repeats and config.api == "completions" else ()
        s0 = config.seed * 4 * SEED_STRIDE
        a1, a2, c1, c2 = await asyncio.gather(
            collect.draw(base, prompts, b.samples, b.max_tokens, s0),
            collect.draw(base, prompts, b.samples, b.max_tokens, s0 + SEED_STRIDE),
            collect.draw(cand, prompts, b.samples, b.max_tokens, s0 + 2 * SEED_STRIDE),
            collect.draw(
                cand, tuple(every[j] for j in focus), b.repeats // max(1, len(focus)), b.repeat_tokens,
                s0 + 3 * SEED_STRIDE,
            ),
        )  # fmt: skip
        x1, x2, y = [await collect.scored(base, prompts, s) for s in (a1, a2, c1)]
        # every prompt's draws under its index in PROMPTS: the long sets', then the repeats'
        y2: list[list[Sample]] = [[] for _ in every]
        for j, group in zip(focus, c2, strict=True):
            y2[j] = [d.sample for d in group]
        # the baseline's distributions are read through the completions API: chat draws are another context
        tested = ([a + b for a, b in zip(x1, x2, strict=True)], _with_repeats(y, y2))
        known = await _contexts_known(base, every, tested) if config.api == "completions" else {}
        agreement = await _agreement(base, cand, prompts, a1, x1)
        g1, g2, gc = await asyncio.gather(
            *(collect.greedy(c, prompts, b.max_tokens) for c in (base, base, cand))
        )
        tb, tc = await asyncio.gather(collect.solve(base, t), collect.solve(cand, t))
    return _judge(
        baseline, candidate, config, (x1, x2, y, y2), known, (g1, g2, gc), (tb, tc), agreement,
        base.notes + cand.notes,
    )  # fmt: skip


async def _focus(base: Caller, k: int) -> tuple[int, ...]:
    """The ``k`` prompts whose first token the baseline is surest of (the largest chance that two
    draws share it), so that the repeats meet at the fewest contexts; of those, only prompts whose
    likeliest first token survives tokenizing the prompt and it again (after a prompt ending in a
    newline, a newline merges into one token), so that the distribution after it can be asked for."""
    every = collect.PROMPTS
    dists = await asyncio.gather(*(base.next_token(p) for p in every))
    share = {j: sum(math.exp(2 * v) for _, v in d) for j, d in enumerate(dists) if d}
    chosen: list[int] = []
    for j in sorted(share, key=lambda j: -share[j]):
        likeliest = max(dists[j] or (), key=lambda tv: tv[1])[0]
        if len(chosen) < k and await base.next_token(every[j], likeliest):
            chosen.append(j)
    return tuple(sorted(chosen))


def _with_repeats(y: list[list[Sample]], y2: list[list[Sample]]) -> list[list[Sample]]:
    """The candidate's draws by prompt index: its long set's (the first prompts) and its repeats'."""
    return [*(u + v for u, v in zip(y, y2, strict=False)), *y2[len(y) :]]


async def _contexts_known(
    base: Caller, prompts: tuple[str, ...], sets: tuple[list[list[Sample]], ...]
) -> dict[Context, Alternatives]:
    """The baseline's distribution of the second token at every context a group drew twice or more."""
    wanted = sorted(set().union(*(repeated(s) for s in sets)))
    got = await asyncio.gather(*(base.next_token(prompts[j], first) for j, first in wanted))
    return {c: alts for c, alts in zip(wanted, got, strict=True) if alts}


async def _agreement(
    base: Caller, cand: Caller, prompts: tuple[str, ...], drawn: list[list[Drawn]], scores: list[list[Sample]]
) -> Agreement | None:
    """The baseline's own texts scored again by the baseline (its noise) and by the candidate."""
    if base.scoring is None:
        return None
    drawn, scores = [g[:AGREEMENT_SAMPLES] for g in drawn], [g[:AGREEMENT_SAMPLES] for g in scores]
    again = await collect.scored(base, prompts, drawn)
    other = await collect.scored(cand, prompts, drawn)
    if cand.scoring is None:
        return None
    first = [s.score for g in scores for s in g]
    twice = [s.score for g in again for s in g]
    theirs = [s.score for g in other for s in g]
    trios = [
        (f, a, o)
        for f, a, o in zip(first, twice, theirs, strict=True)
        if f is not None and a is not None and o is not None
    ]
    if not trios:
        return None
    noise = float(np.mean([abs(a - f) for f, a, _ in trios]))
    return Agreement(float(np.mean([abs(o - f) for f, _, o in trios])), noise, len(trios))


def _judge(
    baseline: Endpoint,
    candidate: Endpoint,
    config: VerifyConfig,
    sets: tuple[list[list[Sample]], ...],
    known: dict[Context, Alternatives],
    greedy: tuple[list[tuple[str, ...]], ...],
    tasks: tuple[list[bool], list[bool]],
    agreement: Agreement | None,
    notes: list[str],
) -> VerifyResult:
    x1, x2, y, y2 = sets
    pooled = [a + b for a, b in zip(x1, x2, strict=True)]
    b, c = config.budget, config.criteria
    kw = {"n_perm": b.permutations, "length": b.max_tokens}
    # thresholds at Holm's strictest level: the level of the smallest p-value of each family
    aa = compare(x1, x2, seed=config.seed, level=c.alpha / len(EFFECTS), **kw)
    ab = compare(pooled, y, seed=config.seed + 1, level=c.alpha / (len(EFFECTS) + 1), **kw)
    # contexts: each side's own draws against the baseline's distribution; A/A from its two sets
    aa_ctx = contexts(
        pooled, known, n_null=b.permutations, seed=config.seed + 2, level=c.alpha / len(EFFECTS)
    )
    ab_ctx = contexts(
        _with_repeats(y, y2), known,
        n_null=b.permutations, seed=config.seed + 3, level=c.alpha / (len(EFFECTS) + 1),
    )  # fmt: skip
    if aa_ctx is not None and ab_ctx is not None:
        aa, ab = [*aa, aa_ctx], [*ab, ab_ctx]
    se = score_se(pooled, y)
    mde = None if se is None else detectable(se, c.alpha / (len(ab) + 1))
    paired = paired_accuracy(tasks[0], tasks[1], c.margin) if tasks[0] else None
    sd = pooled_sd([a + b for a, b in zip(pooled, y, strict=True)])
    decision = decide(aa, ab, c, detectable=mde, sample_sd=sd, tasks=paired, agreement=agreement)
    return VerifyResult(
        baseline, candidate, b, decision, tuple(aa), tuple(ab), paired, agreement,
        greedy_diagnostic(*greedy), tuple(dict.fromkeys(notes)),
    )  # fmt: skip


def greedy_diagnostic(
    first: list[tuple[str, ...]], again: list[tuple[str, ...]], cand: list[tuple[str, ...]]
) -> dict[str, Any]:
    """Exact-match rates and first divergent positions at temperature 0. A diagnostic only: greedy
    decoding is not deterministic on many servers (batching changes the arithmetic)."""

    def diverge(a: tuple[str, ...], b: tuple[str, ...]) -> int | None:
        return next(
            (i for i, (u, v) in enumerate(zip(a, b, strict=False)) if u != v),
            None if len(a) == len(b) else min(len(a), len(b)),
        )

    firsts = [diverge(a, c) for a, c in zip(first, cand, strict=True)]
    return {
        "prompts": len(first),
        "baseline_self_match": sum(a == b for a, b in zip(first, again, strict=True)) / max(1, len(first)),
        "candidate_match": sum(d is None for d in firsts) / max(1, len(first)),
        "first_divergence": firsts,
        "first_divergent_tokens": [
            None if d is None else [a[d] if d < len(a) else None, c[d] if d < len(c) else None]
            for d, a, c in zip(firsts, first, cand, strict=True)
        ],
    }


def run_verify(config: VerifyConfig) -> VerifyResult:
    if config.endpoints is not None:
        return asyncio.run(verify(*config.endpoints, config))
    from lossless.config import ServeConfig
    from lossless.server.launch import start_embedded
    from lossless.server.main import load_model

    plain = ServeConfig(port=0, model=config.embedded_model, speculative="none")
    loaded = load_model(plain)  # once: both servers serve this one engine
    with (
        start_embedded(plain, loaded=loaded) as u1,
        start_embedded(replace(plain, speculative="ngram"), loaded=loaded) as u2,
    ):
        # One engine (one KV cache) behind two servers: never more than one request at a time.
        serial = replace(config, concurrency=1)
        return asyncio.run(
            verify(Endpoint("plain", u1, loaded.name), Endpoint("speculative", u2, loaded.name), serial)
        )


def verify_config(baseline: str | None, candidate: str | None, opts: dict[str, Any]) -> VerifyConfig:
    """The CLI's options -> a VerifyConfig; mistakes are UsageErrors before any traffic."""
    from lossless import endpoints as ep

    budget = parse_budget(opts["budget"])
    if (baseline is None) != (candidate is None):
        raise UsageError("give both BASELINE and CANDIDATE URLs, or neither (the embedded engine)")
    if baseline is None or candidate is None:
        return VerifyConfig(None, budget, opts["api"], opts["seed"], opts["model"])
    base = ep.from_urls((baseline,), opts["model"], opts["api_key_env"])[0]
    cand = ep.from_urls(
        (candidate,),
        opts["candidate_model"] or opts["model"],
        opts["candidate_api_key_env"] or opts["api_key_env"],
    )[0]
    pair = (replace(base, name="baseline"), replace(cand, name="candidate"))
    for endpoint in pair:
        ep.api_key(endpoint)  # fail now, naming the variable, if a key is missing
    return VerifyConfig(pair, budget, opts["api"], opts["seed"])


def to_json(result: VerifyResult) -> str:
    return json.dumps(result.as_dict(), indent=2, default=str)


def write(result: VerifyResult, out_dir: Path) -> Path:
    from lossless.report.files import write_atomic

    return write_atomic(out_dir / "verify.json", to_json(result) + "\n")


def render(result: VerifyResult, console: Console) -> None:
    cand, base = result.candidate, result.baseline
    title = f"verify: {cand.name} ({cand.base_url}) against {base.name} ({base.base_url})"
    table = Table(title=title, title_justify="left")
    for col in ("test", "A/A p (Holm)", "A/B p (Holm)", "A/B effect", "A/A effect", "effect is"):
        table.add_column(col)
    d = result.decision
    for a, b, pa, pb in zip(result.aa, result.ab, d.aa_adjusted, d.ab_adjusted, strict=False):
        table.add_row(
            b.name, f"{pa:.3g}", f"{pb:.3g}", f"{b.effect:+.4g}", f"{a.effect:+.4g}", EFFECTS[b.name]
        )
    if result.tasks is not None:
        t = result.tasks
        table.add_row(
            "task accuracy",
            "",
            f"{d.ab_adjusted[-1]:.3g}",
            f"{t.difference:+.3g}",
            "",
            f"accuracy difference, {t.n} tasks (TOST +-{t.margin:g})",
        )
    console.print(table)
    g = result.greedy
    console.print(
        f"greedy (diagnostic): candidate matches baseline on {g['candidate_match']:.0%} of prompts, "
        f"baseline matches itself on {g['baseline_self_match']:.0%}"
    )
    if result.agreement is not None:
        console.print(
            f"log-prob agreement on {result.agreement.n} texts: {result.agreement.mean_abs_diff:.3g} "
            f"nats/token (baseline vs itself {result.agreement.baseline_noise:.3g})"
        )
    style = {"equivalent": "green", "different": "red", "inconclusive": "yellow"}[result.verdict]
    console.print(f"[bold {style}]{result.verdict}[/bold {style}]")
    for reason in d.reasons:
        console.print(f"  - {reason}")
    for note in result.notes:
        console.print(f"  note: {note}")
