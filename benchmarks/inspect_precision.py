"""How reliably `lossless inspect` places an endpoint's precision (issue #23's target: the right
reference in >= 9 of 10 runs, and A/A never placed elsewhere).

Candidates: our server in float32 and in bfloat16, and llama.cpp's server on a Q2_K copy of the
embedded GGUF. References: our float32 and bfloat16 servers, llama.cpp on the embedded Q4_1 GGUF and
on the Q2_K copy. Each repetition is one claim as `inspect` makes it: the references scored once, each
candidate scored twice (A/A) and judged. A candidate and its reference are separate servers (ours:
two servers on one loaded engine; llama.cpp: two processes on the same file). llama.cpp's servers here
are llama-cpp-python's: inspect scores a text through /completions with echo, which llama.cpp's own
llama-server does not offer (it returns no prompt log-probabilities), so it cannot be a reference.

    .venv/bin/python benchmarks/inspect_precision.py [--repeats 10] [--references-once]

Prints, per candidate, how often it was placed right and the distances and floors seen.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path

from lossless.client.endpoints import Endpoint
from lossless.inspect import precision
from support import LlamaCppServer, requantize

RIGHT = {"ours float32": "float32", "ours bfloat16": "bfloat16", "llama.cpp Q2_K": "llama.cpp Q2_K"}


def servers(stack: ExitStack, gguf: Path, q2k: Path) -> tuple[dict[str, Endpoint], dict[str, Endpoint]]:
    from lossless.server.launch import start_embedded
    from lossless.server.main import load_model
    from lossless.server.options import ServeOptions

    refs: dict[str, Endpoint] = {}
    cands: dict[str, Endpoint] = {}
    for dtype in ("float32", "bfloat16"):
        loaded = load_model(ServeOptions(model=str(gguf), dtype=dtype))
        for side in (refs, cands):
            url = stack.enter_context(start_embedded(ServeOptions(dtype=dtype), loaded=loaded))
            side[dtype if side is refs else f"ours {dtype}"] = Endpoint(dtype, url, loaded.name)
    for name, path in (("llama.cpp Q4_1", gguf), ("llama.cpp Q2_K", q2k)):
        refs[name] = Endpoint(name, stack.enter_context(LlamaCppServer(path)).url, "smol")
    cands["llama.cpp Q2_K"] = Endpoint("cand", stack.enter_context(LlamaCppServer(q2k)).url, "smol")
    return refs, cands


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--references-once", action="store_true", help="score the references once only")
    args = parser.parse_args()
    from lossless.models import resolve

    gguf = resolve()
    q2k = (
        requantize(gguf, Path("/tmp/lossless-bench-q2k.gguf"))
        if not Path("/tmp/lossless-bench-q2k.gguf").exists()
        else Path("/tmp/lossless-bench-q2k.gguf")
    )
    with ExitStack() as stack:
        refs, cands = servers(stack, gguf, q2k)
        got: dict[str, list[precision.Precision]] = {c: [] for c in cands}
        scored = None
        for i in range(args.repeats):
            start = time.monotonic()
            if scored is None or not args.references_once:
                scored = {n: asyncio.run(precision.score(e))[0] for n, e in refs.items()}
            for name, endpoint in cands.items():
                first, second = asyncio.run(precision.score(endpoint, repeats=2))
                one = precision.judge(first, second, scored, seed=i)
                got[name].append(one)
                print(f"run {i + 1} {name}: {one.verdict} {one.nearest} | {one.note}", flush=True)
            print(f"run {i + 1}: {time.monotonic() - start:.0f} s", flush=True)
    report(got)


def report(got: dict[str, list[precision.Precision]]) -> None:
    print(
        "\ncandidate | placed right | verdicts | floor (median, max) | bit-identical | distance to each "
        "reference (median, min-max)"
    )
    for name, runs in got.items():
        right = sum(r.verdict == "evident" and r.nearest == RIGHT[name] for r in runs)
        words = Counter(f"{r.verdict}:{r.nearest}" for r in runs)
        floors = [r.floor for r in runs if r.floor is not None]
        same = sum(bool(r.bit_identical) for r in runs)
        by_ref: dict[str, list[float]] = {}
        for r in runs:
            for d in r.distances:
                by_ref.setdefault(d["reference"], []).append(d["distance"])
        dist = "; ".join(
            f"{k} {statistics.median(v):.4f} ({min(v):.4f}-{max(v):.4f})" for k, v in by_ref.items()
        )
        floor = f"{statistics.median(floors):.4f}, {max(floors):.4f}" if floors else "-"
        print(f"{name} | {right}/{len(runs)} | {dict(words)} | {floor} | {same}/{len(runs)} | {dist}")


if __name__ == "__main__":
    main()
