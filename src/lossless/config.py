"""Frozen run configurations: the CLI parses options into one of these and passes it down.

Torch-free on purpose: the CLI validates ``--speculative`` and ``--dtype`` with what is here before
anything heavy is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from lossless.errors import UsageError


@dataclass(frozen=True)
class ServeConfig:
    model: str | None = None  # embedded model name or a checkpoint path; None -> the default model
    host: str = "127.0.0.1"  # loopback unless the user asks otherwise
    port: int = 8000
    dtype: str = "auto"  # weights are dequantized to this at load; auto -> `resolve_dtype`
    max_queue: int = 64  # waiting requests beyond this get 429
    max_context: int | None = None  # cap on prompt + generated tokens; None -> the model's
    speculative: str = "none"  # drafter spec: ngram, draft:PATH, dspark[:DIR] or none (`parse_drafter_spec`)
    spec_k: int | None = None  # longest draft per step; None -> the drafter's default
    spec_threshold: float | None = None  # draft models: stop after a token below this probability
    spec_tree: int | None = None  # dspark: candidate tokens per step in a tree (None, 0: one chain)
    threads: int | None = None  # torch intra-op threads; None -> torch's default
    compile: bool = False  # torch.compile the forward passes at start-up (`Engine.compile`)


# --- the weights' dtype ---------------------------------------------------------------------------

# what --dtype accepts (the engine also loads float64, for tests); int4: the GGUF's own Q4_0 / Q4_1 blocks
# (engine/quant.py: on our kernel, activations rounded to int8 per block, else torch's with bfloat16
# ones), the rest of the weights and the activations between layers in bfloat16
DTYPES = ("auto", "int4", "bfloat16", "float32")

# auto's rule: bfloat16 where the CPU has bfloat16 instructions (x86 avx512_bf16 or amx_bf16, an aarch64
# "bf16" feature), float32 elsewhere. Decoding one token is bound by memory, so bfloat16 (half the bytes)
# wins it even without them; but a forward over several tokens - a prompt's prefill, a speculative
# step's verification - is bound by arithmetic, and without the instructions torch's bfloat16 matmul
# is far slower than float32's. Measured with this repo's engine on SmolLM2-135M, on a 2-core AMD EPYC
# whose /proc/cpuinfo shows avx2 and fma but no avx512f, avx512_bf16 or amx_bf16 (torch capability
# "AVX2", torch.ops.mkldnn._is_mkldnn_bf16_supported() False), bfloat16 against float32, median ms:
#   2 threads (load ~2.4): one token 35.3 vs 60.1 (1.7x faster); 8 tokens 153 vs 128 (1.2x slower);
#                          a 128-token prefill 1700 vs 414 (4.1x slower)
#   1 thread  (load ~1.7): one token 58.8 vs 69.4 (1.2x faster); 8 tokens 292 vs 147 (2.0x slower);
#                          a 128-token prefill 3032 vs 482 (6.3x slower)
# so there float32 is the faster choice for anything but long plain answers to short prompts, and the
# only one in which drafts can pay. The README's bfloat16 figures (2.3x float32's plain decoding, a
# forward over 2-8 tokens costing what one over a single token does) came from a CPU that computes it.
# Either dtype is exact in the engine's sense: speculative decoding verifies against the target's own
# distribution in that dtype.
_NATIVE_BF16 = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def resolve_dtype(name: str, cpuinfo: Path = Path("/proc/cpuinfo")) -> tuple[str, str]:
    """``--dtype`` -> (the dtype to load the weights in, one short line saying why); UsageError when
    ``name`` is not one. ``cpuinfo``: where the CPU's flags are read (no such file: no native bfloat16)."""
    if name != "auto":
        if name not in (*DTYPES, "float64"):
            raise UsageError(f"--dtype: expected one of {', '.join(DTYPES)}; got {name!r}")
        if name == "int4":
            return name, "int4 weights (the file's Q4_0 / Q4_1 blocks), as asked"
        return name, f"{name} weights, as asked"
    native = native_bfloat16(cpuinfo)
    if native:
        return (
            "bfloat16",
            f"bfloat16 weights (auto): this CPU computes bfloat16 natively ({', '.join(native)})",
        )
    return (
        "float32",
        "float32 weights (auto): this CPU has no bfloat16 instructions, bfloat16 would be slower",
    )


def native_bfloat16(cpuinfo: Path = Path("/proc/cpuinfo")) -> list[str]:
    """The CPU's bfloat16 instructions (none: a bfloat16 matmul over many tokens is slow, see above)."""
    return sorted(_cpu_flags(cpuinfo) & _NATIVE_BF16)


def _cpu_flags(cpuinfo: Path) -> set[str]:
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:  # not Linux
        return set()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):  # x86, aarch64: the first processor speaks for all
            return set(value.split())
    return set()


# --- speculative decoding: the ``--speculative`` spec ---------------------------------------------

SPEC_HELP = (
    "ngram, draft:PATH (a small checkpoint sharing the target's tokenizer), dspark (the trained draft head "
    "shipped for the embedded model; dspark:DIR for another) or none"
)


@dataclass(frozen=True)
class DrafterSpec:
    kind: Literal["ngram", "draft", "dspark", "none"]
    path: Path | None = None  # the draft checkpoint (kind "draft"), a head's folder (kind "dspark")
    k: int = 8  # longest draft per step
    threshold: float | None = None  # draft models: stop drafting after a token drawn with probability
    # below this; dspark: stop before a position whose predicted survival (product of confidences) is
    # below this (None: DSPARK_THRESHOLD for the target's dtype)
    # dspark: a tree of up to this many candidate tokens per step (0: one chain; None: DSPARK_TREE for the
    # target's dtype)
    tree: int | None = 0


# Per-kind defaults. n-gram: measured with benchmarks/speculative_speed.py; a draft costs nothing to
# make and the length backs off by itself, so long drafts pay whenever the text is copying. Draft
# model: the usual starting point, not measured here (SmolLM2-135M is its family's smallest, so the
# embedded model has no smaller draft); a draft model pays a forward per drafted token. dspark: its
# block, 7 tokens; the confidence head decides how many of them to draft, at a threshold that depends on
# what a wider target forward costs: a bfloat16 forward over 2-8 tokens costs what one over a single
# token does on a CPU, a float32 one up to 1.7x. In benchmarks/speculative_speed.py 0.1 beat 0.3 on all
# four suite/temperature rows with bfloat16 weights, and 0.3 beat 0.1 on all four with float32.
DEFAULT_K = {"ngram": 8, "draft": 4, "dspark": 7, "none": 0}
DEFAULT_THRESHOLD = {"draft": 0.3}
DSPARK_THRESHOLD = {"bfloat16": 0.1, "float32": 0.3, "int4": 0.1}  # int4 computes in bfloat16
# dspark: a tree of up to 4 candidates per step (`HeadDrafter`: the likeliest for greedy requests, three
# distinct draws for the first position of sampled ones). Open chat, benchmarks/speculative_speed.py,
# bfloat16: greedy 1.68x against one chain's 1.28x, temperature 1 1.29x against 1.26x (accepted length
# 1.56 against 1.44); trees of 2-10 measured, 4 best. float32: greedy 1.13x against 0.90x, temperature
# 1 0.96x against 0.87x. int4: 2 (tuned on torch's kernel; ours not re-tuned), since torch's int4 kernel
# multiplies 4 rows at a time, so verifying 5 tokens costs what 8 do (compiled, 2 AVX-512 cores: 12.6 ms
# for one token, 17.7 for 4, 25.3 for 5); greedy open chat 83.7 tok/s with 2 candidates, 76.0 with 3,
# 65.0 with 4 (plain 77.3), the same 1.76 accepted length with 2 and 3.
DSPARK_TREE = {"bfloat16": 4, "float32": 4, "int4": 2}


def parse_drafter_spec(
    spec: str, k: int | None = None, threshold: float | None = None, tree: int | None = None
) -> DrafterSpec:
    """``--speculative``, ``--spec-k``, ``--spec-threshold``, ``--spec-tree`` -> a DrafterSpec;
    UsageError when wrong."""
    kind, _, rest = spec.strip().partition(":")
    if kind not in DEFAULT_K or (kind == "draft" and not rest) or (kind in ("ngram", "none") and rest):
        raise UsageError(f"--speculative: expected {SPEC_HELP}; got {spec!r}")
    if k is not None and not 1 <= k <= 32:
        raise UsageError(f"--spec-k: expected a draft length from 1 to 32; got {k}")
    if threshold is not None and not 0.0 <= threshold < 1.0:
        raise UsageError(f"--spec-threshold: expected a probability in [0, 1); got {threshold}")
    if tree is not None and not (0 <= tree <= 64 and (tree == 0 or kind == "dspark")):
        raise UsageError(
            f"--spec-tree: expected 0 to 64 candidate tokens, with --speculative dspark; got {tree}"
        )
    path = Path(rest).expanduser() if rest else None
    if path is not None and not path.exists():
        raise UsageError(f"--speculative draft:{rest}: no such file or directory")
    return DrafterSpec(
        kind,  # type: ignore[arg-type]
        path,
        DEFAULT_K[kind] if k is None else k,
        DEFAULT_THRESHOLD.get(kind) if threshold is None else threshold,
        (None if kind == "dspark" else 0) if tree is None else tree,
    )
