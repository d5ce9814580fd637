"""sweep's run: each configuration served (or given), benched over the loads from the lowest up until
it saturates (bench --until-saturated), and its server stopped; then the Pareto front of them all.

A configuration whose server does not start, or whose every request fails, is kept with the reason
and the sweep goes on: the result says what each configuration gave.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from lossless.analyze import Summary
from lossless.analyze.pareto import OperatingPoint, front
from lossless.bench.run import run as bench
from lossless.errors import EndpointError
from lossless.records import RequestRecord
from lossless.sweep.options import SweepOptions
from lossless.sweep.servers import argv, free_port, served

SERVER_LOG = "server.log"


@dataclass(frozen=True)
class ConfigRun:
    name: str  # its folder in the sweep's
    flags: str  # the configuration as given (serve flags), or its URL
    summary: Summary | None  # None: nothing measured (``error`` says why)
    records: list[RequestRecord] = field(default_factory=list)  # in its folder's records.jsonl too
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "flags": self.flags,
            "error": self.error,
            "stopped": None if self.summary is None else self.summary.stopped,
            "summary": None if self.summary is None else self.summary.as_dict(),
        }


@dataclass(frozen=True)
class SweepResult:
    kind: str  # "embedded" (lossless serve), "command" (a template) or "endpoints" (URLs given)
    configs: tuple[ConfigRun, ...]

    def points(self) -> list[OperatingPoint]:
        """Each configuration at each load it was measured at: (tok/s, per-request speed p50)."""
        return [p for p, _ in self.both()]

    def both(self) -> list[tuple[OperatingPoint, OperatingPoint]]:
        """(speed point, TTFT point) of each configuration and load with all three figures."""
        out = []
        for c in self.configs:
            for e in c.summary.endpoints if c.summary is not None else ():
                tput, g = e.overall.throughput.output_tokens_per_s, e.overall
                speed, ttft = g.stat("output_tps", "p50"), g.stat("ttft_ms", "p50")
                if tput is not None and speed is not None and ttft is not None:
                    out.append(
                        (
                            OperatingPoint(c.name, e.load, tput, speed),
                            OperatingPoint(c.name, e.load, tput, ttft),
                        )
                    )
        return out

    def fronts(self) -> tuple[list[OperatingPoint], list[OperatingPoint]]:
        pairs = self.both()
        return front([s for s, _ in pairs]), front([t for _, t in pairs], higher_is_better=False)

    def as_dict(self) -> dict[str, Any]:
        speed, ttft = self.fronts()
        pick = lambda ps: [{"config": p.config, "load": p.load} for p in ps]  # noqa: E731
        return {
            "kind": self.kind,
            "configs": [c.as_dict() for c in self.configs],
            "pareto": {"speed_vs_throughput": pick(speed), "ttft_vs_throughput": pick(ttft)},
        }


def run(options: SweepOptions) -> SweepResult:
    kind = "endpoints" if options.urls else "command" if options.command is not None else "embedded"
    given = options.urls or options.configs
    found = [_one(options, name, flags) for name, flags in zip(options.names, given, strict=True)]
    return SweepResult(kind, tuple(found))


def _one(options: SweepOptions, name: str, flags: str) -> ConfigRun:
    folder = options.out_dir / name
    try:
        if options.urls:
            return ConfigRun(name, flags, *_bench(options, flags, folder))
        port = free_port()
        words = argv(options.command, flags, port)
        with served(words, port, folder / SERVER_LOG, options.startup_timeout) as url:
            return ConfigRun(name, flags, *_bench(options, url, folder))
    except EndpointError as exc:  # this configuration gave nothing; the others go on
        return ConfigRun(name, flags, None, error=str(exc))


def _bench(options: SweepOptions, url: str, folder: Path) -> tuple[Summary, list[RequestRecord]]:
    """bench at one configuration; its records.jsonl is written as they finish, the rest by report."""
    b = replace(
        options.bench,
        urls=(url,),
        until_saturated=not options.all_loads,
        out_dir=folder,
        html=None,
        as_json=False,
    )
    return bench(b)
