"""``lossless demo``'s result, and what it prints on stdout: the figures a person came for, and where
the rest is."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from lossless.analyze import Comparison
from lossless.provision.embedded import drafter_name


@dataclass(frozen=True)
class DemoResult:
    model: str
    drafter: str  # the speculative server's, as `--speculative` names it
    requests: int  # measured per endpoint
    speedup: Comparison | None  # speculative/plain p50 output speed, with its 95% CI
    ttft: Comparison | None  # speculative/plain p50 TTFT
    by_class: Mapping[str, Comparison]  # prompt class -> speculative/plain p50 output speed
    acceptance: float | None  # share of drafted tokens accepted (the server's /metrics)
    verdict: str  # equivalent | different | inconclusive
    report: Path
    seconds: float


def summary_lines(r: DemoResult) -> list[str]:
    """What stdout gets: the figures a person came for, and where the rest is."""
    lines = [
        f"lossless demo: {r.model}, plain against speculative decoding ({drafter_name(r.drafter)}), "
        f"{r.requests} requests each, {r.seconds:.0f} s"
    ]
    if r.speedup is not None:
        lines.append(
            f"speed-up (output speed p50, speculative / plain): {_ratio(r.speedup)} over all prompts"
        )
        for cls, c in sorted(r.by_class.items(), key=lambda kv: -kv[1].ratio):
            lines.append(f"  {cls} prompts: {_ratio(c)}")
    else:
        lines.append("speed-up: not measured (too few successful requests)")
    if r.ttft is not None:
        lo, hi = r.ttft.ci95
        change = (r.ttft.ratio - 1) * 100
        lines.append(f"TTFT (p50): {change:+.0f}% with speculative decoding (95% CI {lo:.2f}x-{hi:.2f}x)")
    if r.acceptance is not None:
        lines.append(f"drafts: {r.acceptance:.0%} of drafted tokens accepted")
    lines.append(f"verify: {r.verdict} (is speculative decoding the same model as plain decoding?)")
    lines.append(f"report: {r.report}")
    return lines


def _ratio(c: Comparison) -> str:
    lo, hi = c.ci95
    return f"{c.ratio:.2f}x (95% CI {lo:.2f}-{hi:.2f})"
