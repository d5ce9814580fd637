"""The output layer on oneDNN's packed bfloat16 weight (`engine.weights.packed`): the same product as
``F.linear`` up to float32 rounding, used only where it applies, and one layer for every forward."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from lossless.engine.model.args import TINY
from lossless.engine.model.transformer import Transformer
from lossless.engine.weights.packed import PackedLinear, can_pack, pack_output

needs_packing = pytest.mark.skipif(
    not can_pack(), reason="this CPU or torch build has no packed bfloat16 path"
)


@needs_packing
@pytest.mark.parametrize("rows", [1, 3, 9])
def test_packed_linear_is_the_same_product(rows: int) -> None:
    torch.manual_seed(0)
    weight = (torch.randn(1000, 64) * 0.1).to(torch.bfloat16)
    x = torch.randn(2, rows, 64).to(torch.bfloat16)
    exact = x.double() @ weight.double().T  # the products of the same bfloat16 numbers, summed exactly
    packed = PackedLinear(weight)(x)
    assert packed.shape == (2, rows, 1000) and packed.dtype == torch.bfloat16
    # both round the float32 sum to bfloat16 once: within a bfloat16 step of the exact sum
    assert torch.allclose(packed.double(), exact, rtol=2**-7, atol=1e-3)
    assert torch.allclose(packed.double(), F.linear(x, weight).double(), rtol=2**-7, atol=1e-3)


def test_only_a_bfloat16_output_layer_is_packed() -> None:
    model = Transformer(TINY)  # float32
    assert not pack_output(model) and type(model.output) is nn.Linear
    model = model.to(torch.bfloat16)
    assert pack_output(model) == can_pack()
    assert isinstance(model.output, PackedLinear) == can_pack()


@needs_packing
def test_a_packed_model_gives_its_logits_and_hidden_states_through_one_layer() -> None:
    torch.manual_seed(0)
    model = Transformer(TINY).to(torch.bfloat16).eval()
    tied = model.tok_embeddings.weight
    assert pack_output(model) and model.output.weight is tied  # still tied: dtype and the embedding
    model.setup_cache(64)
    tokens, pos = torch.tensor([[1, 5, 9, 2]]), torch.arange(4)
    with torch.inference_mode():
        logits = model(tokens, pos)
        hidden = model(tokens, pos, return_hidden=True)
        assert torch.equal(logits, model.output(hidden))  # speculation's verify takes this road
        dense = F.linear(hidden, tied)
    assert torch.allclose(logits.float(), dense.float(), rtol=2**-7, atol=2e-2)
