"""What ``lossless sweep`` was asked to do: frozen, typed options, checked when they are made.

A configuration is a list of server flags, as one string: for the embedded engine, ``lossless serve``'s
own (``--speculative ngram --dtype bfloat16``); with ``command``, the words that replace ``{flags}`` in the
command's template. Or no server is started: each given URL is a configuration already running. What
is measured at each configuration is a bench run (``bench``), its loads swept from the lowest up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from lossless.bench.options import BenchOptions
from lossless.errors import UsageError

MAX_CONFIGS = 64


@dataclass(frozen=True)
class SweepOptions:
    bench: BenchOptions  # what is measured at each configuration (its urls, out_dir and html: the sweep's)
    configs: tuple[str, ...] = ("",)  # server flags, one string per configuration; "": the defaults
    command: str | None = None  # a server's command with {port} (and {flags}); None: lossless serve
    urls: tuple[str, ...] = ()  # configurations already running: no server is started
    startup_timeout: float = 600.0  # seconds for a started server to answer /models
    all_loads: bool = False  # measure every load, even past saturation
    out_dir: Path = Path("lossless-sweep")  # sweep.json, sweep.html, and a bench run folder per config
    as_json: bool = False  # sweep.json on stdout too

    def __post_init__(self) -> None:
        b = self.bench
        loads = b.rate or b.concurrency
        if not loads or len(loads) < 2:
            raise UsageError("a sweep measures rising loads: give --rate or --concurrency with two or more")
        if list(loads) != sorted(set(loads)):
            raise UsageError("a sweep's loads rise: give --rate or --concurrency in increasing order")
        if self.urls and (self.command is not None or self.configs != ("",)):
            raise UsageError("give URLs (servers already running) or --config / --command, not both")
        if self.command is not None and "{port}" not in self.command:
            raise UsageError("--command: the template needs {port}, where the server is told its port")
        if not 1 <= len(self.configs) <= MAX_CONFIGS or len(set(self.configs)) < len(self.configs):
            raise UsageError(f"--config: 1 to {MAX_CONFIGS} configurations, each once")
        if b.find_capacity is not None or b.take_turns or b.resume or b.endpoints_file:
            raise UsageError(
                "sweep runs bench at each configuration: not with --find-capacity, "
                "--take-turns, --resume or --endpoints"
            )

    @property
    def names(self) -> tuple[str, ...]:
        """A folder name per configuration: its flags in words ("speculative-none"), or its URL's host."""
        found = [_name(u) for u in self.urls] if self.urls else [_name(c) or "default" for c in self.configs]
        return tuple(f"{n}-{i + 1}" if found.count(n) > 1 else n for i, n in enumerate(found))


def _name(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text.removeprefix("http://").removeprefix("https://")).strip("-.")[
        :60
    ]
