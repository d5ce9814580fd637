"""Where speculation inside a continuous batch stops paying. A benchmark, not a test.

The embedded SmolLM2 as `lossless serve --max-batch` serves it (int4 on the file's Q4 blocks, our
kernels, eager, the DSpark head drafting, greedy, at most 128 tokens), in process (no HTTP: the batch's
own speed). For each number of clients c and each cap on a step's decoding tokens (`TokenBatch.draft_rows`:
a step's pending tokens and drafts together; each sequence may draft rows // decoding - 1 tokens), c
sequences run at once, each replaced by the suite's next prompt as it ends (a closed loop), until
max(4, 2c) requests have finished. "plain" is the same batch without a drafter. Configurations take turns
within a round, the order reversed every other round, so a drift of the machine falls on all alike.

Figures per (suite, c, cap): total output tokens/s (prompts' time included, as a server's clients see it)
and tokens per sequence step (mean accepted length, the bonus token included; plain: 1). Each round's
ratio to plain; the median over rounds with its range. The cap the batch ships with (`DRAFT_ROWS`) is
read from this.

    python benchmarks/batch_drafts.py [--clients 1 2 4 8 16] [--rows 4 8 16 32] [--rounds 3] [--out F.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from lossless.engine.engine import Engine
from lossless.engine.model.sampling import SamplingParams
from lossless.engine.speculate.spec import parse_drafter_spec
from lossless.models import resolve
from support import SUITES

SUITE_NAMES = {"chat": "open chat", "grounded": "grounded"}
PARAMS = SamplingParams(max_tokens=128, temperature=0.0)


def closed_loop(engine: Engine, prompts: list[list[int]], clients: int, rows: int | None) -> dict[str, float]:
    """c sequences at once until max(4, 2c) have finished -> tokens/s and tokens per sequence step."""
    batch = engine.decode_batch(clients)
    if rows is not None:
        batch.tokens.draft_rows = rows
    requests = max(4, 2 * clients)
    queue = [prompts[i % len(prompts)] for i in range(requests)]
    tokens, steps, accepted = 0, 0, 0
    start = time.perf_counter()
    key = 0
    while queue or batch.running():
        while queue and batch.free():
            batch.add(key, queue.pop(0), PARAMS)
            key += 1
        for _, delta in batch.step():
            tokens += len(delta.token_ids)
            if delta.finish_reason is not None:
                steps += int(delta.stats.get("steps") or 0)
                accepted += int(delta.stats.get("accepted") or 0)
    elapsed = time.perf_counter() - start
    per_step = (steps + accepted) / steps if steps else 1.0
    return {"tokens": tokens, "seconds": elapsed, "tokens_per_s": tokens / elapsed, "per_step": per_step}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--clients", type=int, nargs="+", default=[1, 2, 4, 8, 16])
    parser.add_argument("--rows", type=int, nargs="+", default=[4, 8, 16, 32])
    parser.add_argument("--suites", nargs="+", default=list(SUITE_NAMES), choices=list(SUITE_NAMES))
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--out", type=Path)
    opts = parser.parse_args()
    torch.set_num_threads(opts.threads)
    plain = Engine.load(resolve(None), dtype="int4", max_context=2048)
    drafting = plain.with_drafter(parse_drafter_spec("dspark"))
    configs: list[int | None] = [None, *opts.rows]  # None: plain
    records: list[dict[str, Any]] = []
    for rnd in range(opts.rounds):
        order = configs if rnd % 2 == 0 else configs[::-1]
        for suite in opts.suites:
            prompts = [plain.chat_prompt([{"role": "user", "content": p}]) for p in SUITES[suite]]
            for clients in opts.clients:
                for rows in order:
                    engine = plain if rows is None else drafting
                    got = closed_loop(engine, prompts, clients, rows)
                    record = {"round": rnd, "suite": suite, "clients": clients, "rows": rows, **got}
                    records.append(record)
                    print(json.dumps(record), flush=True)
    summary = summarize(records)
    print_table(summary)
    if opts.out is not None:
        opts.out.write_text(json.dumps({"records": records, "summary": summary}, indent=1))


def summarize(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per (suite, clients, rows): the median tokens/s and per-step figure over rounds, and the median
    (min-max) of each round's ratio to plain."""
    plain = {(r["round"], r["suite"], r["clients"]): r["tokens_per_s"] for r in records if r["rows"] is None}
    cells: dict[tuple[str, int, int | None], list[dict[str, Any]]] = {}
    for r in records:
        cells.setdefault((r["suite"], r["clients"], r["rows"]), []).append(r)
    out = []
    for (suite, clients, rows), runs in cells.items():
        ratios = [r["tokens_per_s"] / plain[(r["round"], suite, clients)] for r in runs]
        out.append(
            {
                "suite": suite,
                "clients": clients,
                "rows": rows,
                "tokens_per_s": statistics.median(r["tokens_per_s"] for r in runs),
                "per_step": statistics.median(r["per_step"] for r in runs),
                "ratio": statistics.median(ratios),
                "ratio_range": [min(ratios), max(ratios)],
                "rounds": len(runs),
            }
        )
    return out


def print_table(summary: list[dict[str, Any]]) -> None:
    print("\n| suite | clients | cap (rows) | tokens/s | tokens per step | vs plain |")
    print("|---|---:|---:|---:|---:|---|")
    for s in summary:
        lo, hi = s["ratio_range"]
        cap = "plain" if s["rows"] is None else s["rows"]
        print(
            f"| {SUITE_NAMES[s['suite']]} | {s['clients']} | {cap} | {s['tokens_per_s']:.1f} | "
            f"{s['per_step']:.2f} | {s['ratio']:.2f}x ({lo:.2f}-{hi:.2f}) |"
        )


if __name__ == "__main__":
    main()
