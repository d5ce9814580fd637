"""verify's frozen config (what one run spends and how) and its typed result."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from lossless.analyze.paired import Paired
from lossless.client.endpoints import Endpoint, public_url
from lossless.verify.budget import ALONE_PAIR, BUDGETS, Budget, Criteria, Look, describe_alone
from lossless.verify.decide import Decision
from lossless.verify.distance import LogprobDistance
from lossless.verify.two_sample import EFFECTS, Finding

if TYPE_CHECKING:
    from lossless.tasks.task import Task
    from lossless.verify.taskset import ToolParity


@dataclass(frozen=True)
class VerifyConfig:
    budget: Budget = BUDGETS["default"]
    api: str = "completions"  # "chat" works with any provider, but cannot be teacher-forced as exactly
    seed: int = 0
    criteria: Criteria = field(default_factory=Criteria)
    concurrency: int = 4  # requests in flight, both endpoints together
    timeout: float = 120.0  # seconds for one request; a slower one is a failed request, not the end
    logprobs: bool = True  # False: none asked for, as against a server that gives none (--no-logprobs)
    task_set: tuple[Task, ...] | None = None  # verify --tasks' tasks, in place of the bundled questions


@dataclass(frozen=True)
class Procedure:
    """How the verdict was reached: the looks planned, the one it stopped at, and the error rates that
    the procedure holds, whatever look it stops at."""

    look: Look  # the look it stopped at, in its schedule
    requests: int  # sent to both endpoints after detection
    criteria: Criteria
    scored: bool  # teacher-forced scores bound the score difference (else nothing bounds it)
    distanced: bool = False  # the log-probability distance was tested against the tolerance
    alone: tuple[int, int] | None = None  # budget.sampled_alone: the sampled texts' measured power alone

    def guarantees(self) -> tuple[str, ...]:
        c = self.criteria
        count = len(self.look.schedule)
        looks = f"over all {count} looks" if count > 1 else "in its one look"
        within = f" and log-probabilities within {c.tolerance:g} nats a token of its" * self.distanced
        tested = "the sampled tests and the distance test" if self.distanced else "the tests"
        bounds = []
        if self.distanced:
            bounds.append(f"log-probabilities {c.tolerance:g} nats a token apart or more (bootstrap)")
        if self.scored:
            bounds.append(f"a mean score {c.tolerance_sd:g} sd apart or more (TOST)")
        equivalent = (
            f"equivalent: at most {c.alpha_equivalent:.0%} of runs on a candidate with "
            f"{' or '.join(bounds)}, {looks}; task accuracy within +-{c.margin:g} (TOST, 90%)"
            if bounds
            else "equivalent: no log-probabilities or teacher-forced scores, so no bound on the difference: "
            f"the tests found nothing at their power; task accuracy within +-{c.margin:g} (TOST, 90%)"
        )
        return (
            f"different: at most {c.alpha:.0%} of runs on a candidate that serves the baseline's "
            f"distribution{within} (Holm over {tested}, alpha spent {looks})",
            equivalent,
            f"inconclusive for the baseline's own noise: at most {c.alpha_aa:.0%} of runs on a stable "
            "baseline (A/A at the last look; an earlier A/A rejection draws more samples)",
        )

    def power(self) -> str | None:
        """What the sampled tests detect alone at this budget, measured, where they decided alone (the
        distance untested: no log-probabilities)."""
        return None if self.distanced else describe_alone(self.alone)

    def as_dict(self) -> dict[str, Any]:
        c = self.criteria
        return {
            "looks": list(self.look.schedule),
            "look": self.look.index + 1,
            "samples": self.look.samples,
            "requests": self.requests,
            "error_rates": {
                "different": c.alpha,
                "equivalent": c.alpha_equivalent,
                "inconclusive_aa": c.alpha_aa,
            },
            "tolerance_sd": c.tolerance_sd,
            "tolerance_nats": c.tolerance,
            "task_margin": c.margin,
            "sampled_alone": None
            if self.alone is None
            else {"pair": ALONE_PAIR, "different": self.alone[0], "runs": self.alone[1]},
            "guarantees": list(self.guarantees()),
            "power": self.power(),
        }


@dataclass(frozen=True)
class VerifyResult:
    baseline: Endpoint
    candidate: Endpoint
    budget: Budget
    decision: Decision
    aa: tuple[Finding, ...]
    ab: tuple[Finding, ...]
    tasks: Paired | None
    distance: LogprobDistance | None
    greedy: dict[str, Any]
    notes: tuple[str, ...] = ()
    capabilities: dict[str, dict[str, Any]] = field(default_factory=dict)  # per side, what detect found
    tool_parity: ToolParity | None = None  # verify --tasks with tools: trigger F1 and schema accuracy
    api: str = "completions"  # the API both sides were asked in
    procedure: Procedure | None = None

    @property
    def verdict(self) -> str:
        return self.decision.verdict

    def as_dict(self) -> dict[str, Any]:
        def ep(e: Endpoint) -> dict[str, str]:
            return {"name": e.name, "base_url": public_url(e.base_url), "model": e.model}

        return {
            "verdict": self.verdict,
            "api": self.api,
            "reasons": list(self.decision.reasons),
            "detectable_score_difference": self.decision.detectable,
            "score_difference_bound": self.decision.bound,
            "level": self.decision.level,
            "procedure": None if self.procedure is None else self.procedure.as_dict(),
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
            "tool_parity": None if self.tool_parity is None else asdict(self.tool_parity),
            "logprob_distance": None if self.distance is None else asdict(self.distance),
            "greedy": self.greedy,
            "capabilities": self.capabilities,
            "notes": list(self.notes),
        }
