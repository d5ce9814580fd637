"""What ``lossless tasks`` was asked to do: frozen options, checked when they are made; every default
defined here once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lossless.errors import UsageError
from lossless.provision.embedded import Embedded
from lossless.validate import MAX_CONCURRENCY


@dataclass(frozen=True)
class TasksOptions:
    urls: tuple[str, ...] = ()  # base URLs; none (and no endpoints_file): the embedded server
    model: str | None = None  # "model" sent to the URLs; the embedded model's name or path without URLs
    endpoints_file: Path | None = None  # TOML of [[endpoint]] tables (prices included), instead of urls
    api_key_env: str | None = None
    task_set: str = "arithmetic"  # humaneval|arithmetic|tools, or a task file (JSON Lines)
    limit: int | None = None  # the first N tasks of the set
    samples: int = 1  # runs per task (pass@k for k up to this)
    repairs: int = 0  # further attempts after a failed check, with the checker's reason fed back
    concurrency: int = 1  # tasks in flight per endpoint (endpoints run one after another)
    api: str = "chat"  # chat, responses or messages (an agent's turns need messages and tools)
    stream: bool = True
    max_tokens: int | None = None  # per model call at most; None: the task's own budget
    temperature: float | None = None  # None: the endpoint's default
    tool_choice: str | None = None  # sent with a task's tools: auto, required, none, required-first
    retries: int = 3  # further attempts at a model call after a retryable failure
    retry_wait: float = 0.5  # seconds before the first retry without Retry-After (doubling, jittered)
    timeout: float = 120.0  # seconds for one model call
    price_in: float | None = None  # USD per million input tokens (an endpoints file's own prices win)
    price_out: float | None = None  # USD per million output tokens
    price_cached_in: float | None = None  # USD per million cached input tokens; None: at price_in
    price_tool: float | None = None  # USD per tool call
    margin: float = 0.1  # TOST equivalence margin of the paired success difference (absolute)
    seed: int = 0  # bootstrap and retry jitter
    as_json: bool = False
    out_dir: Path | None = None  # tasks.json
    html: Path | None = None  # a self-contained page

    def __post_init__(self) -> None:
        if self.urls and self.endpoints_file:
            raise UsageError("give endpoint URLs or --endpoints FILE, not both")
        if self.limit is not None and self.limit < 1:
            raise UsageError(f"--limit wants a positive number of tasks, got {self.limit}")
        if not 1 <= self.samples <= 1000 or not 1 <= self.concurrency <= MAX_CONCURRENCY:
            raise UsageError("--samples wants 1 to 1,000 and --concurrency 1 to 100,000")
        if self.api == "completions":
            raise UsageError(
                "--api completions has no messages or tools to run tasks with: use chat, "
                "responses or messages"
            )
        if not 0 < self.margin < 1:
            raise UsageError(f"--margin wants a share between 0 and 1, got {self.margin:g}")

    @property
    def embedded(self) -> Embedded:
        return Embedded(model=self.model)
