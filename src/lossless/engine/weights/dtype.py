"""The dtype the weights are served in: ``--dtype``, or what ``auto`` picks from the checkpoint file and
this CPU's features - never from a timing taken at start-up, so the same command on the same machine
always serves the same numerics. Torch-free: the CLI checks ``--dtype`` before anything heavy loads.

auto, the fastest exact path this machine has:
    a GGUF whose linear layers are Q4_0 / Q4_1 blocks   int4: those blocks as they are (``quant``: our
                                                         kernel where it builds, else torch's)
    otherwise, with bfloat16 instructions                bfloat16
    otherwise                                            float32
"Exact": speculative decoding then verifies against the target's own distribution in those numerics.
"""

from __future__ import annotations

from pathlib import Path

from lossless.engine.cpu import CPUINFO, native_bfloat16
from lossless.errors import UsageError

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


def resolve_dtype(name: str, checkpoint: Path | None = None, cpuinfo: Path = CPUINFO) -> tuple[str, str]:
    """``--dtype`` -> (the dtype to load the weights in, one short line saying why); UsageError when
    ``name`` is not one. ``checkpoint``: the file auto looks into (its Q4 blocks); ``cpuinfo``: where
    the CPU's flags are read (no such file: no native bfloat16)."""
    if name != "auto":
        if name not in (*DTYPES, "float64"):
            raise UsageError(f"--dtype: expected one of {', '.join(DTYPES)}; got {name!r}")
        if name == "int4":
            return name, "int4 weights (the file's Q4_0 / Q4_1 blocks), as asked"
        return name, f"{name} weights, as asked"
    if checkpoint is not None and (kinds := q4_kinds(checkpoint)):
        return "int4", f"int4 weights (auto): the file's own {'/'.join(kinds)} blocks, multiplied as they are"
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


def q4_kinds(path: Path) -> list[str]:
    """The Q4 block kinds a GGUF file stores its transformer blocks' matrices in (none: another file, or
    no such layer), read from its header without loading a weight."""
    if path.suffix != ".gguf" or not path.is_file():
        return []
    from lossless.engine.weights.gguf import gguf_reader

    try:
        reader = gguf_reader(path)
    except (ValueError, OSError, KeyError, IndexError, UnicodeDecodeError):
        return []  # the loader says what is wrong with the file
    kinds = {t.tensor_type.name for t in reader.tensors if t.name.startswith("blk.") and len(t.shape) == 2}
    return sorted(kinds & {"Q4_0", "Q4_1"})
