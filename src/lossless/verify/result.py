"""verify's configuration and result types: budgets, the frozen config, the typed result."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from lossless.endpoints import Endpoint, public_url
from lossless.errors import UsageError
from lossless.verify import collect
from lossless.verify.decide import Agreement, Criteria, Decision
from lossless.verify.stats import EFFECTS, Finding, Paired


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
    timeout: float = 120.0  # seconds for one request; a slower one is a failed request, not the end


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
    capabilities: dict[str, dict[str, Any]] = field(default_factory=dict)  # per side, what detect found

    @property
    def verdict(self) -> str:
        return self.decision.verdict

    def as_dict(self) -> dict[str, Any]:
        def ep(e: Endpoint) -> dict[str, str]:
            return {"name": e.name, "base_url": public_url(e.base_url), "model": e.model}

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
            "capabilities": self.capabilities,
            "notes": list(self.notes),
        }
