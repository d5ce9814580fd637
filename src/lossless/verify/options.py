"""What ``lossless verify`` was asked to do: frozen options, checked when they are made; every default
defined here once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lossless.errors import UsageError
from lossless.provision.embedded import Embedded
from lossless.verify.budget import BUDGETS, Budget, Criteria


@dataclass(frozen=True)
class VerifyOptions:
    baseline: str | None = None  # URLs; neither: the embedded engine, plain against speculative
    candidate: str | None = None
    model: str | None = None  # sent to both; the embedded model's name or path without URLs
    candidate_model: str | None = None  # default: model
    api_key_env: str | None = None
    candidate_api_key_env: str | None = None  # default: api_key_env
    endpoints_file: Path | None = None  # TOML with [baseline] and [candidate], instead of URLs
    budget: Budget = BUDGETS["default"]
    api: str = "completions"  # "chat" works with any provider, but cannot be teacher-forced as exactly
    seed: int = 0
    tolerance: float = Criteria().tolerance  # nats a token: the largest distance called the same model
    logprobs: bool = True  # False: --no-logprobs, the sampled texts alone decide
    timeout: float = 120.0  # seconds for one request; a slower one counts as failed, the run goes on
    task_set: str | None = None  # --tasks: a task set (or file) in place of the bundled questions
    tasks_limit: int | None = None  # its first N tasks; None: all
    as_json: bool = False
    out_dir: Path | None = None  # verify.json
    html: Path | None = None

    def __post_init__(self) -> None:
        if self.endpoints_file is not None and (self.baseline or self.candidate):
            raise UsageError("give BASELINE and CANDIDATE URLs or --endpoints FILE, not both")
        if (self.baseline is None) != (self.candidate is None):
            raise UsageError("give both BASELINE and CANDIDATE URLs, or neither (the embedded engine)")

    @property
    def embedded(self) -> Embedded:
        return Embedded(model=self.model)
