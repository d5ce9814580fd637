"""Speculative decoding speed on the embedded SmolLM2 (CPU, batch 1). A benchmark, not a test.

For each prompt suite (input-grounded tasks with long outputs; open chat) and temperature (greedy,
0.7), every method decodes the same prompts, interleaved prompt by prompt so that a shared machine's
load falls on all of them alike:

    plain            our engine, one token per forward
    ngram            our engine, prompt-lookup n-gram drafts (lossless speculative decoding)
    draft:PATH       our engine, a small draft checkpoint (with --draft PATH)
    dspark           our engine, the trained DSpark-style draft head (--dspark [DIR]: the shipped one),
                     prompt lookup first where the text repeats, as `--speculative dspark` serves it
    head alone       the same head without the prompt lookup
    dspark tree=N    the head drafting a tree of N candidates, verified in one forward (--tree N)
    hf plain         transformers' generate on the same GGUF
    hf lookup        transformers' assisted generation, prompt_lookup_num_tokens

Figures: decode speed = output tokens after the first / (time of the last token - time of the first),
end-to-end time per request, speed-up over the same engine's plain decoding, and for our drafters the
mean accepted length (tokens per target forward) and acceptance by draft position; for the draft head
also its confidence head's calibration as served (predicted vs observed acceptance of each drafted
position that verification reached). eos ends a request. The chat prompts are not in the head's
training prompts (checked at start).

    python benchmarks/speculative_speed.py [--suites grounded chat] [--temps 0 1] [--draft PATH] [--dspark]

Sampled outputs differ from method to method, and so do the acceptance figures: ``--seeds N`` runs each
prompt N times at temperatures above 0 (six prompts of 128 tokens once each left T=1 figures +-0.05).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from lossless.draft.data import bundled_prompts
from lossless.engine.engine import Engine, build_drafter
from lossless.engine.model.generate import Accepted, generate_text, plain_tokens
from lossless.engine.model.sampling import SamplingParams, make_generator
from lossless.engine.speculate.head_drafter import HeadDrafter
from lossless.engine.speculate.spec import parse_drafter_spec
from lossless.engine.speculate.speculative import speculative_decode
from lossless.engine.speculate.stats import SpecStats
from lossless.models import resolve
from support import SUITES


@dataclass
class Result:
    tokens: int = 0  # output tokens
    after_first: int = 0  # output tokens after the first
    decode_s: float = 0.0  # time from the first to the last token
    e2e_s: float = 0.0  # whole requests
    requests: int = 0
    stats: SpecStats | None = None
    per_request: list[float] = field(default_factory=list)  # decode tok/s per request
    outcomes: list[tuple[float, bool]] = field(default_factory=list)  # draft head: (confidence, accepted)

    def add(self, n: int, t0: float, t_first: float, t_last: float) -> None:
        self.requests += 1
        self.tokens += n
        self.after_first += n - 1
        self.decode_s += t_last - t_first
        self.e2e_s += t_last - t0
        if n > 1 and t_last > t_first:
            self.per_request.append((n - 1) / (t_last - t_first))


Runner = Callable[[list[int], SamplingParams, Result], None]


def ours(
    engine: Engine,
    spec: str | None,
    k: int | None = None,
    threshold: float | None = None,
    alone: bool = False,
    tree: int | None = None,
) -> Runner:
    """Our engine through the real generation loop; ``spec`` None -> plain decoding. ``alone``: the
    draft head without its prompt lookup."""
    drafter = build_drafter(parse_drafter_spec(spec, k, threshold, tree), engine) if spec else None
    if alone and isinstance(drafter, HeadDrafter):
        drafter.lookup = None

    def run(ids: list[int], params: SamplingParams, out: Result) -> None:
        gen = make_generator(params.seed)
        if drafter is None:
            source: Iterator[Accepted] = plain_tokens(engine.model, ids, params, gen)
        else:
            out.stats = out.stats or SpecStats(parse_drafter_spec(spec or "", k).k)
            source = speculative_decode(
                engine.model,
                drafter,
                ids,
                params,
                max_new_tokens=params.max_tokens,
                k_max=out.stats.k_max,
                generator=gen,
                stats=out.stats,
            )
        times: list[float] = []
        t0 = time.perf_counter()
        n = 0
        for delta in generate_text(
            _stamped(source, times), engine.tokenizer, params, budget=params.max_tokens
        ):
            n += len(delta.token_ids)
        out.add(n, t0, times[0], times[-1])
        outcomes = getattr(drafter, "outcomes", None)
        if outcomes is not None:
            out.outcomes.extend(outcomes)
            outcomes.clear()

    return run


def _stamped(source: Iterator[Accepted], times: list[float]) -> Iterator[Accepted]:
    for batch in source:
        times.append(time.perf_counter())
        yield batch


def theirs(path: Path, eos: list[int], lookup: int) -> Runner:
    """transformers' generate on the same GGUF; ``lookup`` > 0 -> prompt-lookup assisted generation."""
    from transformers import AutoModelForCausalLM
    from transformers.generation.streamers import BaseStreamer

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name, dtype=torch.float32)
    model.eval()

    class Clock(BaseStreamer):
        def __init__(self) -> None:
            self.times: list[float] = []

        def put(self, value: Any) -> None:  # the first call carries the prompt
            self.times.append(time.perf_counter())

        def end(self) -> None:
            pass

    def run(ids: list[int], params: SamplingParams, out: Result) -> None:
        clock = Clock()
        extra: dict[str, Any] = {"prompt_lookup_num_tokens": lookup} if lookup else {}
        if not params.greedy:
            extra |= {"temperature": params.temperature, "top_k": 0, "top_p": 1.0}
            torch.manual_seed(params.seed or 0)
        t0 = time.perf_counter()
        with torch.inference_mode(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            result = model.generate(
                torch.tensor([ids]),
                max_new_tokens=params.max_tokens,
                do_sample=not params.greedy,
                eos_token_id=eos,
                pad_token_id=eos[0],
                streamer=clock,
                **extra,
            )
        out.add(result.shape[1] - len(ids), t0, clock.times[1], clock.times[-1])

    return run


def summarize(results: dict[tuple[str, float, str], Result]) -> list[dict[str, Any]]:
    """Pure numbers: one row per (suite, temperature, method), with speed-ups over plain decoding."""
    rows = []
    for (suite, temp, method), r in results.items():
        base_name = "hf plain" if method.startswith("hf") else "plain"
        base = results.get((suite, temp, base_name))
        speed = r.after_first / r.decode_s if r.decode_s else 0.0
        base_speed = base.after_first / base.decode_s if base and base.decode_s else 0.0
        figures = r.stats.as_dict() if r.stats else {}
        rows.append(
            {
                "suite": suite,
                "temperature": temp,
                "method": method,
                "requests": r.requests,
                "tokens": r.tokens,
                "decode_tok_s": speed,
                "speedup": speed / base_speed if base_speed else None,
                "e2e_s_mean": r.e2e_s / r.requests,
                "e2e_speedup": (base.e2e_s / r.e2e_s) if base and r.e2e_s else None,
                "mean_accepted_length": figures.get("mean_accepted_length"),
                "acceptance_by_position": figures.get("acceptance_by_position"),
                "accept_counts": figures.get("accept_counts"),
                "confidence_calibration": calibration(r.outcomes) if r.outcomes else None,
            }
        )
    return rows


def calibration(outcomes: list[tuple[float, bool]], bins: int = 5) -> list[dict[str, float]]:
    """Predicted vs observed acceptance, in equal-width bins of the predicted confidence."""
    out = []
    for b in range(bins):
        lo, hi = b / bins, (b + 1) / bins
        inside = [(c, a) for c, a in outcomes if lo <= c < hi or (b == bins - 1 and c == 1.0)]
        if inside:
            predicted = sum(c for c, _ in inside) / len(inside)
            observed = sum(a for _, a in inside) / len(inside)
            out.append({"predicted": round(predicted, 3), "observed": round(observed, 3), "n": len(inside)})
    return out


def render(rows: list[dict[str, Any]]) -> None:
    head = f"{'suite':<9}{'temp':>5} {'method':<16}{'tok':>6}{'tok/s':>8}{'speed-up':>9}{'e2e s':>8}"
    print(head + f"{'e2e x':>7}{'acc.len':>8}  acceptance by position")
    for r in rows:
        by_pos = " ".join(f"{a:.2f}" for a in (r["acceptance_by_position"] or []) if a is not None)
        print(
            f"{r['suite']:<9}{r['temperature']:>5} {r['method']:<16}{r['tokens']:>6}"
            f"{r['decode_tok_s']:>8.1f}{_num(r['speedup'], 8, 'x')}{r['e2e_s_mean']:>8.2f}"
            f"{_num(r['e2e_speedup'], 7, 'x')}{_num(r['mean_accepted_length'], 8)}  {by_pos}"
        )
    for r in rows:
        if r["confidence_calibration"]:
            bins = "  ".join(
                f"{b['predicted']:.2f}->{b['observed']:.2f} (n={b['n']})" for b in r["confidence_calibration"]
            )
            print(f"calibration {r['suite']} t={r['temperature']} {r['method']}: predicted->observed {bins}")


def _num(value: float | None, width: int, unit: str = "") -> str:
    return f"{value:.2f}{unit}".rjust(width) if value is not None else "-".rjust(width)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suites", nargs="+", default=list(SUITES), choices=list(SUITES))
    ap.add_argument("--temps", nargs="+", type=float, default=[0.0, 1.0])
    ap.add_argument("--max-tokens", type=int, default=192)
    ap.add_argument("--prompts", type=int, default=6, help="prompts per suite")
    ap.add_argument(
        "--seeds", type=int, default=1, help="sampled requests per prompt and temperature > 0 (one seed each)"
    )
    ap.add_argument("--draft", type=Path, default=None, help="also measure draft:PATH")
    ap.add_argument("--dspark", nargs="?", const="", default=None, help="also measure the draft head [DIR]")
    ap.add_argument("--k", type=int, default=None, help="--spec-k for our drafters")
    ap.add_argument("--spec-threshold", type=float, nargs="+", default=None, help="dspark's, one run each")
    ap.add_argument(
        "--tree", type=int, nargs="+", default=None, help="dspark with trees of N nodes, one run each"
    )
    ap.add_argument("--methods", nargs="+", default=None, help="only these methods (names as in the table)")
    ap.add_argument("--lookup", type=int, default=10, help="transformers' prompt_lookup_num_tokens")
    ap.add_argument("--no-transformers", action="store_true")
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16"], help="our engine's")
    ap.add_argument("--json", type=Path, default=None, help="also write the rows here")
    opts = ap.parse_args()
    torch.set_num_threads(opts.threads)
    print(f"threads {opts.threads}, load average {os.getloadavg()} before", file=sys.stderr)

    path = resolve(None)
    engine = Engine.load(path, dtype=opts.dtype, max_context=2048)
    methods: dict[str, Runner] = {"plain": ours(engine, None), "ngram": ours(engine, "ngram", opts.k)}
    if opts.draft:
        methods[f"draft:{opts.draft.name}"] = ours(engine, f"draft:{opts.draft}", opts.k)
    if opts.dspark is not None:
        spec = f"dspark:{opts.dspark}" if opts.dspark else "dspark"
        for threshold in opts.spec_threshold or [None]:
            name = "dspark" if threshold is None else f"dspark t={threshold}"
            methods[name] = ours(engine, spec, opts.k, threshold)
            methods[name.replace("dspark", "head alone")] = ours(engine, spec, opts.k, threshold, alone=True)
        for tree in opts.tree or []:
            methods[f"dspark tree={tree}"] = ours(engine, spec, opts.k, tree=tree)
        trained_on = {p["prompt"] for p in bundled_prompts()}
        assert not trained_on & set(SUITES["chat"]), "a chat prompt is one the head was trained on"
    if not opts.no_transformers:
        eos = sorted(engine.tokenizer.eos_ids)
        methods["hf plain"] = theirs(path, eos, 0)
        methods["hf lookup"] = theirs(path, eos, opts.lookup)

    if opts.methods:
        methods = {name: run for name, run in methods.items() if name in opts.methods}
    results: dict[tuple[str, float, str], Result] = {}
    for suite in opts.suites:
        prompts = [
            engine.chat_prompt([{"role": "user", "content": p}]) for p in SUITES[suite][: opts.prompts]
        ]
        for temp in opts.temps:
            for i, ids in enumerate(prompts):
                for seed in range(i, i + (opts.seeds if temp > 0 else 1) * len(prompts), len(prompts)):
                    params = SamplingParams(max_tokens=opts.max_tokens, temperature=temp, seed=seed)
                    warm_up = seed == 0 and (suite, temp) == (opts.suites[0], opts.temps[0])
                    for name, run in methods.items():
                        if warm_up:
                            run(ids, SamplingParams(max_tokens=8, temperature=temp, seed=0), Result())
                        run(ids, params, results.setdefault((suite, temp, name), Result()))
                print(f"{suite} t={temp} prompt {i + 1}/{len(prompts)} done", file=sys.stderr)
            if opts.json:  # as we go: a long run that fails late keeps what it measured
                opts.json.write_text(json.dumps(summarize(results), indent=1))
    render(summarize(results))
    print(f"load average {os.getloadavg()} after (a shared machine makes these noisy)", file=sys.stderr)


if __name__ == "__main__":
    main()
