"""Decode speed of our engine against transformers' ``generate`` on the embedded SmolLM2 (CPU, batch 1).

Both sides run greedy, in this one process, with the same threads and prompts, eos ignored so each run
makes exactly N tokens. Decode speed is measured the same way for both: (N - 1) / (T(N) - T(1)), where
T(n) is the wall time of a whole generate call making n tokens; subtracting T(1) removes the prefill.
The median over repeats and prompts is reported. The machine may be shared: the load average is printed.

    python benchmarks/engine_speed.py --dtype float32 bfloat16 --threads 2
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

import torch

from lossless.engine.engine import Engine
from lossless.engine.generate import generate_text, plain_tokens
from lossless.engine.sampling import SamplingParams, make_generator
from lossless.models import resolve

PROMPTS = [
    "Write a short story about a dragon who learns to cook.",
    "Explain how a CPU cache works, step by step.",
    "List ten facts about the planet Mars.",
]


def ours(engine: Engine) -> Callable[[list[int], int], None]:
    tokenizer = copy.copy(engine.tokenizer)
    tokenizer.eos_ids = frozenset()  # exactly n tokens, as transformers' min_new_tokens does

    def run(ids: list[int], n: int) -> None:
        params = SamplingParams(max_tokens=n, temperature=0.0)
        source = plain_tokens(engine.model, ids, params, make_generator(0))
        for _ in generate_text(source, tokenizer, params, budget=n):
            pass

    return run


def theirs(path: Path, dtype: torch.dtype) -> Callable[[list[int], int], None]:
    from transformers import AutoModelForCausalLM

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=dtype).eval()

    def run(ids: list[int], n: int) -> None:
        with torch.inference_mode():
            model.generate(
                torch.tensor([ids]), max_new_tokens=n, min_new_tokens=n, do_sample=False, pad_token_id=2
            )

    return run


def decode_rate(
    run: Callable[[list[int], int], None], prompts: list[list[int]], n: int, repeats: int
) -> float:
    """Median decode tokens/s over prompts x repeats."""
    run(prompts[0], 8)  # warm-up: first-call allocations and kernel selection
    rates = []
    for _ in range(repeats):
        for ids in prompts:
            t0 = time.perf_counter()
            run(ids, 1)
            t1 = time.perf_counter()
            run(ids, n)
            t2 = time.perf_counter()
            rates.append((n - 1) / ((t2 - t1) - (t1 - t0)))
    return statistics.median(rates)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="checkpoint (default: the embedded SmolLM2)")
    ap.add_argument("--dtype", nargs="+", default=["float32", "bfloat16"], choices=["float32", "bfloat16"])
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--no-transformers", action="store_true", help="measure our engine only")
    opts = ap.parse_args()
    torch.set_num_threads(opts.threads)
    path = resolve(opts.model)
    print(f"threads {opts.threads}, load average {os.getloadavg()} before", file=sys.stderr)

    rows: list[tuple[str, float]] = []
    for dtype in opts.dtype:
        engine = Engine.load(path, dtype=dtype, max_context=1024)
        prompts = [engine.chat_prompt([{"role": "user", "content": p}]) for p in PROMPTS]
        rows.append((f"lossless {dtype}", decode_rate(ours(engine), prompts, opts.new_tokens, opts.repeats)))
        del engine
        if not opts.no_transformers:
            run = theirs(path, getattr(torch, dtype))
            rows.append((f"transformers {dtype}", decode_rate(run, prompts, opts.new_tokens, opts.repeats)))

    base = next((r for name, r in rows if name == "transformers float32"), None)
    print(f"{'engine':<24}{'tok/s':>8}{'ms/token':>10}{'vs transformers fp32':>22}")
    for name, rate in rows:
        ratio = f"{rate / base:.2f}x" if base else "-"
        print(f"{name:<24}{rate:>8.1f}{1000 / rate:>10.1f}{ratio:>22}")
    print(f"load average {os.getloadavg()} after", file=sys.stderr)


if __name__ == "__main__":
    main()
