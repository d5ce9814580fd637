"""verify's frozen config (what one run spends and how) and its typed result."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

from lossless.analyze.paired import Paired
from lossless.client.endpoints import Endpoint, public_url
from lossless.verify.budget import BUDGETS, Budget
from lossless.verify.decide import Agreement, Criteria, Decision
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
    task_set: tuple[Task, ...] | None = None  # verify --tasks' tasks, in place of the bundled questions


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
    tool_parity: ToolParity | None = None  # verify --tasks with tools: trigger F1 and schema accuracy
    api: str = "completions"  # the API both sides were asked in

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
            "logprob_agreement": None if self.agreement is None else asdict(self.agreement),
            "greedy": self.greedy,
            "capabilities": self.capabilities,
            "notes": list(self.notes),
        }
