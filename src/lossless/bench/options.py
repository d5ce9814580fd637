"""What ``lossless bench`` was asked to do: frozen, typed options, checked when they are made.

The CLI parses its flags into ``BenchOptions`` and hands it to ``bench.run.run``; every default is defined
here, once, and ``--help`` shows it from the same field (each command's folder has its ``options.py``).
Nothing here does I/O or imports numpy or torch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lossless.bench.phases import Window
from lossless.bench.workload.synthetic import Lengths
from lossless.errors import UsageError
from lossless.provision.embedded import Embedded

MAX_WORKERS = 4096  # load-generating processes (each an interpreter of ~100 MB)
DEFAULT_REQUESTS = 20  # measured requests per endpoint and level, when neither --requests nor --duration
MAX_REPEAT = 100  # whole runs


@dataclass(frozen=True)
class BenchOptions:
    urls: tuple[str, ...] = ()  # base URLs; none (and no endpoints_file): the embedded server
    model: str | None = None  # "model" sent to the URLs; the embedded model's name or path without URLs
    endpoints_file: Path | None = None  # TOML of [[endpoint]] tables, instead of urls
    api_key_env: str | None = None  # environment variable holding the URLs' API key
    suite: str = "short"  # short|long|mixed|lengths|file:PATH.jsonl
    api: str = "chat"  # chat|completions|responses|messages (client.apis)
    stream: bool = True
    stream_both: bool = False  # --stream both: each endpoint measured streamed and whole, the same prompts
    max_tokens: int = 128
    concurrency: tuple[int, ...] | None = None  # closed-loop levels run one after another; None: (1,)
    rate: tuple[float, ...] | None = None  # open loop: arrivals per second, levels run in turn
    burstiness: float = 1.0  # gamma shape of the open-loop gaps; 1 = Poisson
    replay_speed: tuple[float, ...] | None = None  # suite trace:PATH, its arrivals replayed this much faster
    requests: int | None = (
        None  # measured requests per endpoint and level (DEFAULT_REQUESTS without duration)
    )
    duration: float | None = None  # or: seconds of dispatching per level
    # unmeasured requests (or seconds) per endpoint and level: first, and after the measured ones (keeping
    # the load up while those finish)
    warmup: Window = field(default_factory=Window)
    cooldown: Window = field(default_factory=Window)
    ramp: float = 0.0  # seconds over which the concurrency or the rate rises linearly to each level's
    max_concurrency: int | None = None  # open loop: requests in flight per endpoint at most (None: 1024)
    until_saturated: bool = False  # a sweep stops after the first load no endpoint keeps up with
    repeat: int = 1  # whole runs, each on fresh connections, the endpoints' order alternating
    probe_rate: float | None = None  # light probe requests per second beside each level's load
    probe_idle: int = 10  # probes sent one at a time to the idle server first, the baseline
    take_turns: bool = False  # one request at a time over all endpoints (they share a machine)
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
    resume: bool = False  # continue the killed run in out_dir: its finished requests kept, the rest sent
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
                raise UsageError(
                    "--replay-speed takes its load from the trace: not with --rate, "
                    "--concurrency or --input-tokens"
                )
        if self.take_turns and (self.rate is not None or any(c > 1 for c in self.concurrency or (1,))):
            raise UsageError("--take-turns sends one request at a time: not with --rate or --concurrency > 1")
        if self.take_turns and (self.workers or self.ray or self.find_capacity is not None):
            raise UsageError(
                "--take-turns runs in one process at one request at a time: not with --workers, "
                "--ray or --find-capacity"
            )
        if self.stream_both and (self.hedge_after is not None or self.failover is not None):
            raise UsageError(
                "--stream both measures each endpoint twice: not with --hedge-after or --failover"
            )
        if self.hedge_after is not None or self.failover is not None:
            self._check_policy()
        if self.resume:
            self._check_resume()
        if self.tokenizer == "":
            raise UsageError("--tokenizer: give a tokenizer.json, a GGUF file or an embedded model's name")
        self._check_load_shape()

    def _check_load_shape(self) -> None:
        """--max-concurrency, --ramp, --repeat, --until-saturated and --probe-rate against the rest."""
        if self.max_concurrency is not None and self.concurrency is not None:
            raise UsageError(
                "--max-concurrency caps an open loop (--rate): a closed loop's --concurrency is its own cap"
            )
        if self.ramp and (self.take_turns or self.replay_speed is not None):
            raise UsageError(
                "--ramp raises a load: not with --take-turns (one at a time) or --replay-speed "
                "(a trace's own times)"
            )
        if not 1 <= self.repeat <= MAX_REPEAT:
            raise UsageError(f"--repeat wants 1 to {MAX_REPEAT}, got {self.repeat}")
        if self.find_capacity is not None and (self.repeat > 1 or self.until_saturated):
            raise UsageError("--find-capacity searches its own loads: not with --repeat or --until-saturated")
        if self.probe_rate is not None and self.take_turns:
            raise UsageError("--probe-rate sends probes beside a load: not with --take-turns")

    def _check_resume(self) -> None:
        if self.out_dir is None:
            raise UsageError("--resume continues the run in --out: give --out DIR")
        if self.duration is not None or self.find_capacity is not None or self.workers or self.ray:
            raise UsageError(
                "--resume continues a run of --requests in one process: not with --duration, "
                "--find-capacity, --workers or --ray"
            )
        if self.warmup.seconds is not None or self.cooldown.seconds is not None or self.repeat > 1:
            raise UsageError(
                "--resume continues requests counted by index: not with --warmup or --cooldown "
                "in seconds, or --repeat"
            )
        if self.probe_rate is not None:
            raise UsageError("--resume continues the load's requests: not with --probe-rate")
        if self.suite.startswith(("chat:", "conversations:")):
            raise UsageError(
                "--resume continues requests, not conversations cut midway: not with a chat: "
                "or conversations: suite"
            )

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
