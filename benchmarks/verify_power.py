"""How often verify catches lossy candidates, and how often it wrongly flags a lossless one.

Not a test (too slow for CI): each candidate is verified against the same baseline over many seeds at
the default budget, all over real HTTP on the tiny talkative checkpoint (tests/support/lossy_engines.py).
Targets: lossy caught >= 90% of the time; the lossless candidate flagged "different" <= 5%.

    .venv/bin/python benchmarks/verify_power.py --seeds 20 [--only NAME] > power.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from lossless.client.endpoints import Endpoint
from lossless.engine.engine import Engine
from lossless.server.launch import start_embedded
from lossless.server.options import ServeOptions
from lossless.verify.budget import BUDGETS
from lossless.verify.result import VerifyConfig
from lossless.verify.run import verify
from support import lossy_engines, write_tiny_checkpoint

le = lossy_engines()  # the lossy candidates: tests/support/lossy_engines.py

# name -> (build, lossy). The no-residual bug moves mass only where a draft is rejected, so how much it
# shows depends on the drafter: on the talkative checkpoint n-grams draft ~5% of positions (the text
# does not repeat itself), a 4-bit copy of the target is accepted ~50% (a realistic draft: ~0.12 total
# variation per token), an unrelated model ~4% (~0.02; such a draft would never pay).
CANDIDATES: dict[str, tuple[Callable[[Path], Engine], bool]] = {
    "speculative ngram (lossless)": (lambda p: le.Speculative.load(p), False),
    "speculative 4-bit draft (lossless)": (
        lambda p: le.drafted(le.Speculative, p, le.quantize_4bit(Engine.load(p))),
        False,
    ),
    "temperature 0.8 for 1.0": (lambda p: le.ServedTemperature.load(p), True),
    "hidden top_p 0.9": (lambda p: le.HiddenTopP.load(p), True),
    "weights at 4 bits": (lambda p: le.quantize_4bit(Engine.load(p)), True),
    "weights perturbed 5%": (lambda p: le.perturb(Engine.load(p), 0.05), True),
    "speculative ngram, no residual": (lambda p: le.SkipResidual.load(p), True),
    "speculative 4-bit draft, no residual": (
        lambda p: le.drafted(le.SkipResidual, p, le.quantize_4bit(Engine.load(p))),
        True,
    ),
    "speculative unrelated draft, no residual": (
        lambda p: le.drafted(le.SkipResidual, p, le.perturb(Engine.load(p), 1.0, seed=1)),
        True,
    ),
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--only", default=None)
    parser.add_argument("--first-seed", type=int, default=0)
    parser.add_argument("--repeats", type=int, default=None, help="override the budget's repeats")
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp())
    ckpt = le.talkative_checkpoint(write_tiny_checkpoint(folder / "tiny"), folder / "talkative")
    out = {}
    budget = BUDGETS["default"]
    if args.repeats is not None:
        budget = replace(budget, repeats=args.repeats)
    with start_embedded(ServeOptions(), loaded=le.loaded(Engine.load(ckpt))) as base:
        for name, (build, lossy) in CANDIDATES.items():
            if args.only and args.only not in name:
                continue
            verdicts: Counter[str] = Counter()
            evidence: Counter[str] = Counter()  # which tests "different" rested on
            contexts_p: list[float] = []  # the contexts test's raw p-value, seed by seed
            start = time.perf_counter()
            with start_embedded(ServeOptions(), loaded=le.loaded(build(ckpt))) as url:
                for seed in range(args.first_seed, args.first_seed + args.seeds):
                    config = VerifyConfig(budget, seed=seed)
                    result = asyncio.run(
                        verify(Endpoint("b", base, "tiny"), Endpoint("c", url, "tiny"), config)
                    )
                    verdicts[result.verdict] += 1
                    ctx = {t.name: t for t in result.ab}.get("contexts")
                    if ctx is not None:
                        contexts_p.append(round(ctx.p_value, 4))
                    if result.verdict == "different":
                        evidence.update(r.split(":")[0].split(" ")[0] for r in result.decision.reasons)
            rate = verdicts["different"] / args.seeds
            out[name] = {
                "lossy": lossy,
                "verdicts": dict(verdicts),
                "different_rate": rate,
                "evidence": dict(evidence),
                "contexts_p": contexts_p,
                "seconds_per_run": round((time.perf_counter() - start) / args.seeds, 2),
            }
            print(f"{name}: {dict(verdicts)} {dict(evidence)}", file=sys.stderr, flush=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
