"""What ``lossless watch`` was asked to do: a bench configuration, its schedule and its history's file."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from lossless.bench.options import BenchOptions
from lossless.watch import store
from lossless.watch.schedule import Schedule


@dataclass(frozen=True)
class WatchOptions:
    bench: BenchOptions  # what each run measures (its out_dir, html and as_json are the watch's own)
    schedule: Schedule = field(default_factory=Schedule)  # one run
    db: Path = store.DEFAULT_DB
