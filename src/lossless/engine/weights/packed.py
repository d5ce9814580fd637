"""A bfloat16 linear layer on a weight that oneDNN packed once, for CPUs that compute in bfloat16.

``F.linear`` in bfloat16 hands oneDNN the weight in PyTorch's row-major layout at every call; packed once
into oneDNN's own blocked layout (``torch.ops.mkldnn._reorder_linear_weight``, as inductor's freezing
does), the same product runs several times faster on a CPU with bfloat16 instructions. Measured on
SmolLM2's output layer (49152 x 576) on 2 AVX-512-BF16 cores: 3.7 ms a token as is, 1.25 ms packed;
5.9 against 1.9 ms for the three rows a speculative step verifies. The sums are the same products in
another order, so the logits differ from ``F.linear``'s by float32 rounding; every forward of a model
goes through the one layer, so its plain and speculative decoding still compute alike.

Only the output layer is packed: the int4 model's one dense layer, and the largest of a bfloat16
model's. A packed weight is not a tensor torch.compile traces, so `model.Transformer` applies its
output layer outside the compiled graph.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lossless.engine.cpu import native_bfloat16


def can_pack() -> bool:
    """oneDNN is in this torch build and the CPU computes bfloat16 natively (where it does not, a
    bfloat16 matmul is slow either way and the engine processes prompts in float32)."""
    return torch.backends.mkldnn.is_available() and bool(native_bfloat16())


class PackedLinear(nn.Module):
    """``nn.Linear`` without bias, bfloat16, its weight also held packed: x [..., K] -> [..., N]."""

    def __init__(self, weight: Tensor) -> None:
        super().__init__()
        assert weight.dtype == torch.bfloat16 and weight.dim() == 2
        self.out_features, self.in_features = weight.shape
        self.weight = weight  # the original (tied to the embedding), for its dtype and for reference
        self.packed = torch.ops.mkldnn._reorder_linear_weight(weight.detach(), 1)

    def forward(self, x: Tensor) -> Tensor:
        flat = x.reshape(-1, self.in_features)
        y = torch.ops.mkldnn._linear_pointwise(flat, self.packed, None, "none", [None], "")
        return y.view(*x.shape[:-1], self.out_features)


def pack_output(model: nn.Module) -> bool:
    """Swap ``model.output`` (a bfloat16 ``nn.Linear`` without bias) for a PackedLinear; False, and
    nothing changed, where the layer is not one or `can_pack` says no."""
    layer = getattr(model, "output", None)
    if not isinstance(layer, nn.Linear) or layer.bias is not None or layer.weight.dtype != torch.bfloat16:
        return False
    if not can_pack():
        return False
    model.output = PackedLinear(layer.weight)
    return True
