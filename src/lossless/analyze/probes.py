"""Probe requests (bench --probe-rate): what a lone user meets while the server is busy.

A probe is the same short request every time, sent at a low fixed rate beside a level's load; before
the first level, the same probe is sent one at a time to the idle server (load "idle"). The probes
answered within a level's measured window are set against the idle ones: TTFT and output speed, and the
extra TTFT the load costs a lone user, each p50 with a bootstrap 95% CI (both sides resampled).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from lossless.analyze.distribution import Distribution, boot_quantiles, describe
from lossless.analyze.shapes import int_ as _int, num_ as _num, obj_ as _obj, pair_ as _pair
from lossless.analyze.timing import timing
from lossless.records import RequestRecord


@dataclass(frozen=True)
class LoadedVsIdle:
    """Loaded against idle at the median: the ratio and the difference, each with a bootstrap 95% CI."""

    ratio: float
    ratio_ci95: tuple[float, float]
    diff: float
    diff_ci95: tuple[float, float]

    def as_dict(self) -> dict[str, Any]:
        return {
            "ratio": self.ratio,
            "ratio_ci95": list(self.ratio_ci95),
            "diff": self.diff,
            "diff_ci95": list(self.diff_ci95),
        }

    @classmethod
    def from_dict(cls, d: object) -> LoadedVsIdle:
        d = _obj(d)
        return cls(
            _num(d["ratio"], "ratio"),
            _pair(d["ratio_ci95"], "ratio_ci95"),
            _num(d["diff"], "diff"),
            _pair(d["diff_ci95"], "diff_ci95"),
        )


@dataclass(frozen=True)
class ProbeStats:
    sent: int  # probes sent within the level's measured window
    ttft_ms: Distribution  # of those answered
    speed: Distribution  # output tokens/s after the first
    idle_ttft_ms: Distribution  # the same probe on the idle server
    idle_speed: Distribution
    ttft: LoadedVsIdle | None  # loaded against idle; None without two answered probes on each side
    output_speed: LoadedVsIdle | None

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"sent": self.sent}
        for k in ("ttft_ms", "speed", "idle_ttft_ms", "idle_speed"):
            out[k] = getattr(self, k).as_dict()
        return out | {
            k: None if (v := getattr(self, k)) is None else v.as_dict() for k in ("ttft", "output_speed")
        }

    @classmethod
    def from_dict(cls, d: object) -> ProbeStats:
        d = _obj(d)
        t, s, it, is_ = (
            Distribution.from_dict(d[k]) for k in ("ttft_ms", "speed", "idle_ttft_ms", "idle_speed")
        )
        ttft, speed = (
            None if d.get(k) is None else LoadedVsIdle.from_dict(d[k]) for k in ("ttft", "output_speed")
        )
        return cls(_int(d["sent"], "sent"), t, s, it, is_, ttft, speed)

    @property
    def text(self) -> str:
        """One sentence: the extra TTFT under load, with its CI."""
        if self.ttft is None:
            return f"probes: {self.sent} sent under load, too few answered beside idle ones to compare"
        t = self.ttft
        out = (
            f"a lone user's TTFT under this load: {t.diff:+,.1f} ms against the idle server (95% CI "
            f"{t.diff_ci95[0]:+,.1f} to {t.diff_ci95[1]:+,.1f}; {t.ratio:.2f}x)"
        )
        if (s := self.output_speed) is not None:
            out += f", output speed {s.ratio:.2f}x (95% CI {s.ratio_ci95[0]:.2f}-{s.ratio_ci95[1]:.2f})"
        return out + f"; {self.ttft_ms.n} probes against {self.idle_ttft_ms.n} idle"


def _loaded_vs_idle(idle: list[float], loaded: list[float], seed: int) -> LoadedVsIdle | None:
    a, b = np.asarray(idle, dtype=float), np.asarray(loaded, dtype=float)
    if a.size < 2 or b.size < 2 or float(np.median(a)) == 0:
        return None
    rng = np.random.default_rng(seed)
    boot_a, boot_b = boot_quantiles(a, rng)[0], boot_quantiles(b, rng)[0]  # medians
    ratios, diffs = boot_b / np.maximum(boot_a, 1e-12), boot_b - boot_a
    pa, pb = float(np.median(a)), float(np.median(b))
    ci = lambda x: (float(np.percentile(x, 2.5)), float(np.percentile(x, 97.5)))  # noqa: E731
    return LoadedVsIdle(pb / pa, ci(ratios), pb - pa, ci(diffs))


def probe_stats(
    probes: Sequence[RequestRecord],
    idle: Sequence[RequestRecord],
    windows: dict[int, tuple[int, int]],
    seed: int,
) -> ProbeStats | None:
    """``probes``: one endpoint's probes at one load; ``idle``: its idle ones; ``windows``: each run's
    measured window (first send, last end), within which a probe must be sent to count."""
    inside = [
        r for r in probes if r.repeat in windows and windows[r.repeat][0] <= r.sent_ns <= windows[r.repeat][1]
    ]
    if not inside:
        return None
    loaded = [timing(r) for r in inside if r.ok and not r.retried]
    alone = [timing(r) for r in idle if r.ok and not r.retried]
    ttft = [t.ttft for t in loaded if t.ttft is not None]
    idle_ttft = [t.ttft for t in alone if t.ttft is not None]
    speed = [t.speed for t in loaded if t.speed is not None]
    idle_speed = [t.speed for t in alone if t.speed is not None]
    return ProbeStats(
        len(inside),
        describe(ttft, seed),
        describe(speed, seed),
        describe(idle_ttft, seed),
        describe(idle_speed, seed),
        _loaded_vs_idle(idle_ttft, ttft, seed),
        _loaded_vs_idle(idle_speed, speed, seed),
    )
