"""Which part of a load level a request falls in: warm-up, measured or cool-down.

A level is three windows, each counted in requests or in seconds: warm-up first (unmeasured: caches fill,
batches form, a compiled graph swaps in), then the measured part (--requests or --duration), then
cool-down (unmeasured requests that keep the load up while the last measured ones finish, so that no
measured request meets a server emptying out). A window of requests counts request indices, which are
one sequence shared by every worker process, so the count is exact however the load is split; a window
of seconds counts from the level's start, at the time a request is sent (closed loop) or scheduled (open
loop). Records keep their window (``warmup``, ``cooldown``); ``analyze`` measures only the middle one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lossless.errors import UsageError

WARMUP, MEASURED, COOLDOWN = "warmup", "measured", "cooldown"


@dataclass(frozen=True)
class Window:
    """An unmeasured window: so many requests, or so many seconds (then ``requests`` is 0)."""

    requests: int = 0
    seconds: float | None = None

    @property
    def label(self) -> str:
        return f"{self.seconds:g}s" if self.seconds is not None else str(self.requests)

    @property
    def empty(self) -> bool:
        return self.requests == 0 and not self.seconds


def parse_window(text: str, flag: str) -> Window:
    """``5`` -> 5 requests; ``10s`` -> 10 seconds."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*(s?)\s*", text)
    if m is None or (not m.group(2) and "." in m.group(1)):
        raise UsageError(f"{flag} {text!r}: give a number of requests (5) or of seconds (10s)")
    value = float(m.group(1))
    if m.group(2):
        if value > 86_400:
            raise UsageError(f"{flag} {text!r}: at most a day (86400s)")
        return Window(seconds=value)
    if value > 10_000_000:
        raise UsageError(f"{flag} {text!r}: at most 10,000,000 requests")
    return Window(requests=int(value))


class Phases:
    """One endpoint's way through one level: the window of request ``i``, sent (or scheduled) ``t``
    seconds after the level began; None once the level is over. Asked with increasing ``i``."""

    def __init__(
        self, warmup: Window, requests: int | None, duration: float | None, cooldown: Window
    ) -> None:
        self.warmup, self.requests, self.duration, self.cooldown = warmup, requests, duration, cooldown
        self.stage = WARMUP
        self.since_i, self.since_t = 0, 0.0  # where the current window began

    def at(self, i: int, t: float) -> str | None:
        if self.stage == WARMUP:
            if _inside(self.warmup, i, t):
                return WARMUP
            self._next(MEASURED, i, t)
        if self.stage == MEASURED:
            counted = self.requests is None or i - self.since_i < self.requests
            timed = self.duration is None or t - self.since_t < self.duration
            if counted and timed:
                return MEASURED
            self._next(COOLDOWN, i, t)
        if self.stage == COOLDOWN and _inside(self.cooldown, i - self.since_i, t - self.since_t):
            return COOLDOWN
        self.stage = ""
        return None

    def _next(self, stage: str, i: int, t: float) -> None:
        self.stage, self.since_i, self.since_t = stage, i, t


def _inside(window: Window, i: int, t: float) -> bool:
    """Request ``i`` of a window, ``t`` seconds into it, still belongs to it."""
    if window.seconds is not None:
        return t < window.seconds
    return i < window.requests


def ramp_delay(slot: int, concurrency: int, ramp_s: float) -> float:
    """Closed loop: when slot ``slot`` of ``concurrency`` starts, so that the requests in flight rise
    linearly from one to all over ``ramp_s`` seconds."""
    return ramp_s * slot / concurrency if ramp_s > 0 else 0.0
