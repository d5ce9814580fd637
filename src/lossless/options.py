"""What each command was asked to do: frozen, typed options, checked when they are made.

The CLI parses its flags into one of these and hands it to the command's stage (``bench.run``,
``probe.stage.run``, ``verify.stage.run``, ``demo.run``); every default is defined here, once, and
``--help`` shows it from the same field. Nothing here does I/O or imports numpy or torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path

from lossless.errors import UsageError
from lossless.provision import Embedded
from lossless.verify.budget import BUDGETS, Budget, parse_budget
from lossless.workload.synthetic import Lengths

MAX_CONCURRENCY = 100_000  # in flight per endpoint, each a task and a socket: past this, memory runs out
MAX_WORKERS = 4096  # load-generating processes (each an interpreter of ~100 MB)


def int_list(text: str, option: str, most: int = MAX_CONCURRENCY) -> tuple[int, ...]:
    """``"1,4,16"`` -> (1, 4, 16), each in 1..most."""
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UsageError(f"{option} wants integers like 1,4,16, got {text!r}") from None
    if not values or min(values) < 1 or max(values) > most:
        raise UsageError(f"{option} wants positive integers up to {most:,} like 1,4,16, got {text!r}")
    return values


def float_list(text: str, option: str, lo: float = 1e-6, hi: float = 1e6) -> tuple[float, ...]:
    """``"1,2.5,4"`` -> (1.0, 2.5, 4.0), each finite and in lo..hi."""
    try:
        values = tuple(float(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise UsageError(f"{option} wants numbers like 1,2,4, got {text!r}") from None
    if not values or not all(lo <= v <= hi for v in values):  # (nan and inf fail this too)
        raise UsageError(f"{option} wants numbers from {lo:g} to {hi:g} like 1,2,4, got {text!r}")
    return values


@dataclass(frozen=True)
class BenchOptions:
    urls: tuple[str, ...] = ()  # base URLs; none (and no endpoints_file): the embedded server
    model: str | None = None  # "model" sent to the URLs; the embedded model's name or path without URLs
    endpoints_file: Path | None = None  # TOML of [[endpoint]] tables, instead of urls
    api_key_env: str | None = None  # environment variable holding the URLs' API key
    suite: str = "short"  # short|long|mixed|lengths|file:PATH.jsonl
    api: str = "chat"  # chat|completions
    stream: bool = True
    max_tokens: int = 128
    concurrency: tuple[int, ...] | None = None  # closed-loop levels run one after another; None: (1,)
    rate: tuple[float, ...] | None = None  # open loop: arrivals per second, levels run in turn
    burstiness: float = 1.0  # gamma shape of the open-loop gaps; 1 = Poisson
    replay_speed: tuple[float, ...] | None = None  # suite trace:PATH, its arrivals replayed this much faster
    requests: int | None = None  # measured requests per endpoint and level (default 20 without duration)
    duration: float | None = None  # or: seconds of dispatching per level
    warmup: int = 0  # unmeasured requests first
    retries: int = 0
    timeout_connect: float = 10.0  # seconds
    timeout_first_token: float = 60.0  # seconds; 0 = none
    timeout_total: float = 600.0  # seconds
    slo: str | None = None  # goodput objectives, "ttft=500,tpot=50,e2e=5s"
    stall_threshold: float = 1.0  # seconds: a longer inter-chunk gap is a stall
    seed: int = 0
    tokenizer: str | None = None  # counts N_out when a server sends no usage: tokenizer.json, GGUF or name
    as_json: bool = False  # summary JSON on stdout, table on stderr
    out_dir: Path | None = None  # records.jsonl, summary.json, summary.csv
    html: Path | None = None  # a self-contained HTML report with plots
    workers: int | None = None  # load-generating processes; None: one (or, with ray, one per cluster CPU)
    find_capacity: float | None = None  # share (0..1) of requests that must meet every --slo objective
    input_tokens: Lengths | None = None  # token-exact prompts of these lengths instead of --suite
    output_tokens: Lengths | None = None  # with input_tokens: outputs of these lengths (ignore_eos)
    capacity_precision: float = 0.05  # stop when held and missed loads are this close (relative)
    capacity_budget: float = 600.0  # seconds of searching at most
    ray: str | None = None  # run the workers as Ray tasks: a cluster's address, or "local" to start one
    hedge_after: float | None = None  # ms: a 2nd attempt when the 1st has not answered by then
    failover: str | None = None  # URL (or, with endpoints_file, an endpoint's name) to fail over to
    failover_after: float | None = None  # ms without a first token before failing over; None: errors only

    def __post_init__(self) -> None:
        if self.workers is not None and not 1 <= self.workers <= MAX_WORKERS:
            raise UsageError(f"--workers wants 1 to {MAX_WORKERS:,}, got {self.workers}")
        if self.ray == "":
            raise UsageError("--ray: give a cluster address (host:6379, ray://host:10001, auto) or no value")
        if self.urls and self.endpoints_file:
            raise UsageError("give endpoint URLs or --endpoints FILE, not both")
        if self.failover_after is not None and self.failover is None:
            raise UsageError("--failover-after goes with --failover URL")
        if self.output_tokens is not None and self.input_tokens is None:
            raise UsageError("--output-tokens goes with --input-tokens (a token-exact workload)")
        if self.find_capacity is not None:
            if not self.slo:
                raise UsageError("--find-capacity searches for the load that meets --slo: give --slo too")
            if len(self.concurrency or self.rate or (1,)) > 1:
                raise UsageError("--find-capacity starts from one --rate or --concurrency, not a list")
        if self.rate is not None and self.concurrency is not None:
            raise UsageError("choose --concurrency (closed loop) or --rate (open loop), not both")
        if self.replay_speed is not None:
            if not self.suite.startswith("trace:"):
                raise UsageError("--replay-speed replays a trace: give --suite trace:PATH too")
            if self.rate is not None or self.concurrency is not None or self.input_tokens is not None:
                raise UsageError("--replay-speed takes its load from the trace: not with --rate, "
                                 "--concurrency or --input-tokens")  # fmt: skip
        if self.hedge_after is not None or self.failover is not None:
            self._check_policy()
        if self.tokenizer == "":
            raise UsageError("--tokenizer: give a tokenizer.json, a GGUF file or an embedded model's name")

    def _check_policy(self) -> None:
        if self.hedge_after is not None and self.failover is not None:
            raise UsageError("choose --hedge-after or --failover, not both")
        if self.retries:
            raise UsageError("--hedge-after and --failover send the second attempts: not with --retries")
        if self.failover is not None and len(self.urls) > 1:
            raise UsageError("--failover backs up one endpoint: give one URL")
        if self.failover is not None and not self.urls and not self.endpoints_file:
            raise UsageError("--failover backs up an endpoint you name: give its URL (or --endpoints)")

    @property
    def embedded(self) -> Embedded:
        return Embedded(model=self.model)


@dataclass(frozen=True)
class ProbeOptions:
    url: str | None = None  # none: the embedded server
    model: str | None = None  # "model" sent to url; the embedded model's name or path without one
    api_key_env: str | None = None
    repeats: int = 4  # requests per arm where a comparison needs several
    max_tokens: int = 64  # for answers that must be long enough to show a difference
    as_json: bool = False
    out_dir: Path | None = None  # probe.json

    @property
    def embedded(self) -> Embedded:
        return Embedded(model=self.model)


# --reference words: the embedded model served with weights so (int4: the GGUF's own 4-bit blocks)
REFERENCE_WORDS = ("float32", "bfloat16", "int4")


def reference_parts(ref: str) -> tuple[str, str]:
    """A --reference as (its name, the URL or word): NAME=URL names itself; else the name is ""."""
    head, eq, tail = ref.partition("=")
    return (head, tail) if eq and "://" not in head else ("", ref)


@dataclass(frozen=True)
class InspectOptions:
    urls: tuple[str, ...] = ()  # base URLs; none: the embedded server, served plainly
    model: str | None = None  # "model" sent to the URLs; the embedded model's name or path without URLs
    api_key_env: str | None = None
    tokenizers: tuple[str, ...] = ()  # identity references beyond the bundled ones: tokenizer.json, GGUF
    max_tokens: int = 48  # per speculation request: enough for bursts, short enough to stay in a passage
    min_rounds: int = 4  # rounds of the four speculation arms before the verdict may settle
    max_rounds: int = 8  # 8 settled every local configuration measured (README, inspect)
    budget_s: float = 120.0  # seconds: no round of speculation requests starts after this, per endpoint
    seed: int = 0  # bootstrap
    as_json: bool = False
    out_dir: Path | None = None  # inspect.json
    # precision's references: [NAME=]URL (served --model, --api-key-env) or a word in REFERENCE_WORDS
    # (the embedded model served so); none: float32 and bfloat16 where the tokenizer is SmolLM2's
    references: tuple[str, ...] = ()
    precision: bool = True  # claim 2 measured (--no-precision: not, for speed-only runs)
    measure_context: bool = False  # the longest prompt answered, searched for (long prompts: full prefills)

    def __post_init__(self) -> None:
        for ref in self.references:
            name, target = reference_parts(ref)
            if target not in REFERENCE_WORDS and not target.startswith(("http://", "https://")):
                words = ", ".join(REFERENCE_WORDS)
                raise UsageError(f"--reference {ref!r}: expected [NAME=]URL or one of {words}")
            if name == "" and ref != target:
                raise UsageError(f"--reference {ref!r}: an empty name before '='")
        if not 4 <= self.min_rounds <= self.max_rounds <= 100:
            raise UsageError(
                f"--min-rounds and --max-rounds want 4 <= min <= max <= 100, got {self.min_rounds} and "
                f"{self.max_rounds}"
            )
        if not 8 <= self.max_tokens <= 4096:
            raise UsageError(f"--max-tokens wants 8 to 4,096, got {self.max_tokens}")

    @property
    def embedded(self) -> Embedded:
        return Embedded(model=self.model)


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
        if not 0 < self.margin < 1:
            raise UsageError(f"--margin wants a share between 0 and 1, got {self.margin:g}")

    @property
    def embedded(self) -> Embedded:
        return Embedded(model=self.model)


# --quick (CI): the smallest run that still exercises every step and gives the statistics two samples
QUICK_BUDGET = Budget(prompts=3, samples=4, max_tokens=12, tasks=8, permutations=500)
# The demo's: "small" said "inconclusive, about 2x the samples and 1.4x the tasks would settle it" against
# the embedded model on 2 cores (float32, n-gram). In bfloat16 with the DSpark head, 5 x 12 said
# "inconclusive, about 1.1x the samples"; this is 1.4x that, and the whole demo takes ~3 minutes there.
DEMO_BUDGET = Budget(prompts=6, samples=14, max_tokens=16, tasks=18)


@dataclass(frozen=True)
class DemoOptions:
    out_dir: Path = Path("lossless-demo")  # bench files, verify.json and report.html
    requests: int = 6  # measured requests per suite (short, long, grounded) and endpoint
    max_tokens: int = 64  # per benchmark request
    budget: Budget = DEMO_BUDGET  # the verification's
    warmup: int = 1  # unmeasured requests per endpoint first (the first forward pass is slow)
    # benchmark requests' temperature: 0 (greedy) by default, so both modes write the same answers (in
    # bfloat16 they part on some prompts: a forward over several tokens rounds differently from one over
    # one) and are timed on equal work; verification samples at its own temperatures either way
    temperature: float = 0.0
    # the model, its dtype and the speculative server's drafter: provision.Embedded's defaults
    embedded: Embedded = field(default_factory=Embedded)
    seed: int = 0

    @property
    def drafter(self) -> str:
        return self.embedded.speculative


QUICK_DEMO = DemoOptions(requests=4, max_tokens=24, budget=QUICK_BUDGET)


def demo_options(
    out_dir: Path,
    quick: bool = False,
    *,
    requests: int | None = None,
    max_tokens: int | None = None,
    verify_budget: str | None = None,
    model: str | None = None,
    speculative: str | None = None,
    dtype: str = Embedded.dtype,
    seed: int = 0,
    temperature: float = 0.0,
) -> DemoOptions:
    """The CLI's flags -> DemoOptions: ``--quick`` lowers the defaults; explicit flags win. A budget given
    as PxSxT changes those three of the demo's own budget, not of verify's."""
    base = QUICK_DEMO if quick else DemoOptions()
    budget = base.budget
    if verify_budget is not None:
        budget = parse_budget(verify_budget, base.budget, "--verify-budget")
    return replace(
        base,
        out_dir=out_dir,
        requests=requests or base.requests,
        max_tokens=max_tokens or base.max_tokens,
        budget=budget,
        embedded=Embedded(model=model, dtype=dtype, drafter=speculative),
        seed=seed,
        temperature=temperature,
    )
