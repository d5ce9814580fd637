"""`model.attend`: grouped-query attention, bfloat16 through folded query heads, equal to PyTorch's own
grouped-query attention for every mask shape the engine uses."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from lossless.engine.model.transformer import attend


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
@pytest.mark.parametrize("seqlen", [1, 2, 5])
@pytest.mark.parametrize("batched", [False, True], ids=["mask [T, L]", "mask [B, 1, T, L]"])
def test_attend_equals_grouped_query_attention(dtype: torch.dtype, seqlen: int, batched: bool) -> None:
    gen = torch.Generator().manual_seed(seqlen)
    bsz, n_heads, n_kv, length, dim = (3 if batched else 1), 6, 2, 40, 16
    q = torch.randn(bsz, n_heads, seqlen, dim, generator=gen).to(dtype)
    k, v = (torch.randn(bsz, n_kv, length, dim, generator=gen).to(dtype) for _ in range(2))
    mask = torch.rand(seqlen, length, generator=gen) > 0.4  # any pattern: causal, tree, padded
    mask[:, -1] = True  # every query sees a key
    if batched:
        mask = mask[None, None] & (torch.arange(length) >= torch.tensor([0, 3, 9])[:, None])[:, None, None, :]
    want = F.scaled_dot_product_attention(q.double(), k.double(), v.double(), attn_mask=mask, enable_gqa=True)
    got = attend(q, k, v, mask)
    assert got.dtype == dtype and got.shape == want.shape
    tolerance = 2e-2 if dtype == torch.bfloat16 else 1e-5
    assert torch.allclose(got.double(), want, atol=tolerance), float((got.double() - want).abs().max())
