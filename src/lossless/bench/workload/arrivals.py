"""Arrival processes: endless generators of send offsets in seconds from the start of a run."""

from __future__ import annotations

import random
from collections.abc import Iterator


def poisson(rate: float, rng: random.Random) -> Iterator[float]:
    """Exponential gaps with mean 1/rate."""
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        yield t


def gamma(rate: float, burstiness: float, rng: random.Random) -> Iterator[float]:
    """Gamma gaps with shape = burstiness and the same mean 1/rate as Poisson.

    NOTE: the scale is normalised so that only the shape changes the burstiness: shape 1 is Poisson,
    below 1 is burstier, above 1 is more regular (vLLM's --burstiness means the same).
    """
    t = 0.0
    scale = 1.0 / (rate * burstiness)
    while True:
        t += rng.gammavariate(burstiness, scale)
        yield t
