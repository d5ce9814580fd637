"""When a watch runs: durations as people write them ("30m", "1h30m"), and the schedule's start times."""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from lossless.errors import UsageError

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d)")
_WHOLE = re.compile(r"(?:\d+(?:\.\d+)?(?:ms|s|m|h|d))+")
MAX_S = 366 * 86400.0  # a year and a day: further is a typo (and time.sleep overflows far beyond)


def parse_duration(text: str, option: str) -> float:
    """``"5s"``, ``"30m"``, ``"3h"``, ``"1h30m"``, ``"0.5s"``, ``"2d"`` -> seconds. A bare number is
    refused: "30" could mean seconds or minutes, and a watch that runs 60 times too often is no small slip."""
    s = text.strip().lower()
    if not _WHOLE.fullmatch(s):
        raise UsageError(f"{option} wants a duration like 5s, 30m, 3h or 1h30m, got {text!r}")
    seconds = sum(float(n) * _UNITS[unit] for n, unit in _PART.findall(s))
    if not 0 < seconds <= MAX_S:
        raise UsageError(f"{option} wants a duration above 0 and up to 366d, got {text!r}")
    return seconds


@dataclass(frozen=True)
class Schedule:
    every: float | None = None  # seconds from one run's start to the next's; None: one run (cron)
    runs: int | None = None  # at most this many runs
    until: float | None = None  # seconds after the first start, past which no run starts

    def __post_init__(self) -> None:
        if self.every is None and (self.runs is not None or self.until is not None):
            raise UsageError("--runs and --until go with --every (without it, a watch makes one run)")
        if self.runs is not None and self.runs < 1:
            raise UsageError(f"--runs wants 1 or more, got {self.runs}")

    @property
    def text(self) -> str:
        if self.every is None:
            return "one run"
        ends = [] if self.runs is None else [f"{self.runs} runs"]
        ends += [] if self.until is None else [f"for {_short(self.until)}"]
        return f"every {_short(self.every)}, " + (" or ".join(ends) or "until stopped")


def _short(seconds: float) -> str:
    for unit in ("d", "h", "m", "s"):
        if seconds >= _UNITS[unit] and (seconds / _UNITS[unit]).is_integer():
            return f"{seconds / _UNITS[unit]:g}{unit}"
    return f"{seconds:g}s"


def slots(
    schedule: Schedule,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[int]:
    """Yields 0, 1, 2 ... when each run is due: runs start every ``every`` seconds from the first one
    (a fixed rate, not a fixed pause, so a slow run does not shift the rest). A run that overran one or
    more slots is followed at the next slot still ahead: the missed ones are skipped, not run back to back."""
    start, slot, n = clock(), 0, 0
    while True:
        yield n
        n += 1
        if schedule.every is None or (schedule.runs is not None and n >= schedule.runs):
            return  # no sleep after the last run
        slot = max(slot + 1, math.ceil((clock() - start) / schedule.every))
        due = slot * schedule.every
        if schedule.until is not None and due > schedule.until:
            return
        sleep(max(0.0, start + due - clock()))
