"""Decode speed of our engine against llama.cpp on the same GGUF (CPU, batch 1), as ratios in one run.

Every engine runs greedy with the same threads and prompts, eos ignored so each run makes exactly N
tokens; ours in this one process, the peers through their own servers (llama.cpp's llama-server, vLLM's).
Decode speed is (N - 1) / (T(N) - T(1)), where T(n) is the wall time of a whole request making n tokens;
T(1) (prefill and the first token) is reported too. Rounds are interleaved (every engine once per prompt
per round), so a shared machine's load falls on all alike; the median over rounds and prompts is reported.
Each row's ratio to llama.cpp's plain decoding is the median of the paired ratios (the same prompt in the
same round, run one after the other, so the load they met was alike), with a bootstrap 95% CI of that
median: a row is faster than llama.cpp only where the whole CI is above 1. With vLLM in the run, each
row's ratio to vLLM (the same way) is a column of its own. The load average is printed before and after.

    lossless (ours): float32 | bfloat16 | int4 (the GGUF's Q4 blocks; on our kernel with int8 activations
                     where the CPU has AVX-512 VNNI or AVX2, else or if asked torch's with bfloat16), eager or
                     compiled (torch.compile; its start-up cost is printed), plainly or speculatively;
                     bfloat16 and int4 process prompts in float32 where the engine finds that faster;
                     int4's output layer on the file's Q8_0 blocks (our 8-bit kernel, AVX-512 VNNI), or
                     in the "bf16-output" rows on the dense bfloat16 weight, as before that kernel
    llama.cpp:       llama.cpp's own llama-server on the same file (its own Q4_1 kernels, the build `make
                     llama-cpp` makes: this CPU's instruction sets, AMX off), plain, one slot, prompt cache
                     off (a full prefill each request, as ours); each request a whole /v1/completions
                     answer (token ids in, ignore_eos), so T(1) holds an HTTP round trip that the decode
                     speed's difference cancels; with --llama-spec TYPE also "llama.cpp + TYPE", its own
                     speculation (--spec-type TYPE, e.g. ngram-mod)
    vLLM:            vLLM's CPU server (`make vllm`'s .venv-vllm, or $LOSSLESS_VLLM_PYTHON) on the file
                     dequantized to a Hugging Face folder, in bfloat16, prefix caching off, its OpenMP
                     threads bound to the first --threads cores; each request a whole /v1/completions
                     answer (token ids in, ignore_eos), so T(1) holds an HTTP round trip that the decode
                     speed's difference cancels. A peer when installed (--no-vllm leaves it out)
    default:         the engine `lossless serve` with no flags serves

    python benchmarks/engine_speed.py --threads 2 [--rows ...] [--suites chat grounded]
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import torch

from lossless.analyze.distribution import describe
from lossless.engine.cpu import native_bfloat16
from lossless.engine.engine import Engine
from lossless.engine.model.sampling import SamplingParams
from lossless.engine.speculate.spec import parse_drafter_spec
from lossless.engine.weights.packed import pack_output
from lossless.engine.weights.quant import Q8Linear
from lossless.models import resolve
from support import SUITES, LlamaServer, VllmServer, hf_folder, vllm_python

Run = Callable[[list[int], int], None]  # (prompt ids, tokens to make)
SETTLE_S = 1.0  # a pause after each engine's runs, before the next engine's
# row name -> (dtype, compiled, drafter spec, int4 kernel, output layer); "llama.cpp" is the reference.
# The output layer: "auto" as the engine chooses (the file's Q8_0 blocks on our 8-bit kernel where it runs),
# "bfloat16" the dense bfloat16 weight (oneDNN-packed where it can be), as before that kernel
ROWS = {
    "float32": ("float32", False, "none", "auto", "auto"),
    "bfloat16": ("bfloat16", False, "none", "auto", "auto"),
    "int4": ("int4", False, "none", "auto", "auto"),
    "int4 bf16-output": ("int4", False, "none", "auto", "bfloat16"),
    "int4 + ngram": ("int4", False, "ngram", "auto", "auto"),
    "int4 + dspark": ("int4", False, "dspark", "auto", "auto"),
    "int4 compiled": ("int4", True, "none", "auto", "auto"),
    "int4 compiled bf16-output": ("int4", True, "none", "auto", "bfloat16"),
    "int4 compiled + ngram": ("int4", True, "ngram", "auto", "auto"),
    "int4 compiled + dspark": ("int4", True, "dspark", "auto", "auto"),
    "int4 compiled + dspark bf16-output": ("int4", True, "dspark", "auto", "bfloat16"),
    "int4 torch-kernel compiled": ("int4", True, "none", "torch", "auto"),
    "int4 torch-kernel compiled + dspark": ("int4", True, "dspark", "torch", "auto"),
}


def default(path: Path, context: int) -> Run:
    """The engine ``lossless serve`` with no flags gets (its dtype, kernel, prompt numerics, drafter)."""
    from lossless.server.main import load_model
    from lossless.server.options import ServeOptions

    engine = load_model(ServeOptions(model=str(path), max_context=context)).engine
    print(f"  default: {engine.dtype}, drafter {engine.spec}", file=sys.stderr)
    return _runner(engine)


def ours(path: Path, dtype: str, compiled: bool, spec: str, kernel: str, output: str, context: int) -> Run:
    engine = Engine.load(path, dtype=dtype, max_context=context, int4_kernel=kernel)
    if output == "bfloat16":
        bfloat16_output(engine)
    print(f"  {dtype} {spec}: output layer {engine.output_layer or 'dense'}", file=sys.stderr)
    if engine.int4_kernel is not None:
        print(f"  {dtype} {spec}: int4 layers on {engine.int4_kernel[1]}", file=sys.stderr)
    if spec != "none":
        engine.use_drafter(parse_drafter_spec(spec))
    if compiled:  # as `serve --compile` does: the target's graphs, and a draft head's pass
        print(f"  {dtype} {spec}: compiled in {engine.compile():.1f} s", file=sys.stderr)
    return _runner(engine)


def bfloat16_output(engine: Engine) -> None:
    """The output layer back on the dense bfloat16 weight (oneDNN-packed where it can be), as it ran before
    the file's Q8_0 blocks served it: the same model but for that layer's numerics and speed."""
    layer = engine.model.output
    if isinstance(layer, Q8Linear):
        dense = torch.nn.Linear(layer.in_features, layer.out_features, bias=False)
        dense.weight = layer.weight
        engine.model.output = dense
        engine.output_layer = "packed" if pack_output(engine.model) else None


def _runner(engine: Engine) -> Run:
    def run(ids: list[int], n: int) -> None:
        for _ in engine.generate(ids, SamplingParams(max_tokens=n, temperature=0.0, ignore_eos=True)):
            pass

    return run


def llama_cpp(path: Path, threads: int, stack: contextlib.ExitStack, spec: str | None = None) -> Run:
    """llama.cpp's own server on ``path`` (with ``--spec-type spec`` if given), stopped when ``stack``
    closes."""
    extra = ["--spec-type", spec] if spec else []
    server = stack.enter_context(LlamaServer(path, threads=threads, metrics=False, extra=extra))
    print(f"  {server.name} {' '.join(extra)}: log {server.log}", file=sys.stderr)
    http = stack.enter_context(httpx.Client(base_url=server.url, trust_env=False, timeout=600))

    def run(ids: list[int], n: int) -> None:
        body = {"prompt": ids, "max_tokens": n, "temperature": 0.0, "ignore_eos": True, "cache_prompt": False}
        answer = http.post("/completions", json=body)
        answer.raise_for_status()
        made = answer.json()["usage"]["completion_tokens"]
        assert made == n, f"llama-server made {made} tokens, not {n}"

    return run


def vllm(path: Path, threads: int, stack: contextlib.ExitStack) -> Run:
    """vLLM's server on ``path`` dequantized (the folder is kept in the temp dir for the next run), stopped
    when ``stack`` closes."""
    folder = hf_folder(path, Path(tempfile.gettempdir()) / "lossless-engine-speed" / path.stem, sample=False)
    start = time.monotonic()
    server = stack.enter_context(VllmServer(folder, prefix_caching=False, threads=threads))
    print(f"  {server.name}: ready in {time.monotonic() - start:.0f} s, log {server.log}", file=sys.stderr)
    http = stack.enter_context(httpx.Client(base_url=server.url, trust_env=False, timeout=600))

    def run(ids: list[int], n: int) -> None:
        body = {"model": server.model_id, "prompt": ids, "max_tokens": n, "temperature": 0.0}
        answer = http.post("/completions", json=body | {"ignore_eos": True})
        answer.raise_for_status()
        made = answer.json()["usage"]["completion_tokens"]
        assert made == n, f"vLLM made {made} tokens, not {n}"

    return run


def measure(runs: dict[str, Run], prompts: list[list[int]], n: int, rounds: int) -> dict[str, list]:
    for run in runs.values():
        run(prompts[0], 8)  # warm-up: first-call allocations and kernel selection
        for ids in prompts[1:]:
            run(ids, 1)  # ... and each prompt's length once: a new shape's first prefill sets up kernels
    out: dict[str, list] = {name: [] for name in runs}
    for _ in range(rounds):
        for ids in prompts:
            for name, run in runs.items():
                t0 = time.perf_counter()
                run(ids, 1)
                t1 = time.perf_counter()
                run(ids, n)
                t2 = time.perf_counter()
                out[name].append(((n - 1) / ((t2 - t1) - (t1 - t0)), t1 - t0))
                # OpenMP threads spin a while after their work (vLLM's server, bound to the same cores, and
                # llama.cpp's): without a pause they land on the next engine's T(1), which then came out
                # longer than its T(N) in every run of ours measured right after vLLM's
                time.sleep(SETTLE_S)
    return out


def paired_ratio(mine: list, reference: list) -> tuple[float, float, float]:
    """Median of the per-run ratios of decode speed (runs paired by prompt and round) and the bootstrap
    95% CI of that median, computed on log ratios."""
    # a pair where either side's T(N) came out no longer than its T(1) (a stall on a shared machine) has no
    # speed: left out, and counted where the table is printed
    d = describe([math.log(a / b) for (a, _), (b, _) in zip(mine, reference, strict=True) if a > 0 and b > 0])
    lo, hi = d.ci95["p50"]
    return math.exp(d.p50 or 0.0), math.exp(lo), math.exp(hi)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default=None, help="a GGUF (default: the embedded SmolLM2 Q4_1)")
    ap.add_argument("--rows", nargs="+", default=list(ROWS), choices=[*ROWS, "default"])
    ap.add_argument("--suites", nargs="+", default=["chat", "grounded"], choices=list(SUITES))
    ap.add_argument("--prompts", type=int, default=3, help="prompts per suite")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=torch.get_num_threads())
    ap.add_argument("--no-vllm", action="store_true", help="leave vLLM's server out even when installed")
    ap.add_argument("--llama-spec", default=None, help="also llama-server with --spec-type TYPE, as a peer")
    opts = ap.parse_args()
    with contextlib.ExitStack() as stack:
        compare(opts, stack)


def compare(opts: argparse.Namespace, stack: contextlib.ExitStack) -> None:
    torch.set_num_threads(opts.threads)
    path, context = resolve(opts.model), 2048
    bf16 = ", ".join(native_bfloat16()) or "none"
    print(
        f"threads {opts.threads}, bfloat16 instructions: {bf16}, load average {os.getloadavg()} before",
        file=sys.stderr,
    )
    runs = {"llama.cpp": llama_cpp(path, opts.threads, stack)}
    if opts.llama_spec:
        runs[f"llama.cpp + {opts.llama_spec}"] = llama_cpp(path, opts.threads, stack, opts.llama_spec)
    if not opts.no_vllm and vllm_python().exists():
        runs["vLLM"] = vllm(path, opts.threads, stack)
    elif not opts.no_vllm:
        print(f"  vLLM: not installed at {vllm_python()} (make vllm): left out", file=sys.stderr)
    runs |= {
        name: default(path, context) if name == "default" else ours(path, *ROWS[name], context)
        for name in opts.rows
    }
    encoder = Engine.load(path, max_context=context)
    peers = [peer for peer in runs if peer.startswith("llama.cpp") or peer == "vLLM"]
    head = "".join(f"{'vs ' + peer:>14}{'95% CI':>14}" for peer in peers)
    print(f"{'suite':<10}{'engine':<26}{'tok/s':>8}{head}{'T(1) ms':>10}")
    for suite in opts.suites:
        texts = SUITES[suite][: opts.prompts]
        prompts = [encoder.chat_prompt([{"role": "user", "content": t}]) for t in texts]
        results = measure(runs, prompts, opts.new_tokens, opts.rounds)
        for name, values in results.items():
            rate = statistics.median(r for r, _ in values if r > 0)
            first = statistics.median(t for _, t in values) * 1000
            if stalled := sum(r <= 0 for r, _ in values):
                print(
                    f"  {suite} {name}: {stalled} of {len(values)} runs with T(N) <= T(1), left out",
                    file=sys.stderr,
                )
            cells = ""
            for peer in peers:
                ratio, lo, hi = paired_ratio(values, results[peer])
                cells += f"{ratio:>13.2f}x{f'{lo:.2f}-{hi:.2f}':>14}"
            print(f"{suite:<10}{name:<26}{rate:>8.1f}{cells}{first:>10.0f}", flush=True)
    print(f"load average {os.getloadavg()} after", file=sys.stderr)


if __name__ == "__main__":
    main()
