"""Paired accuracy: two endpoints (or two runs) graded on the same items, told equivalent within a margin
(TOST) or different (McNemar's exact test). Pure numbers; verify's tasks and ``lossless tasks`` both
compare success this way."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats


@dataclass(frozen=True)
class Paired:
    n: int
    both: int  # right on both
    only_x: int
    only_y: int
    difference: float  # accuracy y - x
    ci90: tuple[float, float]  # TOST interval (Agresti-Min adjusted Wald)
    p_mcnemar: float  # exact, two-sided: any difference at all
    equivalent: bool  # ci90 inside (-margin, +margin)
    margin: float


def paired_accuracy(x: Sequence[bool], y: Sequence[bool], margin: float) -> Paired:
    """TOST for paired proportions: equivalent when the 90% interval of the difference lies within
    +-margin. Half a count is added to each cell (Agresti & Min 2005) so that 0 discordant pairs still
    give an honest, non-zero width."""
    n = len(x)
    b = sum(1 for a, c in zip(x, y, strict=True) if a and not c)
    c = sum(1 for a, d in zip(x, y, strict=True) if d and not a)
    both = sum(1 for a, d in zip(x, y, strict=True) if a and d)
    n2, b2, c2 = n + 2.0, b + 0.5, c + 0.5
    diff = (c2 - b2) / n2
    se = float(np.sqrt(max((b2 + c2) - (c2 - b2) ** 2 / n2, 0.0)) / n2)
    z = float(stats.norm.ppf(0.95))
    ci = (diff - z * se, diff + z * se)
    p = float(stats.binomtest(b, b + c).pvalue) if b + c else 1.0
    return Paired(n, both, b, c, (c - b) / n if n else 0.0, ci, p, -margin < ci[0] and ci[1] < margin, margin)
