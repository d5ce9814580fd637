"""4-bit weights straight from a GGUF's Q4_0 / Q4_1 blocks, multiplied by torch's int4 CPU kernel or ours.

A Q4 block holds 32 weights of one row as 4-bit codes q in 0..15 with a float16 scale d (and, for Q4_1,
an offset m): Q4_0 means d * (q - 8), Q4_1 means d * q + m. torch's int4 matmul
(``_weight_int4pack_mm_for_cpu``) reads ``(q - 8) * scale + zero`` per group of 32, so the blocks map
onto it without requantizing: scale = d and zero = 0 (Q4_0) or zero = m + 8 d (Q4_1). The codes are the
file's own; the kernel keeps scale and zero in the activations' dtype, bfloat16, whose 8-bit mantissa
rounds the float16 d and m (`Int4Weight.dense` gives the weights as the kernel sees them, and
`rounding_error` how far they are from the file's).

Why only bfloat16 activations: on an AVX2 CPU the kernel with float32 (or float16) activations is several
times slower than a dense float32 matmul; with bfloat16 it beats both dense dtypes (engine_speed.py).

Where the CPU has AVX-512 VNNI or AVX2, the layers use our kernel instead (`block_kernels`): llama.cpp's
product, the activations rounded to int8 per block of 32, the file's scale and offset kept in float32.
`kernel` says which one a process uses and why; ``LOSSLESS_INT4_KERNEL=torch`` keeps torch's.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lossless.engine.weights import block_kernels
from lossless.errors import UsageError

GROUP = 32  # weights per Q4 block: the kernel's group size
ROWS = 16  # the kernel packs output rows in tiles of 16 (a GGUF layer with another row count stays dense)
Q4_TYPES = ("Q4_0", "Q4_1")
KERNELS = {
    "q8": "our kernel ({isa}), activations rounded to int8 per block of 32 as llama.cpp does",
    "torch": "torch's kernel, bfloat16 activations",
}


def kernel(asked: str | None = None) -> tuple[str, str]:
    """The int4 kernel to use ("q8" or "torch", `KERNELS`) and one line saying why. ``asked``: auto, q8 or
    torch; None reads ``LOSSLESS_INT4_KERNEL`` (default auto: ours where `block_kernels.available`)."""
    return _kernel(asked or os.environ.get("LOSSLESS_INT4_KERNEL") or "auto")


@functools.cache
def _kernel(asked: str) -> tuple[str, str]:
    if asked not in ("auto", *KERNELS):
        raise UsageError(f"int4 kernel {asked!r}: choose auto, q8 or torch (LOSSLESS_INT4_KERNEL)")
    if asked == "torch":
        return "torch", f"{KERNELS['torch']} (asked for)"
    why_not = block_kernels.available()
    if why_not is None:
        return "q8", KERNELS["q8"].format(isa=block_kernels.best())
    if asked == "q8":
        raise UsageError(f"int4 kernel q8 asked for, but {why_not}")
    return "torch", f"{KERNELS['torch']} (not ours: {why_not})"


@dataclass(frozen=True)
class Int4Weight:
    """One weight matrix [N, K] as 4-bit codes with a scale and zero per group of 32 along K."""

    codes: Tensor  # [N, K] uint8 in 0..15
    scale: Tensor  # [N, K / 32] float32 (the file's float16 d)
    zero: Tensor  # [N, K / 32] float32: the weight of code 8

    def map_rows(self, fn: Callable[[Tensor], Tensor]) -> Int4Weight:
        """The rows rearranged by ``fn``, applied alike to codes, scale and zero (un-permuting q/k,
        padding to the kernel's tiles)."""
        return Int4Weight(fn(self.codes), fn(self.scale), fn(self.zero))

    @staticmethod
    def cat(parts: list[Int4Weight]) -> Int4Weight:
        """Matrices stacked along the rows (the fused q|k|v and gate|up layers)."""
        return Int4Weight(*(torch.cat([getattr(p, f) for p in parts]) for f in ("codes", "scale", "zero")))

    def dense(self, dtype: torch.dtype = torch.float32, kernel: str = "torch") -> Tensor:
        """[N, K]: the weights ``kernel`` computes with (torch's rounds scale and zero to bfloat16)."""
        if kernel == "q8":
            return self._expand(self.scale.double(), self.zero.double()).to(dtype)
        scale, zero = (t.to(torch.bfloat16).float() for t in (self.scale, self.zero))
        return self._expand(scale, zero).to(dtype)

    def rounding_error(self) -> float:
        """Largest |weight the kernel uses - weight the file means|."""
        exact = self._expand(self.scale.double(), self.zero.double())
        return float((self.dense(torch.float64) - exact).abs().max())

    @staticmethod
    def quantize(weight: Tensor) -> Int4Weight:
        """A dense [N, K] weight (K a multiple of 32) rounded to 4 bits per group of 32: the group's
        minimum is code 0, its maximum code 15, the rest to nearest (Q4_1's recipe, for weights that
        come from no GGUF block, such as a draft head's)."""
        n, k = weight.shape
        groups = weight.detach().float().view(n, k // GROUP, GROUP)
        low = groups.amin(-1)
        scale = ((groups.amax(-1) - low) / 15).clamp_min(torch.finfo(torch.float32).tiny)
        codes = ((groups - low[..., None]) / scale[..., None]).round().clamp(0, 15).to(torch.uint8)
        return Int4Weight(codes.view(n, k), scale, low + 8 * scale)

    def _expand(self, scale: Tensor, zero: Tensor) -> Tensor:
        n, k = self.codes.shape
        q = self.codes.to(scale.dtype).view(n, k // GROUP, GROUP) - 8
        return (q * scale[..., None] + zero[..., None]).view(n, k)


class Int4Linear(nn.Module):
    """``nn.Linear`` without bias on an Int4Weight: x [..., K] (bfloat16) -> [..., N], on the kernel
    ``kernel_name`` asks for (`kernel`). Both kernels take rows in tiles of 16: another row count is padded
    with zero rows, cut from the output."""

    def __init__(self, weight: Int4Weight, kernel_name: str | None = None) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.codes.shape
        self.kernel = kernel(kernel_name)[0]
        # ours rounds and sums each activation row on its own, whatever the other rows (`block_kernels.cpp`):
        # a continuous batch's rows come out as alone (`batch.forward.row_invariant`); torch's, unknown
        self.row_invariant = self.kernel == "q8"
        if self.out_features % ROWS:
            pad = ROWS - self.out_features % ROWS
            weight = weight.map_rows(lambda t: F.pad(t, (0, 0, 0, pad)))
        self.packed: Tensor
        self.scales: Tensor
        if self.kernel == "q8":
            # ours reads a weight as scale * q + offset (torch's as (q - 8) * scale + zero)
            offset = (weight.zero.double() - 8 * weight.scale.double()).float()
            packed, scales = block_kernels.pack(weight.codes, weight.scale, offset)
            self.q4_linear = block_kernels.op()  # held: torch.compile traces the call, not the lookup
        else:
            packed = torch._convert_weight_to_int4pack_for_cpu(weight.codes.to(torch.int32), 1)
            both = torch.stack([weight.scale, weight.zero], dim=-1).transpose(0, 1)  # [K / 32, N, 2]
            scales = both.contiguous().to(torch.bfloat16)
        self.register_buffer("packed", packed, persistent=False)
        self.register_buffer("scales", scales, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, self.in_features)
        if self.kernel == "q8":
            y = self.q4_linear(flat, self.packed, self.scales)
        else:
            y = torch._weight_int4pack_mm_for_cpu(flat, self.packed, GROUP, self.scales)
        return y[:, : self.out_features].reshape(*x.shape[:-1], self.out_features)


def use_int4(model: nn.Module, weights: dict[str, Int4Weight], kernel_name: str | None = None) -> list[str]:
    """Swap each ``nn.Linear`` named in ``weights`` (``layers.0.attention.wqkv`` ...) for an Int4Linear
    on ``kernel_name`` (None: `kernel()`'s); the names swapped. The model must compute in bfloat16."""
    swapped = []
    for name, weight in weights.items():
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        old = getattr(parent, attr)
        if not isinstance(old, nn.Linear) or tuple(old.weight.shape) != tuple(weight.codes.shape):
            raise ValueError(f"{name}: no linear layer of shape {tuple(weight.codes.shape)} to replace")
        setattr(parent, attr, Int4Linear(weight, kernel_name))
        swapped.append(name)
    return swapped


class Q8Linear(nn.Module):
    """The output layer on the file's own Q8_0 blocks (a float16 scale d and 32 int8 codes q per block: the
    weight d * q) by our 8-bit kernel: the activations rounded to int8 per block of 32, int8 times int8
    summed in int32, as llama.cpp computes its Q8_0 output layer. x [..., K] (bfloat16) -> [..., N].

    SmolLM2's output layer (49152 x 576, tied to the embedding) on 2 AVX-512 VNNI cores: 0.60-0.78 ms a
    token against 1.11-1.39 for oneDNN's packed bfloat16 weight, 0.47-0.82 against 0.94-1.36 for four rows
    (half the bytes read; `benchmarks/output_layer.py`). The weights are the file's exactly (bfloat16
    rounds d * q to 8 bits of mantissa); the int8 activations move a logit by ~0.6% of the largest,
    bfloat16's weights by ~0.3%."""

    def __init__(self, weight: Tensor, codes: Tensor, scale: Tensor) -> None:
        super().__init__()
        self.out_features, self.in_features = codes.shape
        self.row_invariant = True  # our kernel: each row rounded and summed on its own, as Int4Linear's
        self.weight = weight  # the dense weight (tied to the embedding): its dtype, and for reference
        pad = -self.out_features % ROWS
        unsigned = (F.pad(codes, (0, 0, 0, pad)).to(torch.int16) + 128).to(torch.uint8)  # q + 128: 0..255
        d = F.pad(scale.float(), (0, 0, 0, pad))
        packed, scales = block_kernels.pack8(unsigned, d, -128 * d)  # d * (q + 128) - 128 d
        self.packed: Tensor
        self.scales: Tensor
        self.register_buffer("packed", packed, persistent=False)
        self.register_buffer("scales", scales, persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        y = block_kernels.q8_linear(x.reshape(-1, self.in_features), self.packed, self.scales)
        return y[:, : self.out_features].reshape(*x.shape[:-1], self.out_features)


def use_q8_output(model: nn.Module, q8: tuple[Tensor, Tensor] | None, kernel_name: str | None = None) -> bool:
    """Swap ``model.output`` for a Q8Linear on the file's Q8_0 blocks ``q8`` (codes [N, K] int8, d [N, K /
    32]) where the int4 layers run on our kernel (`kernel`) built for AVX-512 VNNI; False, and nothing
    changed, elsewhere."""
    layer = getattr(model, "output", None)
    if q8 is None or not isinstance(layer, nn.Linear) or tuple(layer.weight.shape) != tuple(q8[0].shape):
        return False
    if kernel(kernel_name)[0] != "q8" or block_kernels.best() != "avx512":
        return False
    model.output = Q8Linear(layer.weight, *q8)
    return True
