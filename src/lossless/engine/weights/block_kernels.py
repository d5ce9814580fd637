"""Our block kernels (`block_kernels.cpp`), built on first use: llama.cpp's Q4 x Q8 product on AVX-512 VNNI
or AVX2, and on AVX-512 its Q8 x Q8 product; both multiply weights stored in blocks of 32 by activations
rounded to int8 per block.

torch's int4 CPU kernel (`quant.Int4Linear`'s other path) turns every 4-bit code into a float and
multiplies in float32: a few weights per instruction. llama.cpp rounds the activations to int8 per block
of 32 (its Q8_1 blocks: a scale d and the sum of the block's codes) and multiplies codes by codes in
int32, 64 per AVX-512 VNNI instruction, then scales each block's sum by the two blocks' scales. This is
that product, with 16 weight rows interleaved per 32-bit lane so one instruction serves 16 rows without
a horizontal sum; on a CPU without AVX-512 VNNI the same in AVX2, as llama.cpp does there. It changes
the numerics: activations carry 8 bits per block, not bfloat16's per value (~0.5% relative error on a
product, as llama.cpp's), and `Engine` says so wherever it says int4. The AVX-512 build also multiplies
8-bit codes (`pack8`, `q8_linear`: a Q8_0 output layer, `quant.Q8Linear`). Every build also holds
attention computed row by row (`rows_attention`; its softmax's e^x alone: `softmax_exp`), which the
continuous batch's decoding rows and row-by-row prompts run on, and the row-wise pieces of a layer the
batch runs over its packed rows (`norm_rows`, `rope_rows`): each row from itself alone, one call where
torch would run a handful of small ops; and a step's layers all in one call where its rows all go apart,
those pieces in the order the batch's forward calls them (`decode_layers`).

The C++ file is compiled once per machine and instruction set with the system's C++ compiler (the one
torch.compile already needs) against torch's headers, into ``$LOSSLESS_HOME/kernels`` (written whole,
then renamed into place), and loaded as the operator ``torch.ops.lossless.q4_linear_<isa>``. Where the
CPU has neither instruction set, or no compiler is found, or the build fails, `available` says why and
the int4 layers use torch's kernel.
"""

from __future__ import annotations

import functools
import hashlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from torch import Tensor

from lossless.engine import cpu

SOURCE = Path(__file__).with_name("block_kernels.cpp")
COMMON = ["-O3", "-std=c++20", "-shared", "-fPIC", "-fopenmp", "-D_GLIBCXX_USE_CXX11_ABI=1", "-w"]
# no loop version of a kernel may fuse a multiply and an add that another computes in two roundings: a
# row's bits must not depend on which version the compiler picked for it (the reductions' order is
# written out in the source for the same reason)
COMMON += ["-ffp-contract=off"]
# instruction set -> (the CPU flags it needs, as /proc/cpuinfo names them; the compiler's flags), best first
ISAS = {
    "avx512": (
        ("avx512f", "avx512bw", "avx512vl", "avx512_vnni"),
        ["-mavx512f", "-mavx512bw", "-mavx512vl", "-mavx512vnni"],
    ),
    "avx2": (("avx2", "fma"), ["-mavx2", "-mfma"]),
}
ROWS = 16  # weight rows per 32-bit lane group


def available() -> str | None:
    """None when the kernel for this CPU's best instruction set is loaded and ready, else why not."""
    isa = best()
    if isa is None:
        return f"this CPU has neither AVX-512 VNNI nor AVX2 with FMA ({', '.join(_needs())})"
    return load_kernels(isa)


def _needs() -> list[str]:
    return sorted({f for needs, _ in ISAS.values() for f in needs} - cpu.flags())


def best() -> str | None:
    """The best instruction set of `ISAS` this CPU has, or None."""
    flags = cpu.flags()
    return next((isa for isa, (needs, _) in ISAS.items() if all(f in flags for f in needs)), None)


def pack(codes: Tensor, scale: Tensor, offset: Tensor) -> tuple[Tensor, Tensor]:
    """codes [N, K] (0..15), scale and offset [N, K / 32] (a weight is scale * code + offset; N a multiple
    of 16) -> the kernel's (codes [N / 16, K / 32, 256] uint8, scales [N / 16, K / 32, 2, 16] float32)."""
    n, k = codes.shape
    groups, blocks = n // ROWS, k // 32
    # column 32 b + 16 h + 4 j + t of row 16 g + r -> byte (g, b, j, r, t), nibble h
    c = codes.to(torch.uint8).view(groups, ROWS, blocks, 2, 4, 4).permute(0, 2, 4, 1, 5, 3)
    packed = (c[..., 0] | (c[..., 1] << 4)).reshape(groups, blocks, 256).contiguous()
    both = torch.stack([scale.float(), offset.float()], dim=-1)  # [N, K / 32, 2]
    scales = both.view(groups, ROWS, blocks, 2).permute(0, 2, 3, 1).contiguous()
    return packed, scales


def pack8(codes: Tensor, scale: Tensor, offset: Tensor) -> tuple[Tensor, Tensor]:
    """The same for 8-bit codes (0..255): -> (codes [N / 16, K / 32, 512] uint8, scales as `pack`); byte
    (g, b, j, r, t) holds column 32 b + 4 j + t of row 16 g + r."""
    n, k = codes.shape
    groups, blocks = n // ROWS, k // 32
    c = codes.to(torch.uint8).view(groups, ROWS, blocks, 8, 4).permute(0, 2, 3, 1, 4)
    both = torch.stack([scale.float(), offset.float()], dim=-1)  # [N, K / 32, 2]
    scales = both.view(groups, ROWS, blocks, 2).permute(0, 2, 3, 1).contiguous()
    return c.reshape(groups, blocks, 8 * 64).contiguous(), scales


def q4_linear(x: Tensor, codes: Tensor, scales: Tensor, isa: str | None = None) -> Tensor:
    """x [M, K] (bfloat16 or float32) times the packed weights -> [M, N] in x's dtype, by the kernel
    built for ``isa`` (None: `best`), which must be loaded (`load_kernels`)."""
    return op(isa)(x, codes, scales)


def q8_linear(x: Tensor, codes: Tensor, scales: Tensor) -> Tensor:
    """x [M, K] times 8-bit weights packed by `pack8` -> [M, N] in x's dtype, on AVX-512 VNNI only (AVX2's
    vpmaddubsw would saturate on 8-bit codes): the AVX-512 build must be loaded (`load_kernels`)."""
    return torch.ops.lossless.q8_linear_avx512(x, codes, scales)


def rows_attention(
    q: Tensor,
    keys: Tensor,
    values: Tensor,
    slots: Tensor,
    seen: Tensor,
    offsets: Tensor,
    extra: Tensor,
    isa: str | None = None,
) -> Tensor:
    """Attention for R query rows, each computed alone over its own cache slot, by the build for ``isa``
    (None: `best`), which must be loaded: q [R, H, D]; keys, values [S, Hkv, P, D] (contiguous, q's dtype:
    bfloat16 or float32); row r reads slot ``slots[r]`` at positions 0..seen[r] - 1, then
    ``extra[offsets[r]:offsets[r + 1]]`` (int64 each) -> [R, H, D]. A row's result depends on its query
    and those keys and values, in that order, only."""
    kernel = getattr(torch.ops.lossless, f"rows_attention_{isa or best()}")
    return kernel(q, keys, values, slots, seen, offsets, extra)


def softmax_exp(x: Tensor, isa: str | None = None) -> Tensor:
    """e^x (float32, for x <= 0) as `rows_attention`'s softmax computes it, by the build for ``isa`` (None:
    `best`): our own exponential, not the C library's, so that 16 lanes at once and one value at a time
    give the same bits on every machine."""
    return getattr(torch.ops.lossless, f"softmax_exp_{isa or best()}")(x)


def norm_rows(x: Tensor, weight: Tensor, eps: float, isa: str | None = None) -> Tensor:
    """x [N, D] -> x * rsqrt(mean(x ** 2) + eps) * weight, each row from itself alone in float32, rounded
    once to x's dtype (bfloat16 or float32); by the build for ``isa`` (None: `best`), which must be loaded."""
    return getattr(torch.ops.lossless, f"norm_rows_{isa or best()}")(x, weight, eps)


def rope_rows(
    qkv: Tensor,
    cos: Tensor,
    sin: Tensor,
    keys: Tensor,
    values: Tensor,
    slots: Tensor,
    positions: Tensor,
    heads: int,
    isa: str | None = None,
) -> Tensor:
    """qkv [N, (H + 2 Hkv) D], each row its query, key and value heads; cos, sin [N, D] in its dtype: the
    query and key heads rotated for their row's position as `transformer.apply_rope` rotates them (in
    float32, rounded once), each row's key and value written to ``keys``, ``values`` [S, Hkv, P, D] at
    (slots[r], :, positions[r]) (a key rounded to qkv's dtype, then to the cache's) -> queries [N, H, D].
    By the build for ``isa`` (None: `best`), which must be loaded."""
    kernel = getattr(torch.ops.lossless, f"rope_rows_{isa or best()}")
    return kernel(qkv, cos, sin, keys, values, slots, positions, heads)


def decode_layers(
    x: Tensor,
    norms: list[Tensor],
    codes: list[Tensor],
    scales: list[Tensor],
    keys: list[Tensor],
    values: list[Tensor],
    cos: Tensor,
    sin: Tensor,
    slots: Tensor,
    positions: Tensor,
    rows: tuple[Tensor, Tensor, Tensor],
    heads: int,
    eps: float,
    isa: str | None = None,
) -> Tensor:
    """A step's rows x [N, dim] (all apart: decoding rows, prompts row by row) through every layer, each
    row as a one-token step computes it -> the final norm's output [N, dim]: per layer `norm_rows`, the
    q|k|v product (``codes``, ``scales``: per layer q|k|v, output, gate|up, down, packed by `pack`),
    `rope_rows` (writing each layer's ``keys``, ``values``), `rows_attention` over ``rows`` (its seen,
    offsets, extra), the output product and the sum, `norm_rows`, gate|up, torch's silu and product, down
    and the sum; ``norms``: two a layer (float32), then the final one. The same calls as one by one, so
    the same bits. By the build for ``isa`` (None: `best`), which must be loaded."""
    kernel = getattr(torch.ops.lossless, f"decode_layers_{isa or best()}")
    return kernel(x, norms, codes, scales, keys, values, cos, sin, slots, positions, *rows, heads, eps)


def op(isa: str | None = None) -> Callable[[Tensor, Tensor, Tensor], Tensor]:
    """The operator `q4_linear` calls."""
    return getattr(torch.ops.lossless, f"q4_linear_{isa or best()}")


@functools.cache
def load_kernels(isa: str) -> str | None:
    """Build (once per machine) and load the kernel for ``isa``: None when ready, else why not."""
    compiler = shutil.which(os.environ.get("CXX", "g++"))
    if compiler is None:
        return "no C++ compiler (g++ or $CXX) found"
    try:
        library = _build(compiler, isa)
    except (OSError, subprocess.SubprocessError) as exc:
        return f"building it failed: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}"
    torch.ops.load_library(str(library))
    torch.library.register_fake(f"lossless::q4_linear_{isa}")(_shape)
    torch.library.register_fake(f"lossless::rows_attention_{isa}")(lambda q, *_: torch.empty_like(q))
    torch.library.register_fake(f"lossless::norm_rows_{isa}")(lambda x, *_: torch.empty_like(x))
    torch.library.register_fake(f"lossless::softmax_exp_{isa}")(torch.empty_like)
    torch.library.register_fake(f"lossless::decode_layers_{isa}")(lambda x, *_: torch.empty_like(x))
    torch.library.register_fake(f"lossless::rope_rows_{isa}")(
        lambda qkv, cos, sin, keys, values, slots, positions, heads: qkv.new_empty(
            qkv.shape[0], heads, keys.shape[3]
        )
    )
    if isa == "avx512":
        torch.library.register_fake(f"lossless::q8_linear_{isa}")(_shape)
    return None


def _shape(x: Tensor, codes: Tensor, scales: Tensor) -> Tensor:
    return x.new_empty(x.shape[0], codes.shape[0] * ROWS)


def _build(compiler: str, isa: str) -> Path:
    from lossless.models import home

    flags = [
        *COMMON,
        *ISAS[isa][1],
        f'-DQ4_OP="q4_linear_{isa}"',
        f'-DQ8_OP="q8_linear_{isa}"',
        f'-DATTENTION_OP="rows_attention_{isa}"',
        f'-DNORM_OP="norm_rows_{isa}"',
        f'-DEXP_OP="softmax_exp_{isa}"',
        f'-DROPE_OP="rope_rows_{isa}"',
        f'-DLAYERS_OP="decode_layers_{isa}"',
    ]
    key = hashlib.sha256(
        b"\0".join([SOURCE.read_bytes(), torch.__version__.encode(), " ".join(flags).encode()])
    )
    target = home() / "kernels" / f"block_kernels_{isa}-{key.hexdigest()[:16]}.so"
    if target.exists():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    from torch.utils.cpp_extension import include_paths, library_paths

    includes = [f"-I{p}" for p in include_paths()]
    libs = [f"-L{p}" for p in library_paths()] + ["-ltorch", "-ltorch_cpu", "-lc10"]
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        built = Path(tmp) / target.name
        done = subprocess.run(
            [compiler, *flags, *includes, str(SOURCE), *libs, "-o", str(built)],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            raise subprocess.SubprocessError(done.stderr.strip() or f"{compiler} exited {done.returncode}")
        os.replace(built, target)
    return target
