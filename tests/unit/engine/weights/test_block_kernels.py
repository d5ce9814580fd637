"""Our int4 kernel (`block_kernels`): llama.cpp's Q4 x Q8 product. Against a float64 emulation of that
product (activations rounded to int8 per block of 32, the file's weights exactly) it agrees to float32
rounding, for every row count and both Q4 types; it is built once into $LOSSLESS_HOME/kernels with
nothing half-written; `quant.kernel` says which kernel serves and refuses a bad choice by name."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
import torch

from lossless.engine import cpu
from lossless.engine.model.transformer import apply_rope
from lossless.engine.weights import block_kernels
from lossless.engine.weights.gguf import q4_weight, q8_weight
from lossless.engine.weights.quant import Int4Linear, Int4Weight, Q8Linear, kernel
from lossless.errors import UsageError

Q = gguf.GGMLQuantizationType
WHY_NOT = block_kernels.available()
needs_kernel = pytest.mark.skipif(WHY_NOT is not None, reason=f"our int4 kernel: {WHY_NOT}")
# every instruction set this CPU runs (an AVX-512 CPU runs the AVX2 build too), each built and loaded
HERE = [isa for isa, (needs, _) in block_kernels.ISAS.items() if set(needs) <= cpu.flags()]
BUILT = [isa for isa in HERE if block_kernels.load_kernels(isa) is None]
pytestmark = pytest.mark.usefixtures("torch_one_thread")


def file_weight(kind: Q, rows: int, cols: int, seed: int = 0) -> Int4Weight:
    values = np.random.default_rng(seed).normal(0, 0.3, (rows, cols)).astype(np.float32)
    raw = gguf.quants.quantize(values, kind).reshape(-1, gguf.GGML_QUANT_SIZES[kind][1])
    return q4_weight(kind.name, raw, (rows, cols))


def q8_product(x: torch.Tensor, weight: Int4Weight | torch.Tensor) -> torch.Tensor:
    """The product the kernel means, in float64: each block of 32 activations rounded to int8 as the
    kernel rounds them (scale amax / 127, codes x * (1 / scale) to nearest, ties to even, in float32),
    times the file's weights (dense float64, or an Int4Weight's)."""
    m, k = x.shape
    blocks = x.float().view(m, k // 32, 32)
    scale = blocks.abs().amax(-1, keepdim=True) / 127
    inverse = torch.where(scale > 0, 1 / scale, torch.zeros_like(scale))
    codes = (blocks * inverse).round()
    dense = weight.dense(torch.float64, "q8") if isinstance(weight, Int4Weight) else weight
    return (codes.double() * scale.double()).view(m, k) @ dense.T


@pytest.mark.parametrize("isa", BUILT)
@pytest.mark.parametrize("kind", [Q.Q4_0, Q.Q4_1])
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 9])
def test_the_kernel_is_llama_cpps_product_to_float32_rounding(kind: Q, rows: int, isa: str) -> None:
    weight = file_weight(kind, 48, 96, seed=rows)
    packed = block_kernels.pack(weight.codes, weight.scale, weight.zero - 8 * weight.scale)

    def layer(x: torch.Tensor) -> torch.Tensor:
        return block_kernels.q4_linear(x, *packed, isa=isa)

    x = torch.randn(rows, 96, generator=torch.Generator().manual_seed(rows))
    x[0, 32:64] = 0  # an all-zero block: scale 0, no division by it
    want = q8_product(x, weight)
    got = layer(x)
    assert got.dtype == torch.float32 and got.shape == (rows, 48)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    # bfloat16 in, bfloat16 out: the same sums, rounded once at the end
    x16 = x.to(torch.bfloat16)
    want16 = q8_product(x16.float(), weight)
    torch.testing.assert_close(layer(x16).double(), want16, rtol=8e-3, atol=1e-5 * float(want16.abs().max()))
    # and near the exact product: int8 activations cost about half a percent
    exact = x.double() @ weight.dense(torch.float64, "q8").T
    assert float((got.double() - exact).norm() / exact.norm()) < 0.02


@pytest.mark.skipif("avx512" not in BUILT, reason="the 8-bit kernel is built for AVX-512 VNNI only")
@pytest.mark.parametrize("rows", [1, 2, 3, 4, 5, 9])
def test_the_8bit_kernel_is_llama_cpps_q8_0_product(rows: int) -> None:
    """The output layer on a file's Q8_0 blocks (`Q8Linear`): the same product for 8-bit codes, the
    file's weights d * q exactly, 50 output rows (not a multiple of the kernel's 16)."""
    values = np.random.default_rng(rows).normal(0, 0.3, (50, 96)).astype(np.float32)
    raw = gguf.quants.quantize(values, Q.Q8_0).reshape(-1, gguf.GGML_QUANT_SIZES[Q.Q8_0][1])
    codes, d = q8_weight(raw, (50, 96))
    exact = (codes.double().view(50, 3, 32) * d.double()[..., None]).view(50, 96)
    layer = Q8Linear(exact.to(torch.bfloat16), codes, d)
    x = torch.randn(rows, 96, generator=torch.Generator().manual_seed(rows))
    x[0, 32:64] = 0  # an all-zero block
    want = q8_product(x, exact)
    got = layer(x)
    assert got.dtype == torch.float32 and got.shape == (rows, 50)
    torch.testing.assert_close(got.double(), want, rtol=1e-5, atol=1e-5 * float(want.abs().max()))
    assert float((got.double() - x.double() @ exact.T).norm() / want.norm()) < 0.02  # int8 activations


# ---- attention row by row (the continuous batch's decoding rows) ----------------------------------------

SLOTS, KV_HEADS, HEADS, POSITIONS, DIM = 3, 3, 9, 40, 64
# (slot, seen, extra): a pending token's row sees its slot's prefix; a tree node, the cache before its
# draft and then its ancestors, in path order (not increasing: the kernel keeps the order it is given)
ROWS = [(0, 17, []), (2, 1, []), (2, 30, []), (1, 12, [15, 13, 20]), (0, 40, []), (1, 0, [3])]


def attention_inputs(dtype: torch.dtype, seed: int = 0) -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(seed)
    keys, values = (torch.randn(SLOTS, KV_HEADS, POSITIONS, DIM, generator=g).to(dtype) for _ in range(2))
    q = torch.randn(len(ROWS), HEADS, DIM, generator=g).to(dtype)
    return q, keys, values


def row_indices(rows: list[tuple[int, int, list[int]]]) -> tuple[torch.Tensor, ...]:
    offsets = [0]
    for _, _, extra in rows:
        offsets.append(offsets[-1] + len(extra))
    extra = [p for _, _, e in rows for p in e]
    return tuple(
        torch.tensor(v, dtype=torch.long)
        for v in ([r[0] for r in rows], [r[1] for r in rows], offsets, extra)
    )


@pytest.mark.parametrize("isa", BUILT)
def test_a_key_read_as_an_ancestor_gives_the_bits_it_gives_in_the_prefix(isa: str) -> None:
    """A tree node sees the cache before its draft, then its ancestors; the same keys seen as a prefix (the
    node's token fed alone a step later) must give the same bits, or a speculating sequence's greedy
    tokens would differ from plain decoding's. Measured before the fix: 3 to 6 of these 400 moved."""
    g = torch.Generator().manual_seed(0)
    moved = 0
    for _ in range(200):
        keys, values = (torch.randn(1, KV_HEADS, 64, DIM, generator=g).bfloat16() for _ in range(2))
        n = int(torch.randint(3, 60, (1,), generator=g))
        q = torch.randn(1, HEADS, DIM, generator=g).bfloat16()
        prefix = block_kernels.rows_attention(q, keys, values, *row_indices([(0, n, [])]), isa=isa)
        for ancestors in ([n - 2, n - 1], [n - 1]):
            rows = [(0, n - len(ancestors), ancestors)]
            tree = block_kernels.rows_attention(q, keys, values, *row_indices(rows), isa=isa)
            moved += not torch.equal(prefix, tree)
    assert moved == 0


@pytest.mark.parametrize("isa", BUILT)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_rows_attention_is_each_rows_softmax_over_the_keys_it_sees(dtype: torch.dtype, isa: str) -> None:
    q, keys, values = attention_inputs(dtype)
    got = block_kernels.rows_attention(q, keys, values, *row_indices(ROWS), isa=isa)
    assert got.dtype == dtype and got.shape == q.shape
    for r, (slot, seen, extra) in enumerate(ROWS):
        at = [*range(seen), *extra]
        k, v = keys[slot][:, at].double(), values[slot][:, at].double()  # [Hkv, L, D]
        group = HEADS // KV_HEADS  # query head h reads kv head h // group
        scores = torch.einsum("hd,hld->hl", q[r].double(), k.repeat_interleave(group, 0)) / DIM**0.5
        want = torch.einsum("hl,hld->hd", scores.softmax(-1), v.repeat_interleave(group, 0))
        tolerance = 1e-5 if dtype == torch.float32 else 8e-3  # bfloat16: the result rounded once
        torch.testing.assert_close(got[r].double(), want, rtol=tolerance, atol=tolerance)


@needs_kernel
def test_a_rows_bits_depend_on_its_own_keys_only() -> None:
    """Alone, among others in any order, with other slots and the positions it does not see overwritten:
    the same bits. Its own keys changed: another result."""
    q, keys, values = attention_inputs(torch.bfloat16)
    together = block_kernels.rows_attention(q, keys, values, *row_indices(ROWS))
    for r, row in enumerate(ROWS):
        alone = block_kernels.rows_attention(q[r : r + 1], keys, values, *row_indices([row]))
        assert torch.equal(alone[0], together[r])
    order = [4, 1, 5, 0, 3, 2]
    shuffled = block_kernels.rows_attention(q[order], keys, values, *row_indices([ROWS[i] for i in order]))
    assert torch.equal(shuffled, together[order])
    slot, seen, extra = ROWS[3]
    others_k, others_v = keys.clone(), values.clone()
    unseen = [p for p in range(POSITIONS) if p >= seen and p not in extra]
    for t in (others_k, others_v):
        t[[s for s in range(SLOTS) if s != slot]] = 7.0
        t[slot][:, unseen] = -7.0
    moved = block_kernels.rows_attention(q[3:4], others_k, others_v, *row_indices([ROWS[3]]))
    assert torch.equal(moved[0], together[3])
    others_k[slot][:, extra[0]] += 1.0
    changed = block_kernels.rows_attention(q[3:4], others_k, others_v, *row_indices([ROWS[3]]))
    assert not torch.equal(changed[0], together[3])


@needs_kernel
def test_rows_attention_refuses_a_row_outside_the_cache() -> None:
    q, keys, values = attention_inputs(torch.float32)
    for bad, says in (
        ([(0, POSITIONS + 1, [])], "outside the cache"),
        ([(SLOTS, 3, [])], "outside the cache"),
        ([(0, 3, [POSITIONS])], "outside the cache"),
        ([(0, 0, [])], "sees no key"),
    ):
        with pytest.raises(RuntimeError, match=says):
            block_kernels.rows_attention(q[:1], keys, values, *row_indices(bad))
    with pytest.raises(RuntimeError, match="one dtype"):
        block_kernels.rows_attention(q[:1].double(), keys, values, *row_indices(ROWS[:1]))


def rope_inputs(dtype: torch.dtype, rows: int = 7, seed: int = 0) -> tuple[torch.Tensor, ...]:
    """qkv [rows, (H + 2 Hkv) D], cos and sin [rows, D] as the model's tables hold them (each row rotated
    for its position), the rows' slots and positions."""
    g = torch.Generator().manual_seed(seed)
    qkv = torch.randn(rows, (HEADS + 2 * KV_HEADS) * DIM, generator=g).to(dtype)
    positions = torch.randint(0, POSITIONS, (rows,), generator=g)
    slots = torch.randint(0, SLOTS, (rows,), generator=g)
    angles = positions[:, None].double() / 10000 ** (torch.arange(DIM // 2).double() / (DIM // 2))
    angles = torch.cat([angles, angles], dim=-1)  # [rows, D]: rotate_half's two halves share an angle
    return qkv, angles.cos().to(dtype), angles.sin().to(dtype), slots, positions


@pytest.mark.parametrize("isa", BUILT)
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_norm_rows_is_the_rms_norm_in_float32_rounded_once(dtype: torch.dtype, isa: str) -> None:
    g = torch.Generator().manual_seed(1)
    x = (torch.randn(9, 576, generator=g) * 3).to(dtype)
    weight = torch.rand(576, generator=g).to(dtype)
    got = block_kernels.norm_rows(x, weight, 1e-5, isa=isa)
    assert got.dtype == dtype and got.shape == x.shape
    exact = x.double() * torch.rsqrt(x.double().pow(2).mean(-1, keepdim=True) + 1e-5) * weight.double()
    tolerance = 1e-6 if dtype == torch.float32 else 4e-3  # bfloat16: the result rounded once (half an ulp)
    torch.testing.assert_close(got.double(), exact, rtol=tolerance, atol=1e-6)
    # the same bits alone as beside the others
    for r in range(len(x)):
        assert torch.equal(block_kernels.norm_rows(x[r : r + 1], weight, 1e-5, isa=isa)[0], got[r])


@pytest.mark.parametrize("isa", BUILT)
@pytest.mark.parametrize(
    ("dtype", "cache"),
    [(torch.bfloat16, torch.bfloat16), (torch.float32, torch.bfloat16), (torch.float32, torch.float32)],
)
def test_rope_rows_rotates_as_apply_rope_and_fills_each_rows_own_place(
    dtype: torch.dtype, cache: torch.dtype, isa: str
) -> None:
    """Queries and keys rotated as `transformer.apply_rope` rotates them (in float32, rounded once); each
    row's key (rounded to its own dtype, then the cache's) and value land at its slot and position, nothing
    else in the cache moves; a row alone gets the same bits."""
    qkv, cos, sin, slots, positions = rope_inputs(dtype)
    keys = torch.full((SLOTS, KV_HEADS, POSITIONS, DIM), 7.0, dtype=cache)
    values = keys.clone()
    q = block_kernels.rope_rows(qkv, cos, sin, keys, values, slots, positions, HEADS, isa=isa)
    assert q.dtype == dtype and q.shape == (len(qkv), HEADS, DIM)
    heads = qkv.double().view(len(qkv), HEADS + 2 * KV_HEADS, DIM).transpose(0, 1)[:, None]  # [H', 1, N, D]
    turned = apply_rope(heads, cos.double(), sin.double())[:, 0].transpose(0, 1)  # [N, H', D]
    tolerance = 1e-6 if dtype == torch.float32 else 4e-3
    torch.testing.assert_close(q.double(), turned[:, :HEADS], rtol=tolerance, atol=1e-6)
    written = torch.zeros(SLOTS, POSITIONS, dtype=torch.bool)
    for r, (slot, at) in enumerate(zip(slots.tolist(), positions.tolist(), strict=True)):
        written[slot, at] = True
        key = (
            turned[r, HEADS : HEADS + KV_HEADS].to(dtype).to(cache)
        )  # as alone: its own dtype, then the cache's
        torch.testing.assert_close(keys[slot, :, at].double(), key.double(), rtol=tolerance, atol=1e-6)
        value = qkv[r].view(HEADS + 2 * KV_HEADS, DIM)[HEADS + KV_HEADS :].to(cache)
        assert torch.equal(values[slot, :, at], value)
    assert bool((keys.transpose(1, 2)[~written] == 7.0).all()) and bool(
        (values.transpose(1, 2)[~written] == 7.0).all()
    )
    for r in range(len(qkv)):
        alone = block_kernels.rope_rows(
            qkv[r : r + 1],
            cos[r : r + 1],
            sin[r : r + 1],
            keys,
            values,
            slots[r : r + 1],
            positions[r : r + 1],
            HEADS,
            isa=isa,
        )
        assert torch.equal(alone[0], q[r])


@needs_kernel
def test_rope_rows_refuses_a_row_outside_the_cache_and_a_width_it_cannot_split() -> None:
    qkv, cos, sin, slots, positions = rope_inputs(torch.float32, rows=1)
    keys = torch.zeros(SLOTS, KV_HEADS, POSITIONS, DIM)
    for bad_slot, bad_position in ((SLOTS, 0), (0, POSITIONS), (-1, 0)):
        with pytest.raises(RuntimeError, match="outside the cache"):
            block_kernels.rope_rows(
                qkv,
                cos,
                sin,
                keys,
                keys.clone(),
                torch.tensor([bad_slot]),
                torch.tensor([bad_position]),
                HEADS,
            )
    with pytest.raises(RuntimeError, match="width"):
        block_kernels.rope_rows(qkv, cos, sin, keys, keys.clone(), slots, positions, HEADS + 1)


@pytest.mark.parametrize("isa", BUILT)
def test_the_softmax_s_exponential_is_within_an_ulp_of_e_to_the_x(isa: str) -> None:
    """Our own e^x (not the C library's: the same bits 16 lanes at once and one at a time, on any machine)
    over 4 million float32s evenly spread in bit pattern over [-104, 0], and its ends: at most one unit in
    the last place from e^x rounded once (measured over every float32 of [-105, 1]: 0.006% one ulp off
    glibc's expf, none further)."""
    x = spread_below_zero()
    got = block_kernels.softmax_exp(x, isa=isa)
    want = torch.exp(x.double()).float()
    assert (got.view(torch.int32) - want.view(torch.int32)).abs().max() <= 1
    assert block_kernels.softmax_exp(torch.tensor([-105.0, -float("inf")]), isa=isa).tolist() == [0.0, 0.0]


def spread_below_zero() -> torch.Tensor:
    """~4 million float32s from -0 to -104, evenly spread in bit pattern, then a few special ones."""
    low = torch.tensor([-104.0]).view(torch.int32).item() & 0xFFFFFFFF
    patterns = torch.arange(0x80000000, low + 1, (low - 0x80000000) // 2**22, dtype=torch.int64)
    x = (patterns - 2**32).to(torch.int32).view(torch.float32)
    return torch.cat([x, torch.tensor([0.0, -0.0, -1e-45, -103.97, -87.34, -0.5])])


@pytest.mark.skipif(len(BUILT) < 2, reason="one instruction set here: nothing to compare")
def test_every_instruction_set_gives_the_same_bits() -> None:
    """Integer sums are exact and the float steps run in the same order per row: an AVX2 machine
    serves the numerics an AVX-512 one does."""
    weight = Int4Weight.quantize(torch.randn(96, 576, generator=torch.Generator().manual_seed(2)))
    packed = block_kernels.pack(weight.codes, weight.scale, weight.zero - 8 * weight.scale)
    for rows in (1, 3, 40):
        x = torch.randn(rows, 576).to(torch.bfloat16)
        outs = [block_kernels.q4_linear(x, *packed, isa=isa) for isa in BUILT]
        assert all(torch.equal(outs[0], out) for out in outs[1:])
    # the row-wise pieces of a layer: sums in fixed lanes, the same whatever the vector width
    x = torch.randn(5, 576).to(torch.bfloat16)
    norms = [
        block_kernels.norm_rows(x, torch.rand(576, generator=torch.Generator().manual_seed(3)), 1e-5, isa=isa)
        for isa in BUILT
    ]
    assert all(torch.equal(norms[0], out) for out in norms[1:])
    qkv, cos, sin, slots, positions = rope_inputs(torch.bfloat16)
    cache = torch.zeros(SLOTS, KV_HEADS, POSITIONS, DIM, dtype=torch.bfloat16)
    ropes = [
        block_kernels.rope_rows(qkv, cos, sin, cache.clone(), cache.clone(), slots, positions, HEADS, isa=isa)
        for isa in BUILT
    ]
    assert all(torch.equal(ropes[0], out) for out in ropes[1:])
    # attention: AVX-512 sums 16 keys side by side (head sizes 64 and 128), AVX2 one key at a time
    for dtype in (torch.bfloat16, torch.float32):
        for dim in (64, 128, 80):
            g = torch.Generator().manual_seed(dim)
            keys, values = (
                torch.randn(SLOTS, KV_HEADS, POSITIONS, dim, generator=g).to(dtype) for _ in range(2)
            )
            q = (3 * torch.randn(len(ROWS), HEADS, dim, generator=g)).to(dtype)
            outs = [
                block_kernels.rows_attention(q, keys, values, *row_indices(ROWS), isa=isa) for isa in BUILT
            ]
            assert all(torch.equal(outs[0], out) for out in outs[1:]), (dtype, dim)
    # the softmax's e^x, 16 lanes at once on AVX-512 and one value at a time on AVX2
    exps = [block_kernels.softmax_exp(spread_below_zero(), isa=isa) for isa in BUILT]
    assert all(torch.equal(exps[0].view(torch.int32), out.view(torch.int32)) for out in exps[1:])


@needs_kernel
def test_packing_keeps_every_code_scale_and_offset_in_place() -> None:
    """Unpack the kernel's layout by its own description and get the weights back."""
    weight = file_weight(Q.Q4_1, 32, 64)
    offset = weight.zero - 8 * weight.scale
    packed, scales = block_kernels.pack(weight.codes, weight.scale, offset)
    g, b = 32 // 16, 64 // 32
    assert packed.shape == (g, b, 256) and scales.shape == (g, b, 2, 16)
    chunks = packed.view(g, b, 4, 16, 4)  # group, block, chunk j, row r, byte t
    low, high = chunks & 0x0F, chunks >> 4  # columns 4j + t and 16 + 4j + t
    cols = torch.cat([low.permute(0, 3, 1, 2, 4), high.permute(0, 3, 1, 2, 4)], dim=3)  # g, r, b, 2x4, 4
    assert torch.equal(cols.reshape(32, 64), weight.codes)
    assert torch.equal(scales[:, :, 0].permute(0, 2, 1).reshape(32, 2), weight.scale)
    assert torch.equal(scales[:, :, 1].permute(0, 2, 1).reshape(32, 2), offset)


@needs_kernel
def test_rows_off_the_tiles_are_padded_and_a_mismatch_is_refused() -> None:
    weight = Int4Weight.quantize(torch.randn(37, 64, generator=torch.Generator().manual_seed(1)))
    layer = Int4Linear(weight, "q8")
    x = torch.randn(2, 3, 64)
    got = layer(x)
    assert got.shape == (2, 3, 37)
    torch.testing.assert_close(
        got.view(6, 37).double(), q8_product(x.view(6, 64), weight), rtol=1e-5, atol=1e-5
    )
    with pytest.raises(RuntimeError, match="x has 32 columns, the weights 64"):
        block_kernels.q4_linear(torch.randn(1, 32), layer.packed, layer.scales)
    assert BUILT == HERE and HERE[0] == block_kernels.best()  # every instruction set here built


@needs_kernel
@pytest.mark.slow  # one graph compiled with inductor's C++ wrapper
def test_a_compiled_graph_calls_the_kernel() -> None:
    weight = file_weight(Q.Q4_0, 64, 128)
    layer = Int4Linear(weight, "q8")
    compiled = torch.compile(lambda x: torch.relu(layer(x)) * 2, dynamic=True, options={"cpp_wrapper": True})
    for rows in (1, 3):
        x = torch.randn(rows, 128).to(torch.bfloat16)
        assert torch.equal(compiled(x), torch.relu(layer(x)) * 2)


@needs_kernel
@pytest.mark.slow  # compiles the C++ file (~15 s on 2 cores)
def test_the_build_lands_whole_in_the_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    isa = block_kernels.best()
    assert isa is not None
    monkeypatch.setenv("LOSSLESS_HOME", str(tmp_path))
    library = block_kernels._build("g++", isa)
    assert library.parent == tmp_path / "kernels" and library.stat().st_size > 0
    assert [p.name for p in library.parent.iterdir()] == [library.name]  # no temporary folder left
    assert block_kernels._build("g++", isa) == library  # the second time: found, not rebuilt
    monkeypatch.setenv("LOSSLESS_HOME", str(tmp_path / "other"))
    with pytest.raises(Exception, match=r"no-such-compiler|No such file"):
        block_kernels._build("no-such-compiler", isa)
    assert not any((tmp_path / "other" / "kernels").iterdir())


def test_the_kernel_choice_is_said_and_a_bad_one_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    assert kernel("torch") == ("torch", "torch's kernel, bfloat16 activations (asked for)")
    name, why = kernel("auto")
    assert name == ("q8" if WHY_NOT is None else "torch")
    assert WHY_NOT is None or WHY_NOT in why
    with pytest.raises(UsageError, match="int4 kernel 'fast': choose auto, q8 or torch"):
        kernel("fast")
    monkeypatch.setenv("LOSSLESS_INT4_KERNEL", "torch")
    assert kernel(None)[0] == "torch"
    assert Int4Linear(file_weight(Q.Q4_0, 16, 32)).kernel == "torch"
