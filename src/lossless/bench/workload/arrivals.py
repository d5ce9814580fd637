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


def ramped(offsets: Iterator[float], ramp_s: float) -> Iterator[float]:
    """The same arrivals with the rate rising linearly from 0 to its full value over ``ramp_s`` seconds.

    NOTE: a time change, not a thinning: the process's own time u maps to t with u = t^2 / (2 ramp) while
    t < ramp (the integral of the rate ramp t / ramp) and t - ramp / 2 after, so every arrival is kept, in
    order, and the gaps keep their shape (Poisson stays Poisson, at the ramping rate).
    """
    for u in offsets:
        yield (2.0 * ramp_s * u) ** 0.5 if u < ramp_s / 2 else u + ramp_s / 2
