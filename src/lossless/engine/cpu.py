"""What this CPU computes, read once from ``/proc/cpuinfo``: its instruction-set flags, whether it has
bfloat16 instructions, and the weights' dtype ``--dtype auto`` picks from them. Torch-free, so the CLI can
check ``--dtype`` before anything heavy is imported; every reader of the CPU's features reads them here.
"""

from __future__ import annotations

import functools
from pathlib import Path

from lossless.errors import UsageError

CPUINFO = Path("/proc/cpuinfo")


@functools.cache  # read once: every int4 layer asks which kernel it may use
def flags(cpuinfo: Path = CPUINFO) -> frozenset[str]:
    """The CPU's feature flags as ``cpuinfo`` names them (x86 ``flags``, aarch64 ``Features``: the first
    processor speaks for all); none where there is no such file (not Linux)."""
    try:
        text = cpuinfo.read_text(errors="replace")
    except OSError:
        return frozenset()
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


# --- the weights' dtype ---------------------------------------------------------------------------

# what --dtype accepts (the engine also loads float64, for tests); int4: the GGUF's own Q4_0 / Q4_1 blocks
# (engine/weights/quant.py: on our kernel, activations rounded to int8 per block, else torch's with bfloat16
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
# only one in which drafts can pay. The earlier bfloat16 figures (2.3x float32's plain decoding, a
# forward over 2-8 tokens costing what one over a single token does) came from a CPU that computes it.
# Either dtype is exact in the engine's sense: speculative decoding verifies against the target's own
# distribution in that dtype.
_NATIVE_BF16 = frozenset({"avx512_bf16", "amx_bf16", "bf16"})


def resolve_dtype(name: str, cpuinfo: Path = CPUINFO) -> tuple[str, str]:
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


def native_bfloat16(cpuinfo: Path = CPUINFO) -> list[str]:
    """The CPU's bfloat16 instructions (none: a bfloat16 matmul over many tokens is slow, see above)."""
    return sorted(flags(cpuinfo) & _NATIVE_BF16)
