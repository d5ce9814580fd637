"""What running tasks yields: one ``TaskRun`` per task and sample, summaries per endpoint, comparisons.

Times are seconds of one monotonic clock. A task's time is its wall time from its first request to its
verdict; its parts: model (TTFT + generation of the answered calls), tools (their stated latency, waited
out), retries and waits (failed attempts and the back-off before the next), checks (the checker's run,
which repair attempts wait for). Costs are USD; None where no price was given.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from lossless.analyze.distribution import Distribution

ENDS = ("answer", "step_limit", "token_budget", "time_limit", "error")


@dataclass(frozen=True)
class ModelCall:
    """One attempt at one model call of a task."""

    step: int  # which model call of its attempt, from 1
    retry: int  # 0, then 1, 2 ... for the retries of a failed call
    error_kind: str | None  # None: answered
    e2e_s: float
    ttft_s: float | None  # first content, reasoning or tool-call event (bench's TTFT)
    generation_s: float | None  # end - first token
    speed: float | None  # output tokens/s after the first event (bench's output speed)
    n_in: int | None  # usage.prompt_tokens (None: not reported)
    n_out: int | None
    n_cached: int | None
    tool_calls: int
    finish_reason: str | None
    cost_usd: float | None  # from the usage the server reported (never from counted tokens)
    n_out_source: str | None = None  # "usage", "tokenizer:<name>" (no usage: the answer's text counted)


@dataclass(frozen=True)
class TaskRun:
    endpoint: str
    task: str
    sample: int
    success: bool
    end: str  # one of ENDS: how the last attempt ended
    reason: str  # the checker's one line, or why there was no answer to check
    attempts: int  # 1 + repair attempts made
    steps: int  # answered model calls, over all attempts
    retries: int  # failed model calls that were sent again
    tool_calls: int
    tool_errors: int  # calls answered with an error (unknown tool, bad arguments, the tool raised)
    invalid_arguments: int  # calls whose arguments were not a JSON object
    schema_invalid: int  # calls whose arguments the function's parameters schema rejects (or no such tool)
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int | None  # None: no answer said
    # answered calls without usage: not priced; their output tokens counted by the model's tokenizer where
    # one was found (as bench counts them), else not counted
    usage_missing: int
    task_s: float
    model_s: float
    ttft_s: float
    generation_s: float
    tool_s: float
    retry_s: float  # failed attempts and the waits after them
    check_s: float
    cost_usd: float | None  # inference (failed attempts' reported tokens included) + tool calls
    retry_cost_usd: float | None  # of which: failed attempts
    tool_cost_usd: float | None  # of which: tool calls
    calls: tuple[ModelCall, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class Interval:
    value: float | None
    ci95: tuple[float, float] | None = None


@dataclass(frozen=True)
class EndpointTasks:
    """One endpoint over the task set."""

    name: str
    base_url: str
    model: str
    tasks: int
    samples: int
    runs: int  # tasks x samples
    successes: int
    success_rate: Interval  # Wilson 95%
    pass_at: Mapping[int, float]  # k -> unbiased pass@k (samples > 1)
    time_per_success: Distribution  # task_s of the successful runs (p50, p95, bootstrap CIs)
    mean_time_per_success: Interval  # seconds, bootstrap 95% over tasks
    cost_per_success: Interval  # all cost / successes, bootstrap 95% over tasks; None without prices
    total_cost_usd: float | None
    mean_parts_s: Mapping[str, float]  # per run: task, model, ttft, generation, tool, retry, check
    mean_steps: float
    attempts: int  # model-call attempts sent
    retries: int
    tool_calls: int
    invalid_arguments: Interval  # share of tool calls, Wilson 95%
    schema_invalid: Interval  # share of tool calls the function's schema rejects (invalid JSON included)
    output_speed: float | None  # p50 tokens/s of answered calls
    ends: Mapping[str, int]


@dataclass(frozen=True)
class TasksComparison:
    """``candidate`` against ``baseline`` on the same tasks and samples, paired."""

    baseline: str
    candidate: str
    pairs: int
    both: int  # solved by both
    only_baseline: int
    only_candidate: int
    difference: float  # success rate, candidate - baseline
    ci90: tuple[float, float]  # TOST interval of the difference
    p_mcnemar: float
    margin: float
    verdict: str  # "different" (McNemar rejects), "equivalent" (TOST within margin) or "inconclusive"
    task_time_ratio: Interval  # candidate / baseline, mean time of the pairs both solved
    cost_ratio: Interval  # candidate / baseline cost per successful task
    output_speed_ratio: float | None  # candidate / baseline p50 output speed
    line: str  # "output speed 2.00x, task time 1.30x" (speed-ups: above 1, the candidate is faster)


@dataclass(frozen=True)
class TasksResult:
    task_set: str
    settings: Mapping[str, Any]
    endpoints: tuple[EndpointTasks, ...]
    comparisons: tuple[TasksComparison, ...]
    runs: tuple[TaskRun, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return {
            "task_set": self.task_set,
            "settings": dict(self.settings),
            "endpoints": [_plain(asdict(e)) for e in self.endpoints],
            "comparisons": [_plain(asdict(c)) for c in self.comparisons],
            "runs": [r.as_dict() for r in self.runs],
        }


def _plain(obj: Any) -> Any:
    """JSON-ready: mapping keys as strings (pass@k's k)."""
    if isinstance(obj, dict):
        return {str(k): _plain(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_plain(v) for v in obj]
    return obj
