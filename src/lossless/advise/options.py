"""What ``lossless advise`` was asked to do: frozen options, checked when they are made; every default
defined here once (the CLI takes its defaults from these fields). No numpy: the CLI imports it to start."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from lossless.errors import UsageError


@dataclass(frozen=True)
class AdviseOptions:
    run_dirs: tuple[Path, ...] = ()  # bench --out folders; their attempts pool by endpoint and load
    hedge_delays: tuple[float, ...] | None = None  # ms; None: quantiles of each endpoint's E2E
    failover_delays: tuple[float, ...] | None = None  # ms; None: quantiles of the first choice's TTFT
    timeout_quantile: float = 0.99  # time-out rule: margin x this quantile of the phase's times
    timeout_margin: float = 1.5
    draws: int = 20_000  # simulated requests per policy
    resamples: int = 200  # bootstrap resamples of the records for the 95% intervals; 0: none
    seed: int = 0
    as_json: bool = False  # the result as JSON on stdout, the tables on stderr
    output: Path | None = None  # an HTML page with the trade-off curves

    def __post_init__(self) -> None:
        if not 0 < self.timeout_quantile < 1:
            raise UsageError(
                f"--timeout-quantile wants a number between 0 and 1, got {self.timeout_quantile}"
            )
        if not 1 <= self.timeout_margin <= 100:
            raise UsageError(f"--timeout-margin wants 1 to 100, got {self.timeout_margin}")
        if self.draws < 1000:
            raise UsageError(
                f"--draws wants at least 1000 (a p99 needs more than 10 beyond it), got {self.draws}"
            )
        if self.resamples and self.resamples < 50:
            raise UsageError(f"--resamples wants 0 (no intervals) or at least 50, got {self.resamples}")


def ms_list(text: str | None, option: str) -> tuple[float, ...] | None:
    """``"100,250,1s"`` -> (100.0, 250.0, 1000.0): delays in ms (or with an s), each finite and >= 0."""
    if text is None:
        return None
    out = []
    for part in (p.strip() for p in text.split(",")):
        scale = 1000.0 if part.endswith("s") and not part.endswith("ms") else 1.0
        try:
            value = float(part.removesuffix("ms").removesuffix("s")) * scale
        except ValueError:
            raise UsageError(f"{option} wants delays in ms like 100,250,1s, got {part!r}") from None
        if not math.isfinite(value) or value < 0:
            raise UsageError(f"{option} wants finite delays >= 0, got {part!r}")
        out.append(value)
    return tuple(sorted(set(out)))
