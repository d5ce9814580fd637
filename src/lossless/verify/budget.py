"""verify's budget: how many prompts, samples, tokens and tasks it spends. No numpy, no network: the CLI
reads the defaults from here for ``--help``."""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from lossless.errors import UsageError

MAX_SAMPLES, MAX_TOKENS = 10_000, 4096  # far past "large" (16 x 32 tokens); past them, a typo


@dataclass(frozen=True)
class Budget:
    prompts: int  # distinct prompts (at most len(collect.PROMPTS))
    samples: int  # completions per prompt and set (three sets: A, A', candidate)
    max_tokens: int  # per completion
    tasks: int  # bundled tasks, greedy, on both endpoints
    # Short completions, candidate only, for the contexts test: many draws at the same few contexts
    # (the baseline's distribution there is asked for, so it needs none), split over the ``focus``
    # prompts whose first token the baseline is surest of, so that they share their first token.
    repeats: int = 0
    focus: int = 1
    repeat_tokens: int = 3  # the first token comes from the prefill; speculation acts from the second
    permutations: int = 2000  # permutation-null draws per comparison

    @property
    def label(self) -> str:
        return f"{self.prompts}x{self.samples}x{self.max_tokens}"


BUDGETS = {
    "small": Budget(4, 6, 16, 12, repeats=48),
    # Against the embedded SmolLM2 on 2 cores it must finish within 5 minutes; 16 tokens rather than 20
    # cost the tiny-model power benchmark nothing (benchmarks/verify_power.py). The 192 repeats (three
    # tokens each) cost about 40 s there.
    "default": Budget(8, 10, 16, 24, repeats=192),
    "large": Budget(16, 16, 32, 24, repeats=384, focus=2),
}


def parse_budget(text: str, base: Budget = BUDGETS["default"], option: str = "--budget") -> Budget:
    """A name in BUDGETS, or PROMPTSxSAMPLESxTOKENS: those three fields of ``base``, the rest kept."""
    from lossless.verify.collect import PROMPTS

    if text in BUDGETS:
        return BUDGETS[text]
    m = re.fullmatch(r"(\d+)x(\d+)x(\d+)", text.strip())
    if not m or min(int(g) for g in m.groups()) < 1:
        raise UsageError(
            f"{option}: expected {'|'.join(BUDGETS)} or PROMPTSxSAMPLESxTOKENS like 8x8x24, got {text!r}"
        )
    prompts, samples, tokens = (int(g) for g in m.groups())
    if samples < 2 or prompts > len(PROMPTS):
        raise UsageError(f"{option}: 2 or more samples and at most {len(PROMPTS)} prompts, got {text!r}")
    # its sample and token counts size arrays only after all the traffic (numpy refused 1x2x10**30 there)
    if samples > MAX_SAMPLES or tokens > MAX_TOKENS:
        raise UsageError(f"{option}: at most {MAX_SAMPLES:,} samples of {MAX_TOKENS:,} tokens, got {text!r}")
    return replace(base, prompts=prompts, samples=samples, max_tokens=tokens)
