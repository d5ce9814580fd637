"""What ``summarize`` returns: a frozen, typed ``Summary`` and its parts, complete when made.

``as_dict()`` is the JSON edge (summary.json, ``--json``): the keys and nesting summary.json has always had.
``from_dict()`` reads such a dict back (``lossless report``, ``lossless compare``) and raises KeyError,
TypeError or ValueError, naming the field, where it is not shaped so; the caller names the file. A null
where a number belongs reads back as NaN: the JSON writer turns non-finite numbers into null.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from lossless.analyze.distribution import Distribution
from lossless.analyze.metrics import METRICS
from lossless.analyze.probes import ProbeStats
from lossless.analyze.ratios import ClassComparison, Comparison
from lossless.analyze.repeats import Repeats
from lossless.analyze.saturation import Saturation
from lossless.analyze.server_side import Counts, ServedBy, ServerMetrics, Speculative
from lossless.analyze.shapes import (
    counts_ as _counts,
    int_ as _int,
    list_ as _list,
    num_ as _num,
    obj_ as _obj,
    opt_ as _opt,
    opts_ as _opts,
    plain_ as _plain,
    str_ as _str,
)


@dataclass(frozen=True)
class Requests:
    ok: int
    failed: int  # final attempts that failed, cancelled ones apart
    cancelled: int  # cut off by the run's end (Ctrl-C, SIGTERM, --duration)
    attempts: int  # retried ones included
    errors: Counts  # error kind -> attempts, sorted by kind

    @classmethod
    def from_dict(cls, d: object) -> Requests:
        d = _obj(d)
        ints = {k: _int(d[k], k) for k in ("ok", "failed", "cancelled", "attempts")}
        return cls(**ints, errors=_counts(d["errors"], "errors"))


@dataclass(frozen=True)
class Stalls:
    count: int  # inter-chunk gaps over the threshold
    requests_with_stalls: int
    total_s: float

    @classmethod
    def from_dict(cls, d: object) -> Stalls:
        d = _obj(d)
        return cls(
            _int(d["count"], "count"),
            _int(d["requests_with_stalls"], "requests_with_stalls"),
            _num(d["total_s"], "total_s"),
        )


@dataclass(frozen=True)
class Throughput:
    output_tokens_per_s: float | None  # None: no measurement window
    requests_per_s: float | None
    goodput_requests_per_s: float | None  # requests meeting every SLO per second; None without --slo

    @classmethod
    def from_dict(cls, d: object) -> Throughput:
        return cls(**_opts(d, fields(cls)))


@dataclass(frozen=True)
class CacheStats:
    """Prompt caching, from the requests whose usage said how many prompt tokens came from the cache."""

    reporting: int  # successful requests whose usage said (the rest are not counted here)
    hits: int  # of them, with at least one cached token
    cached_tokens: int
    prompt_tokens: int  # of the reporting requests
    ttft_hit: Distribution  # ms
    ttft_miss: Distribution

    def as_dict(self) -> dict[str, Any]:
        return {**_plain(self), "ttft_hit": self.ttft_hit.as_dict(), "ttft_miss": self.ttft_miss.as_dict()}

    @classmethod
    def from_dict(cls, d: object) -> CacheStats:
        d = _obj(d)
        ints = {k: _int(d[k], k) for k in ("reporting", "hits", "cached_tokens", "prompt_tokens")}
        return cls(
            **ints,
            ttft_hit=Distribution.from_dict(d["ttft_hit"]),
            ttft_miss=Distribution.from_dict(d["ttft_miss"]),
        )


@dataclass(frozen=True)
class LengthCheck:
    """Token-exact workloads: did the server count the prompt tokens asked, and generate the outputs?"""

    requests: int  # successful requests that asked for a prompt length
    input_exact: int  # whose usage.prompt_tokens was the length asked
    input_off_most: int  # the largest |prompt_tokens - asked| (a request without usage: not counted)
    output_asked: int  # successful requests that asked for an output length
    output_exact: int  # that got exactly that many tokens

    @classmethod
    def from_dict(cls, d: object) -> LengthCheck:
        return cls(**{f.name: _int(_obj(d)[f.name], f.name) for f in fields(cls)})


@dataclass(frozen=True)
class SessionStats:
    """Conversations: a session's task time runs from its first turn's send to its last turn's end."""

    sessions: int  # conversations started (not warm-up)
    completed: int  # every turn answered (a failed turn ends its session)
    turns_ok: int  # turns answered, over every session
    task_s: Distribution  # of completed sessions
    model_s: Distribution  # the part of it spent waiting for answers: the sum of the turns' E2E

    def as_dict(self) -> dict[str, Any]:
        return {**_plain(self), "task_s": self.task_s.as_dict(), "model_s": self.model_s.as_dict()}

    @classmethod
    def from_dict(cls, d: object) -> SessionStats:
        d = _obj(d)
        ints = {k: _int(d[k], k) for k in ("sessions", "completed", "turns_ok")}
        return cls(
            **ints, task_s=Distribution.from_dict(d["task_s"]), model_s=Distribution.from_dict(d["model_s"])
        )


@dataclass(frozen=True)
class GroupStats:
    """One endpoint at one load level, or one prompt class of it."""

    requests: Requests
    metrics: Mapping[str, Distribution]  # by ``Metric.key``, in the table's order
    # "usage", "tokenizer:NAME", "chunks" (no usage and no tokenizer: TPOT is time per chunk) or "none"
    n_out_sources: Counts
    stalls: Stalls
    window_s: float | None  # first send to last end; None when nothing ended
    throughput: Throughput
    server_ms: Mapping[str, Distribution]  # server-side timing header -> its values
    cost_per_ok_request_usd: float | None  # None without prices
    served_by: ServedBy
    slo_attainment: Mapping[str, float] = field(default_factory=dict)  # objective (and "all") -> share
    prompt_cache: CacheStats | None = None  # None: no request's usage said what was cached
    lengths: LengthCheck | None = None  # None: the workload asked for no token counts
    sessions: SessionStats | None = None  # None: not a conversation workload

    def stat(self, metric: str, stat: str) -> float | None:
        return self.metrics[metric].get(stat) if metric in self.metrics else None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"requests": _plain(self.requests)}
        out |= {key: d.as_dict() for key, d in self.metrics.items()}
        return out | {
            "n_out_sources": dict(self.n_out_sources),
            "stalls": _plain(self.stalls),
            "window_s": self.window_s,
            "throughput": _plain(self.throughput),
            "server_ms": {k: d.as_dict() for k, d in self.server_ms.items()},
            "cost_per_ok_request_usd": self.cost_per_ok_request_usd,
            "served_by": _plain(self.served_by),
            "slo_attainment": dict(self.slo_attainment),
            "prompt_cache": None if self.prompt_cache is None else self.prompt_cache.as_dict(),
            "lengths": None if self.lengths is None else _plain(self.lengths),
            "sessions": None if self.sessions is None else self.sessions.as_dict(),
        }

    @classmethod
    def from_dict(cls, d: object) -> GroupStats:
        """Parts that older versions did not write read as empty."""
        d = _obj(d)
        metrics = {m.key: Distribution.from_dict(d.get(m.key, {"n": 0})) for m in METRICS}
        server = {k: Distribution.from_dict(v) for k, v in _obj(d.get("server_ms", {})).items()}
        return cls(
            Requests.from_dict(d["requests"]),
            metrics,
            _counts(d.get("n_out_sources", {}), "n_out_sources"),
            Stalls.from_dict(d["stalls"]),
            _opt(d.get("window_s"), "window_s"),
            Throughput.from_dict(d["throughput"]),
            server,
            _opt(d.get("cost_per_ok_request_usd"), "cost"),
            ServedBy.from_dict(d.get("served_by", {})),
            {k: _num(v, k) for k, v in _obj(d.get("slo_attainment", {})).items()},
            None if d.get("prompt_cache") is None else CacheStats.from_dict(d["prompt_cache"]),
            None if d.get("lengths") is None else LengthCheck.from_dict(d["lengths"]),
            None if d.get("sessions") is None else SessionStats.from_dict(d["sessions"]),
        )


@dataclass(frozen=True)
class EndpointStats:
    name: str
    load: str  # "c=4", "rate=2/s"
    overall: GroupStats  # every prompt class together
    classes: Mapping[str, GroupStats]  # prompt class -> its stats, in the order the workload sent them
    speculative: Speculative | None  # None: the server published no draft counters
    server_metrics: ServerMetrics | None = None  # None: no /metrics, or nothing on it moved
    saturation: Saturation | None = None  # can it keep up with this load? None: too few requests
    probes: ProbeStats | None = None  # bench --probe-rate: a lone user's requests beside the load
    repeats: Repeats | None = None  # bench --repeat: each statistic per run, with a between-run CI

    def as_dict(self) -> dict[str, Any]:
        classes = {c: g.as_dict() for c, g in self.classes.items()}
        spec = None if self.speculative is None else self.speculative.as_dict()
        metrics = None if self.server_metrics is None else self.server_metrics.as_dict()
        extra = {k: None if (v := getattr(self, k)) is None else v.as_dict() for k in _PARTS}
        return {
            "name": self.name,
            "load": self.load,
            **self.overall.as_dict(),
            "classes": classes,
            "speculative": spec,
            "server_metrics": metrics,
            **extra,
        }

    @classmethod
    def from_dict(cls, d: object) -> EndpointStats:
        d = _obj(d)
        classes = {c: GroupStats.from_dict(g) for c, g in _obj(d.get("classes", {})).items()}
        spec = None if d.get("speculative") is None else Speculative.from_dict(d["speculative"])
        metrics = None if d.get("server_metrics") is None else ServerMetrics.from_dict(d["server_metrics"])
        name, load = _str(d["name"], "name"), _str(d["load"], "load")
        sat, probes, repeats = (None if d.get(k) is None else d[k] for k in _PARTS)
        return cls(
            name,
            load,
            GroupStats.from_dict(d),
            classes,
            spec,
            metrics,
            None if sat is None else Saturation.from_dict(sat),
            None if probes is None else ProbeStats.from_dict(probes),
            None if repeats is None else Repeats.from_dict(repeats),
        )


_PARTS = ("saturation", "probes", "repeats")  # optional parts, newer than the rest


@dataclass(frozen=True)
class RunInfo:
    """What bench adds to the numbers: how the run was made and where."""

    tokenizer: str | None  # --tokenizer
    event_loop: str  # the asyncio loop that measured: "uvloop" or "asyncio"
    interrupted: bool  # Ctrl-C or SIGTERM: the numbers cover the requests that finished
    config: Mapping[str, Any]  # the settings, without secrets (``bench.config_block``)
    environment: Mapping[str, Any]  # versions, platform, start time (``bench.environment``)
    workers: int = 1  # load-generating processes (bench --workers / --ray)
    clients: tuple[Mapping[str, Any], ...] = ()  # each process's CPU per level (``analyze.clients``)
    warnings: tuple[str, ...] = ()  # what went wrong with the measuring itself: saturation, a lost worker

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunInfo:
        tokenizer = d.get("tokenizer")
        if tokenizer is not None:
            tokenizer = _str(tokenizer, "tokenizer")
        interrupted = d.get("interrupted", False)
        if not isinstance(interrupted, bool):
            raise TypeError(f"interrupted is {type(interrupted).__name__}, not true or false")
        clients = tuple(_obj(c) for c in _list(d.get("clients", []), "clients"))
        warnings = tuple(_str(w, "warnings") for w in _list(d.get("warnings", []), "warnings"))
        return cls(
            tokenizer,
            str(d.get("event_loop", "")),
            interrupted,
            _obj(d.get("config") or {}),
            _obj(d.get("environment") or {}),
            _int(d.get("workers", 1), "workers"),
            clients,
            warnings,
        )


@dataclass(frozen=True)
class Capacity:
    kind: str  # "rate" (requests/s, open loop) or "concurrency" (closed loop)
    target: float  # share of requests that must meet every objective, 0..1
    slo_ms: Mapping[str, float]  # the objectives
    held: float | None  # the highest load that met the target; None: not even the first
    failed: float | None  # the lowest load that missed it; None: none did, up to the limit
    tried: tuple[tuple[float, float], ...]  # (load, attainment) in the order measured
    stopped: str  # "precision", "budget", "limit" (the highest load allowed held), "floor", "interrupted"
    precision: float  # relative gap between held and failed at which the search stops

    def as_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "target": self.target,
            "slo_ms": dict(self.slo_ms),
            "held": self.held,
            "failed": self.failed,
            "tried": [list(t) for t in self.tried],
            "stopped": self.stopped,
            "precision": self.precision,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Capacity:
        tried = tuple((float(a), float(b)) for a, b in d["tried"])
        held, failed = d.get("held"), d.get("failed")
        return cls(
            str(d["kind"]),
            float(d["target"]),
            {str(k): float(v) for k, v in d["slo_ms"].items()},
            None if held is None else float(held),
            None if failed is None else float(failed),
            tried,
            str(d["stopped"]),
            float(d["precision"]),
        )

    @property
    def text(self) -> str:
        unit = " requests/s" if self.kind == "rate" else " in flight"
        objectives = ", ".join(f"{k} <= {v:g} ms" for k, v in self.slo_ms.items())
        share = f"{self.target:.0%} of requests within {objectives}"
        if self.held is None:
            return f"capacity: not even {self.tried[0][0]:g}{unit} kept {share}"
        found = f"capacity: {self.held:g}{unit} kept {share}"
        if self.failed is not None:
            missed = dict(self.tried)[self.failed]
            found += f"; {self.failed:g}{unit} did not ({missed:.0%})"
        return found + f" (stopped: {self.stopped}, {len(self.tried)} levels)"


@dataclass(frozen=True)
class Summary:
    """A bench run's numbers: per endpoint and load, and each endpoint against the first."""

    endpoints: tuple[EndpointStats, ...]  # by load level (as first sent), then in the endpoints' order
    comparisons: tuple[Comparison, ...]  # each endpoint against the first at the same load
    slo_ms: Mapping[str, float]  # goodput objectives
    stall_threshold_s: float
    run: RunInfo | None = None  # None: summarized from records alone (tests, a rebuilt summary)
    class_comparisons: tuple[ClassComparison, ...] | None = None  # prompt class by class (demo)
    rebuilt_from_records: bool = False  # summary.json was missing: made again from records.jsonl
    capacity: Capacity | None = None  # bench --find-capacity
    stopped: str | None = None  # bench --until-saturated: the load the sweep stopped at, and why

    @property
    def interrupted(self) -> bool:
        return self.run is not None and self.run.interrupted

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "endpoints": [e.as_dict() for e in self.endpoints],
            "comparisons": [c.as_dict() for c in self.comparisons],
            "slo_ms": dict(self.slo_ms),
            "stall_threshold_s": self.stall_threshold_s,
        }
        if self.run is not None:
            out |= _plain(self.run)
        if self.class_comparisons is not None:
            out["class_comparisons"] = [c.as_dict() for c in self.class_comparisons]
        if self.rebuilt_from_records:
            out["rebuilt_from_records"] = True
        if self.capacity is not None:
            out["capacity"] = self.capacity.as_dict()
        if self.stopped is not None:
            out["stopped"] = self.stopped
        return out

    @classmethod
    def from_dict(cls, d: object) -> Summary:
        d = _obj(d)
        endpoints = tuple(EndpointStats.from_dict(e) for e in _list(d["endpoints"], "endpoints"))
        comparisons = tuple(Comparison.from_dict(c) for c in _list(d.get("comparisons", []), "comparisons"))
        slo = {k: _num(v, k) for k, v in _obj(d.get("slo_ms", {})).items()}
        run = RunInfo.from_dict(d) if any(f.name in d for f in fields(RunInfo)) else None
        by_class = d.get("class_comparisons")
        if by_class is not None:
            by_class = tuple(ClassComparison.from_dict(c) for c in _list(by_class, "class_comparisons"))
        rebuilt = d.get("rebuilt_from_records") is True
        stall_s = _num(d.get("stall_threshold_s", 1.0), "stall_threshold_s")
        capacity = None if d.get("capacity") is None else Capacity.from_dict(_obj(d["capacity"]))
        stopped = None if d.get("stopped") is None else _str(d["stopped"], "stopped")
        return cls(endpoints, comparisons, slo, stall_s, run, by_class, rebuilt, capacity, stopped)
