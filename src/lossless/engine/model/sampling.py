"""Sampling: one ``warp`` (temperature -> top-k -> top-p) shared by plain and speculative decoding.

The speculative decoder applies the very same ``warp`` to the target's and the draft's logits; a
difference between the two would bias the output, so there is exactly one implementation.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class SamplingParams:
    max_tokens: int = 16  # generated tokens at most (0 allowed: score the prompt only)
    temperature: float = 1.0  # 0 -> greedy
    top_k: int = 0  # 0 -> off
    top_p: float = 1.0  # 1 -> off
    seed: int | None = None  # per-request generator; None -> nondeterministic
    stop: tuple[str, ...] = ()  # stop sequences (not included in the output)
    logprobs: bool = False  # return the chosen token's log-probability
    top_logprobs: int = 0  # and this many alternatives
    ignore_eos: bool = False  # generate through end-of-sequence tokens, to max_tokens (benchmarks' lengths)
    grammar: str | None = None  # an llguidance grammar (engine/model/constrain.py): the output must match it

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


def warp(logits: Tensor, temperature: float, top_k: int = 0, top_p: float = 1.0) -> Tensor:
    """logits: [..., V] -> probabilities [..., V] after temperature, top-k and top-p (in that order).

    temperature 0 gives a one-hot distribution on the argmax (ties: the lowest token id).
    """
    if temperature == 0.0:
        return torch.zeros_like(logits).scatter_(-1, logits.argmax(-1, keepdim=True), 1.0)
    logits = logits / temperature
    if 0 < top_k < logits.shape[-1]:
        kth = torch.topk(logits, top_k, dim=-1).values[..., -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    probs = torch.softmax(logits, dim=-1)
    if top_p < 1.0:
        sorted_probs, order = probs.sort(dim=-1, descending=True)
        before = sorted_probs.cumsum(-1) - sorted_probs  # mass strictly above each token
        drop_sorted = before >= top_p  # keep the smallest prefix whose mass reaches top_p
        drop = torch.zeros_like(drop_sorted).scatter_(-1, order, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample(probs: Tensor, generator: torch.Generator | None) -> int:
    """probs: [V] (non-negative, any positive total) -> one token id, drawn with probability
    probs[i] / probs.sum() by inverting the cumulative sum at one uniform draw.

    Not ``torch.multinomial``: over the 49k-token vocabulary it took 0.8 ms per draw on two CPU cores
    (5% of a decode step, and a speculative step draws several times); this takes 0.04 ms."""
    return inverse_cdf(probs, float(torch.rand((), generator=generator, dtype=torch.float64)))


def inverse_cdf(probs: Tensor, u: float) -> int:
    """The token whose slice of the cumulative sum (float64) holds u * total, for u in [0, 1): the
    first i with cdf[i] > u * total, so a zero-probability token (an empty slice) is never chosen."""
    cdf = probs.to(torch.float64).cumsum(0)
    i = int(torch.searchsorted(cdf, cdf[-1:] * u, right=True))
    # u * total can round up to total itself: the draw then belongs to the last token with mass
    return i if i < len(cdf) else int(probs.nonzero()[-1])


def make_generator(seed: int | None) -> torch.Generator:
    gen = torch.Generator()
    if seed is None:
        gen.seed()
    else:
        gen.manual_seed(seed)
    return gen
