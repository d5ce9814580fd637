"""4-bit weights straight from a GGUF's Q4_0 / Q4_1 blocks, multiplied by torch's int4 CPU kernel.

A Q4 block holds 32 weights of one row as 4-bit codes q in 0..15 with a float16 scale d (and, for Q4_1,
an offset m): Q4_0 means d * (q - 8), Q4_1 means d * q + m. torch's int4 matmul
(``_weight_int4pack_mm_for_cpu``) reads ``(q - 8) * scale + zero`` per group of 32, so the blocks map
onto it without requantizing: scale = d and zero = 0 (Q4_0) or zero = m + 8 d (Q4_1). The codes are the
file's own; the kernel keeps scale and zero in the activations' dtype, bfloat16, whose 8-bit mantissa
rounds the float16 d and m (`Int4Weight.dense` gives the weights as the kernel sees them, and
`rounding_error` how far they are from the file's).

Why only bfloat16 activations: on an AVX2 CPU the kernel with float32 (or float16) activations is several
times slower than a dense float32 matmul; with bfloat16 it beats both dense dtypes (engine_speed.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

GROUP = 32  # weights per Q4 block: the kernel's group size
ROWS = 16  # the kernel packs output rows in tiles of 16 (a GGUF layer with another row count stays dense)
Q4_TYPES = ("Q4_0", "Q4_1")


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

    def dense(self, dtype: torch.dtype = torch.float32) -> Tensor:
        """[N, K]: the weights the kernel computes with (scale and zero rounded to bfloat16)."""
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
    """``nn.Linear`` without bias on an Int4Weight: x [..., K] (bfloat16) -> [..., N]. The kernel packs
    rows in tiles of 16: another row count is padded with zero rows, cut from the output."""

    def __init__(self, weight: Int4Weight) -> None:
        super().__init__()
        self.out_features, self.in_features = weight.codes.shape
        if self.out_features % ROWS:
            pad = ROWS - self.out_features % ROWS
            weight = weight.map_rows(lambda t: F.pad(t, (0, 0, 0, pad)))
        packed = torch._convert_weight_to_int4pack_for_cpu(weight.codes.to(torch.int32), 1)
        scales = torch.stack([weight.scale, weight.zero], dim=-1).transpose(0, 1)  # [K / 32, N, 2]
        self.packed: Tensor
        self.scales_and_zeros: Tensor
        self.register_buffer("packed", packed, persistent=False)
        self.register_buffer("scales_and_zeros", scales.contiguous().to(torch.bfloat16), persistent=False)

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, self.in_features)
        y = torch._weight_int4pack_mm_for_cpu(flat, self.packed, GROUP, self.scales_and_zeros)
        return y[:, : self.out_features].reshape(*x.shape[:-1], self.out_features)


def use_int4(model: nn.Module, weights: dict[str, Int4Weight]) -> list[str]:
    """Swap each ``nn.Linear`` named in ``weights`` (``layers.0.attention.wqkv`` ...) for an Int4Linear;
    the names swapped. The model must compute in bfloat16."""
    swapped = []
    for name, weight in weights.items():
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name)
        old = getattr(parent, attr)
        if not isinstance(old, nn.Linear) or tuple(old.weight.shape) != tuple(weight.codes.shape):
            raise ValueError(f"{name}: no linear layer of shape {tuple(weight.codes.shape)} to replace")
        setattr(parent, attr, Int4Linear(weight))
        swapped.append(name)
    return swapped
