"""Which numerics process a prompt: a bfloat16 (or int4) model's own, or a float32 twin of its weights.

A prompt is a matmul over many tokens at once. Without bfloat16 instructions such a matmul is several
times slower in bfloat16 than in float32 (a 116-token prompt: 3.2 s against 0.67 s on one AVX2 core), so
there the engine keeps a float32 twin of the weights for prompts (`Transformer.process_prompts_with`).
With the instructions the model's own numerics process them. Which way is faster there depends on the
CPU (on 2 AVX-512-BF16 cores without AMX a grounded prompt took 308 ms in bfloat16 and 232 in float32;
on a 2-core AVX-512-BF16 EPYC, 2026-12-04, a 128-token prompt 77 ms in bfloat16 and 208 in float32), but
the choice is the CPU's features', never a timing taken at start-up: the same command on the same
machine serves the same numerics, busy or not. It is said at start-up and is part of the served
identity (``-float32prompts`` in ``system_fingerprint``).

What each serves: the twin writes the prompt's keys and values rounded to bfloat16 and hands the last
hidden state over rounded, so every token after the first is drawn from the model's own numerics over
a cache that float32 filled; without it the cache holds bfloat16's own sums. Plain and speculative
decoding share whichever it is, so they stay exactly equal to each other.
"""

from __future__ import annotations

from collections.abc import Callable

from lossless.engine.cpu import native_bfloat16
from lossless.engine.model.transformer import Transformer


def choose_prompt_model(
    model: Transformer, make_twin: Callable[[], Transformer], float32_prompts: bool | None, name: str
) -> str:
    """Give the bfloat16 (or int4) ``model`` a float32 twin for prompts (``make_twin``) when asked, or
    (``float32_prompts`` None) when the CPU has no bfloat16 instructions.
    -> one line saying what processes prompts and why; ``name``: the model's numerics (bfloat16, int4)."""
    if float32_prompts is False:
        return f"prompts processed in {name}, as asked"
    if float32_prompts is None and (native := native_bfloat16()):
        return f"prompts processed in {name} (this CPU has bfloat16 instructions: {', '.join(native)})"
    model.process_prompts_with(make_twin())
    if float32_prompts:
        return "prompts processed in float32, as asked; their keys and values kept in bfloat16"
    return (
        "prompts processed in float32 (this CPU has no bfloat16 instructions: several times faster), "
        "their keys and values kept in bfloat16"
    )
