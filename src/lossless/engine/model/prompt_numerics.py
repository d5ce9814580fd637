"""Which numerics process a prompt: a bfloat16 (or int4) model's own, or a float32 twin of its weights.

A prompt is a matmul over many tokens at once. Without bfloat16 instructions such a matmul is several
times slower in bfloat16 than in float32 (a 116-token prompt: 3.2 s against 0.67 s on one AVX2 core), so
there the engine always keeps a float32 twin of the weights for prompts (`Transformer.process_prompts_with`).
With the instructions it depends on the CPU: on 2 AVX-512-BF16 cores without AMX a grounded prompt took
308 ms in bfloat16 and 232 in float32, on others bfloat16 may win. There the engine measures both on one
prompt at start-up and keeps the faster; what it chose and the two times are said at start-up, and the
choice is part of the served identity (``-float32prompts`` in ``system_fingerprint``).

What each serves: the twin writes the prompt's keys and values rounded to bfloat16 and hands the last
hidden state over rounded, so every token after the first is drawn from the model's own numerics over
a cache that float32 filled; without it the cache holds bfloat16's own sums. Plain and speculative
decoding share whichever it is, so they stay exactly equal to each other.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import torch

from lossless.engine.cpu import native_bfloat16
from lossless.engine.model.transformer import Transformer

PROBE_TOKENS = 128  # the measured prompt's length: a typical grounded prompt's


def choose_prompt_model(
    model: Transformer, make_twin: Callable[[], Transformer], float32_prompts: bool | None, name: str
) -> str:
    """Give the bfloat16 (or int4) ``model`` a float32 twin for prompts (``make_twin``) when asked, when
    the CPU has no bfloat16 instructions, or (``float32_prompts`` None) when it measured faster here.
    -> one line saying what processes prompts and why; ``name``: the model's numerics (bfloat16, int4)."""
    if float32_prompts is False:
        return f"prompts processed in {name}, as asked"
    model.process_prompts_with(make_twin())
    if float32_prompts:
        return "prompts processed in float32, as asked; their keys and values kept in bfloat16"
    if not native_bfloat16():
        return (
            "prompts processed in float32 (this CPU has no bfloat16 instructions: several times faster), "
            "their keys and values kept in bfloat16"
        )
    n = min(PROBE_TOKENS, model.max_seq_len)
    own, wide = _time_prompts(model, n)
    if wide < own:
        measured = _measured(n, wide, own, name)
        return f"prompts processed in float32 ({measured}), their keys and values kept in bfloat16"
    model.prompt_model = None  # the twin's memory goes with it
    return f"prompts processed in {name} ({_measured(n, own, wide, 'float32')})"


def _time_prompts(model: Transformer, n: int, rounds: int = 3) -> tuple[float, float]:
    """(own, twin): the shortest of ``rounds`` interleaved runs of an ``n``-token prompt each way, after
    one warm-up each (seconds). It writes the KV cache's first n positions: no request has begun."""
    tokens = torch.arange(n)[None] * 7919 % model.args.vocab_size  # any fixed ids: timing only
    pos = torch.arange(n)
    times: list[list[float]] = [[], []]
    with torch.inference_mode():
        for _ in range(rounds + 1):  # the first round warms up and is not counted
            for i, prompt in enumerate((False, True)):
                start = time.perf_counter()
                model(tokens, pos, return_hidden=True, prompt=prompt)
                times[i].append(time.perf_counter() - start)
    return min(times[0][1:]), min(times[1][1:])


def _measured(n: int, took: float, other: float, other_name: str) -> str:
    """The start-up line's evidence: the kept way took ``took`` seconds, the other ``other``."""
    return (
        f"faster here: a {n}-token prompt took {_ms(took)}, against {_ms(other)} in {other_name}, "
        "measured at start-up"
    )


def _ms(seconds: float) -> str:
    ms = 1000 * seconds
    return f"{ms:.0f} ms" if ms >= 10 else f"{ms:.1f} ms"
