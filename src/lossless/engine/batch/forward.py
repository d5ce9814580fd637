"""Continuous batching's forward pass, gpt-fast style: several sequences at once, each at its own position,
each with a KV cache slot of its own, their new tokens packed into one row.

    spans   one per sequence this step: its slot, the position of its first new token, how many tokens
            (a decode: 1, or 1 + its draft's tokens when it speculates; a chunk of a newcomer's prompt: up
            to the chunk size), and for a tree of drafts which of its tokens each one sees
    tokens  every span's tokens, packed: [N] (N = the spans' lengths summed)

What runs over the packed row, every layer: the norms, the q|k|v and output projections, RoPE and the
feed-forward, where the weights are read once for all N tokens (on a CPU a decode step is bound by reading
them: that is the gain). Where our kernels are built, a norm is one call and RoPE with the cache writes
another (`block_kernels.norm_rows`, `rope_rows`): torch's dozen small ops for them cost a 16-sequence decode
step a fifth of its time. What runs per sequence: attention, over that sequence's own slot. A prompt chunk's
runs with exactly the shapes it would have alone ([1, H, T, D] queries against [1, Hkv, L, D] keys;
`transformer.attend`); a decoding sequence's rows (its pending token and draft) each as a one-token step,
all of the step's in one call of our kernel (`block_kernels.rows_attention`; where it is not built, one
`attend` per row). A step whose rows all go apart (decoding rows, prompts row by row), on a model whose
products all run on our int4 kernel (`layer_stack`), goes through every layer in one call
(`block_kernels.decode_layers`: the same calls in C++, the same bits): at one sequence, returning to
Python between some 20 ops a layer cost more than the layer's arithmetic (a step 7.9 -> 4.7 ms; 16
sequences 25.5 -> 19.0 ms).

Batch-invariant numerics follow from that split where the row-wise layers are: a row's norm, RoPE and
activation are computed from that row alone (`rms_norm_rows` says what that took), and the int4 and Q8_0
kernels (`weights/block_kernels.cpp`) round and sum each activation row on its own, whatever the other rows
are; so a sequence's hidden states, logits and tokens are the same in any batch as alone (`row_invariant`
says whether a model's matmuls all are). A dense float32 or bfloat16 matmul (MKL, oneDNN) picks another
kernel for another row count: a row's sums then differ in the last bits with the batch (float32: 819 of
820 rows moved between 1 and 40 rows on this machine; bfloat16: 81 of 820 for one layer's shape).

The slot cache is allocated empty (untouched pages cost nothing until a sequence writes them) and only
positions a sequence has written are ever read: a freed slot needs no clearing.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from lossless.engine.model.transformer import Attention, Block, RMSNorm, Transformer, apply_rope, attend
from lossless.engine.weights import block_kernels
from lossless.engine.weights.quant import Int4Linear


@dataclass(frozen=True)
class Span:
    slot: int  # the sequence's KV cache slot
    start: int  # position of its first token this step (the cache holds positions [0, start) already)
    length: int  # its tokens this step
    # a tree of drafts: [length, length] bool, (i, j) says token j is token i or one of its ancestors; its
    # tokens fill positions start..end - 1 of the slot but each sees only the cache before start and its
    # own ancestors, rotated for the position of its depth (as `Transformer.forward(tree=...)`)
    tree: Tensor | None = field(default=None, compare=False)
    # each token's attention computed as a one-token step computes it, over exactly what it sees (`row_keys`):
    # the same bits whatever else the span holds. torch's attention over several queries at once is not
    # row-invariant (bfloat16: 59 of 1267 rows moved between one query and 2-8 on this machine; float32:
    # nearly all), so a decoding sequence's drafts would otherwise change its own numerics with their length
    rows_apart: bool = False

    @property
    def end(self) -> int:
        return self.start + self.length

    def rope_positions(self) -> Tensor:
        """[length]: the position each token is rotated for (a tree node: start + its depth)."""
        if self.tree is None:
            return torch.arange(self.start, self.end)
        return self.start + self.tree.sum(-1) - 1

    def row_sees(self) -> list[tuple[int, list[int]]]:
        """Per token, what it sees as alone, in order: its slot's positions 0..n - 1, then these others (a
        chain's token: the cache up to itself; a tree node: the cache before start and its own ancestors,
        their positions in its path's order, or a prefix where they are the rows before it)."""
        rows: list[tuple[int, list[int]]] = []
        for i in range(self.length):
            if self.tree is None:
                rows.append((self.start + i + 1, []))
                continue
            ancestors = self.tree[i].nonzero()[:, 0].tolist()
            if ancestors[-1] == len(ancestors) - 1:  # rows 0..i: a prefix
                rows.append((self.start + len(ancestors), []))
            else:
                rows.append((self.start, [self.start + a for a in ancestors]))
        return rows

    def row_keys(self) -> list[tuple[int | Tensor, Tensor]]:
        """`row_sees` as torch's attention takes it: per token (a prefix's length, or the positions to
        gather; the all-true mask over them that a one-token step has)."""
        rows: list[tuple[int | Tensor, Tensor]] = []
        for prefix, others in self.row_sees():
            seen = prefix if not others else torch.cat([torch.arange(prefix), torch.tensor(others)])
            rows.append((seen, torch.ones(1, prefix + len(others), dtype=torch.bool)))
        return rows

    def mask(self) -> Tensor:
        """[length, end]: which cache positions each of its tokens sees, as alone."""
        mask = torch.arange(self.end)[None, :] <= torch.arange(self.start, self.end)[:, None]
        if self.tree is not None:
            mask[:, self.start :] = self.tree
        return mask


class SlotCache:
    """Keys and values for ``slots`` sequences of up to ``positions`` tokens: per layer k, v [S, Hkv, P, D]
    in the model's dtype."""

    def __init__(self, model: Transformer, slots: int, positions: int) -> None:
        args, dtype = model.args, model.output.weight.dtype
        shape = (slots, args.n_kv_heads, min(positions, model.max_seq_len), args.head_dim)
        # empty, not zeros: a slot's pages are touched only as its sequence writes them
        self.k = [torch.empty(shape, dtype=dtype) for _ in range(args.n_layers)]
        self.v = [torch.empty(shape, dtype=dtype) for _ in range(args.n_layers)]
        self.slots, self.positions = slots, shape[2]

    def bytes_per_position(self) -> int:
        return sum(2 * t[0, :, 0].numel() * t.element_size() for t in self.k)

    def copy(self, source: int, slot: int, start: int, end: int) -> None:
        """Positions start..end - 1 of ``source``'s keys and values into ``slot``."""
        for cache in (*self.k, *self.v):
            cache[slot, :, start:end] = cache[source, :, start:end]

    def keep(self, slot: int, positions: list[int], start: int) -> None:
        """Move ``slot``'s entries at ``positions`` (increasing) to start, start + 1, ...: after a tree of
        drafts, the accepted path's keys and values (already rotated for those positions)."""
        src = torch.tensor(positions, dtype=torch.long)
        for cache in (*self.k, *self.v):
            cache[slot, :, start : start + len(positions)] = cache[slot, :, src]


def row_invariant(model: Transformer) -> bool:
    """Whether every matmul of ``model``'s layers and output computes each row from that row alone (our
    int4 and Q8_0 kernels say so: ``row_invariant``), so that `forward_packed` is batch-invariant."""
    matmuls = [
        m
        for m in (*model.layers.modules(), model.output)
        if isinstance(m, nn.Linear) or hasattr(m, "row_invariant")
    ]
    return all(getattr(m, "row_invariant", False) for m in matmuls)


@dataclass(frozen=True)
class KernelRows:
    """The rows of a step that one call of our attention kernel computes (`block_kernels.rows_attention`):
    every token of the spans whose rows go apart, each over what it sees as alone, in order
    (`Span.row_sees`)."""

    index: Tensor  # [R]: their places in the packed row
    slots: Tensor  # [R]
    seen: Tensor  # [R]: each sees its slot's positions 0..seen - 1,
    offsets: Tensor  # [R + 1]: then extra[offsets[r]:offsets[r + 1]] (a tree node's ancestors)
    extra: Tensor

    @classmethod
    def of(cls, spans: list[Span]) -> KernelRows:
        index, slots, seen, offsets, extra, offset = [], [], [], [0], [], 0
        for span in spans:
            if span.rows_apart:
                for i, (prefix, others) in enumerate(span.row_sees()):
                    index.append(offset + i)
                    slots.append(span.slot)
                    seen.append(prefix)
                    extra += others
                    offsets.append(len(extra))
            offset += span.length
        as_long = lambda values: torch.tensor(values, dtype=torch.long)  # noqa: E731
        return cls(*(as_long(v) for v in (index, slots, seen, offsets, extra)))


@dataclass(frozen=True)
class LayerStack:
    """A model's layers as one call of our kernels takes them (`block_kernels.decode_layers`), where every
    product of its layers runs on our int4 kernel: the norms' weights in float32, two a layer, then the
    final norm's; per layer the q|k|v, output, gate|up and down products' packed weights."""

    norms: list[Tensor]
    codes: list[Tensor]
    scales: list[Tensor]
    heads: int
    eps: float


_STACKS: weakref.WeakKeyDictionary[Transformer, LayerStack | None] = weakref.WeakKeyDictionary()


def layer_stack(model: Transformer) -> LayerStack | None:
    """``model``'s `LayerStack` (made once per model: a loaded model's weights do not change), or None
    where a product is not on our int4 kernel or a norm is not an ``RMSNorm`` of the model's one eps: then
    its layers run op by op."""
    if model not in _STACKS:
        norms, products = [], []
        for block in model.layers:
            assert isinstance(block, Block) and isinstance(block.attention, Attention)
            norms += [block.attention_norm, block.ffn_norm]
            attention, ffn = block.attention, block.feed_forward
            products += [attention.wqkv, attention.wo, ffn.w13, ffn.w2]
        norms.append(model.norm)
        ours = [p for p in products if isinstance(p, Int4Linear) and p.kernel == "q8"]
        epsilons = {n.eps for n in norms if isinstance(n, RMSNorm)}
        one_eps = len(epsilons) == 1 and all(isinstance(n, RMSNorm) for n in norms)
        _STACKS[model] = None
        if len(ours) == len(products) and one_eps:
            weights = [n.weight.detach().float() for n in norms if isinstance(n, RMSNorm)]
            _STACKS[model] = LayerStack(
                weights,
                [p.packed for p in ours],
                [p.scales for p in ours],
                model.args.n_heads,
                epsilons.pop(),
            )
    return _STACKS[model]


@torch.inference_mode()
def forward_packed(model: Transformer, cache: SlotCache, tokens: list[int], spans: list[Span]) -> Tensor:
    """The spans' ``tokens`` (packed, [N]) through ``model``, each attending to its own slot -> the final
    hidden states [N, dim], in the model's dtype. Writes the tokens' keys and values into their slots."""
    assert sum(s.length for s in spans) == len(tokens) and spans
    positions = torch.cat([torch.arange(s.start, s.end) for s in spans])  # [N]: where they are cached
    slots = torch.cat([torch.full((s.length,), s.slot) for s in spans])  # [N]
    rotated = torch.cat([s.rope_positions() for s in spans])  # [N]
    cos, sin = model.rope_cos[rotated], model.rope_sin[rotated]  # [N, D]
    # rows apart go to our kernel, all in one call a layer, where it is built; else each as a one-token step
    apart = any(s.rows_apart for s in spans)
    kernel = KernelRows.of(spans) if apart and rows_kernel(cache.k[0].dtype) else None
    # [T, L] each: the keys a span's query may see, as alone (or each token's own: `Span.row_keys`)
    masks = [None if kernel and s.rows_apart else s.row_keys() if s.rows_apart else s.mask() for s in spans]
    x = model.tok_embeddings(torch.tensor([tokens]))  # [1, N, dim]
    if kernel is not None and len(kernel.index) == len(tokens):  # every row apart: one call, if it can
        hidden = in_one_call(model, cache, x[0], cos, sin, slots, positions, kernel)
        if hidden is not None:
            return hidden
    for i, block in enumerate(model.layers):
        assert isinstance(block, Block) and isinstance(block.attention, Attention)
        attention = block.attention
        kv = (cache.k[i], cache.v[i])
        normed = rms_norm_rows(block.attention_norm, x)
        h = x + packed_attention(attention, normed, cos, sin, kv, spans, masks, slots, positions, kernel)
        x = h + block.feed_forward(rms_norm_rows(block.ffn_norm, h))
    return rms_norm_rows(model.norm, x)[0]  # [N, dim]


def in_one_call(
    model: Transformer,
    cache: SlotCache,
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
    slots: Tensor,
    positions: Tensor,
    kernel: KernelRows,
) -> Tensor | None:
    """A step whose rows all go apart, x [N, dim], through every layer in one call of our kernels -> the
    final hidden states [N, dim]; None where the model's layers are not all on them (`layer_stack`) or x,
    the cache and the rotations are not of one dtype. Every row apart, ``kernel.slots`` is ``slots``: the
    one call takes it for RoPE's cache writes and attention alike."""
    stack = layer_stack(model)
    if stack is None or not x.dtype == cache.k[0].dtype == cos.dtype:
        return None
    rows = (kernel.seen, kernel.offsets, kernel.extra)
    norms, codes, scales = stack.norms, stack.codes, stack.scales
    keys, values = cache.k, cache.v
    return block_kernels.decode_layers(
        x, norms, codes, scales, keys, values, cos, sin, slots, positions, rows, stack.heads, stack.eps
    )


def rows_kernel(*dtypes: torch.dtype) -> bool:
    """Whether our row-wise kernels (`block_kernels.rows_attention`, `norm_rows`, `rope_rows`) are built
    and loaded (`block_kernels.available`) and take tensors of ``dtypes`` (bfloat16 or float32): else
    torch's ops compute the same, each row alone too (attention: one call per row)."""
    return all(d in (torch.bfloat16, torch.float32) for d in dtypes) and block_kernels.available() is None


def rms_norm_rows(norm: nn.Module, x: Tensor) -> Tensor:
    """``RMSNorm`` computed so that a row's result never depends on the other rows: x [..., dim].

    ``RMSNorm.forward`` takes rsqrt of the [N, 1] column of mean squares, and torch computes an elementwise
    op on 16 or 32 values at a time with SIMD instructions and the remainder one by one, whose rsqrt
    differs in the last bit: which path a row takes depended on how many rows came before it (measured:
    720 of 3160 rows changed). Here rsqrt runs on the column broadcast to the row's width: torch loops
    over the rows then, each split into SIMD and remainder the same way, in a batch of any size. Where our
    kernels are built the whole norm is one call of `block_kernels.norm_rows` (each row in float32, rounded
    once), which does the same in a tenth of the ops."""
    assert isinstance(norm, RMSNorm)
    if rows_kernel(x.dtype):
        return block_kernels.norm_rows(x.reshape(-1, x.shape[-1]), norm.weight, norm.eps).view(x.shape)
    mean_square = x.pow(2).mean(-1, keepdim=True) + norm.eps  # [..., 1]: a reduction of the row alone
    return x * torch.rsqrt(mean_square.expand(x.shape)) * norm.weight


def packed_attention(
    attention: Attention,
    x: Tensor,
    cos: Tensor,
    sin: Tensor,
    kv: tuple[Tensor, Tensor],
    spans: list[Span],
    masks: list[Tensor | list[tuple[int | Tensor, Tensor]] | None],
    slots: Tensor,
    positions: Tensor,
    kernel: KernelRows | None = None,
) -> Tensor:
    """x [1, N, dim] -> [1, N, dim]: projections over the packed row; attention span by span, or for the
    spans whose rows go apart (a None mask) in one call of our kernel over ``kernel``'s rows."""
    _, n, _ = x.shape
    heads, kv_heads, head_dim = attention.n_heads, attention.n_kv_heads, attention.head_dim
    keys, values = kv  # [S, Hkv, P, D]
    # a float32 prompt twin's keys and values are stored rounded to the cache's dtype, as alone
    if rows_kernel(x.dtype, keys.dtype) and cos.dtype == x.dtype:
        qkv = attention.wqkv(x)[0].contiguous()  # [N, (H + 2 Hkv) D]
        rows = block_kernels.rope_rows(qkv, cos, sin, keys, values, slots, positions, heads)
        q = rows.transpose(0, 1)[None]  # [1, H, N, D]
    else:
        q, k, v = attention.wqkv(x).split(
            [heads * head_dim, kv_heads * head_dim, kv_heads * head_dim], dim=-1
        )
        q = q.view(1, n, heads, head_dim).transpose(1, 2)  # [1, H, N, D]
        k = k.view(1, n, kv_heads, head_dim).transpose(1, 2)  # [1, Hkv, N, D]
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        keys[slots, :, positions] = k[0].transpose(0, 1).to(keys.dtype)  # [N, Hkv, D]
        values[slots, :, positions] = v.view(n, kv_heads, head_dim).to(values.dtype)
        rows = q[0].transpose(0, 1)  # [N, H, D]
    if kernel is not None and len(kernel.index) == n:  # a step of decoding rows only: all in one call
        y = block_kernels.rows_attention(
            rows.to(keys.dtype), keys, values, kernel.slots, kernel.seen, kernel.offsets, kernel.extra
        ).to(rows.dtype)
        return attention.wo(y.view(1, n, heads * head_dim))
    y = rows.new_empty(rows.shape)  # contiguous: [N, H, D] reshapes to [1, N, H * D] as is
    if kernel is not None:
        apart = rows[kernel.index].to(keys.dtype)
        y[kernel.index] = block_kernels.rows_attention(
            apart, keys, values, kernel.slots, kernel.seen, kernel.offsets, kernel.extra
        ).to(y.dtype)
    offset = 0
    for span, mask in zip(spans, masks, strict=True):
        if mask is not None:
            ks = span_cache(keys, span).to(q.dtype)  # [1, Hkv, L, D]
            vs = span_cache(values, span).to(q.dtype)
            qs = q[:, :, offset : offset + span.length]  # [1, H, T, D]
            if isinstance(mask, list):  # rows apart: each token as a one-token step
                for i, (seen, ones) in enumerate(mask):
                    index = slice(None, seen) if isinstance(seen, int) else seen
                    one = attend(qs[:, :, i : i + 1], ks[:, :, index], vs[:, :, index], ones)
                    y[offset + i] = one[0, :, 0]
            else:
                y[offset : offset + span.length] = attend(qs, ks, vs, mask)[0].transpose(0, 1)
        offset += span.length
    return attention.wo(y.reshape(1, n, heads * head_dim))


def span_cache(cache: Tensor, span: Span) -> Tensor:
    """cache [S, Hkv, P, D] -> the span's slot up to its last token: [1, Hkv, span.end, D]."""
    return cache[span.slot : span.slot + 1, :, : span.end]
