"""A Llama-family decoder in plain PyTorch, gpt-fast style.

The KV cache is preallocated for ``max_seq_len`` positions. ``forward(tokens, input_pos)`` writes the
keys/values of ``tokens`` at ``input_pos`` and attends causally by *position*, so entries beyond the
current position are never read: rolling the cache back to length L is simply calling the next
forward with ``input_pos`` starting at L (the speculative decoder relies on this).

RoPE uses the Hugging Face ("rotate half") layout; GGUF loaders un-permute q/k weights to match.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lossless.engine.model.args import ModelArgs


class KVCache(nn.Module):
    def __init__(
        self, n_kv_heads: int, head_dim: int, max_seq_len: int, dtype: torch.dtype, batch: int = 1
    ) -> None:
        super().__init__()
        shape = (batch, n_kv_heads, max_seq_len, head_dim)
        self.k: Tensor
        self.v: Tensor
        self.register_buffer("k", torch.zeros(shape, dtype=dtype), persistent=False)
        self.register_buffer("v", torch.zeros(shape, dtype=dtype), persistent=False)

    def update(self, input_pos: Tensor, k: Tensor, v: Tensor, length: int) -> tuple[Tensor, Tensor]:
        # input_pos: [T]; k, v: [B, Hkv, T, D] -> the cache's first `length` positions: [B, Hkv, length, D]
        if k.dtype != self.k.dtype:  # a float32 prompt twin's: stored rounded, read back in its dtype
            keys, values = self.update(input_pos, k.to(self.k.dtype), v.to(self.v.dtype), length)
            return keys.to(k.dtype), values.to(k.dtype)
        self.k[:, :, input_pos] = k
        self.v[:, :, input_pos] = v
        return self.k[:, :, :length], self.v[:, :, :length]


class Attention(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.n_heads, self.n_kv_heads, self.head_dim = args.n_heads, args.n_kv_heads, args.head_dim
        q_out, kv_out = args.n_heads * args.head_dim, args.n_kv_heads * args.head_dim
        # q, k and v in one matmul: one pass over the weights instead of three.
        self.wqkv = nn.Linear(args.dim, q_out + 2 * kv_out, bias=False)
        self.wo = nn.Linear(q_out, args.dim, bias=False)
        self.kv_cache: KVCache | None = None

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor, input_pos: Tensor) -> Tensor:
        bsz, seqlen, _ = x.shape  # x: [B, T, dim]
        q_out, kv_out = self.n_heads * self.head_dim, self.n_kv_heads * self.head_dim
        q, k, v = self.wqkv(x).split([q_out, kv_out, kv_out], dim=-1)
        q = q.view(bsz, seqlen, self.n_heads, self.head_dim).transpose(1, 2)  # [B, H, T, D]
        k = k.view(bsz, seqlen, self.n_kv_heads, self.head_dim).transpose(1, 2)  # [B, Hkv, T, D]
        v = v.view(bsz, seqlen, self.n_kv_heads, self.head_dim).transpose(1, 2)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        assert self.kv_cache is not None, "call Transformer.setup_cache() first"
        k, v = self.kv_cache.update(input_pos, k, v, mask.shape[-1])  # [B, Hkv, L, D]
        y = attend(q, k, v, mask)  # [B, H, T, D]
        return self.wo(y.transpose(1, 2).reshape(bsz, seqlen, q_out))  # [B, T, dim]


class FeedForward(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.hidden_dim = args.hidden_dim
        self.w13 = nn.Linear(args.dim, 2 * args.hidden_dim, bias=False)  # gate and up, fused
        self.w2 = nn.Linear(args.hidden_dim, args.dim, bias=False)  # down

    def forward(self, x: Tensor) -> Tensor:
        gate, up = self.w13(x).split(self.hidden_dim, dim=-1)
        return self.w2(F.silu(gate) * up)


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class Block(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.attention = Attention(args)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)
        self.feed_forward = FeedForward(args)

    def forward(self, x: Tensor, cos: Tensor, sin: Tensor, mask: Tensor, input_pos: Tensor) -> Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin, mask, input_pos)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, args: ModelArgs) -> None:
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(Block(args) for _ in range(args.n_layers))
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        if args.tie_embeddings:
            self.output.weight = self.tok_embeddings.weight
        self.max_seq_len = 0
        self.prompt_model: Transformer | None = None  # processes prompts when set (`process_prompts_with`)
        self._compiled: Callable[..., Tensor] = self._layers  # eager until `compile`
        self.register_buffer("rope_cos", torch.empty(0), persistent=False)
        self.register_buffer("rope_sin", torch.empty(0), persistent=False)

    def setup_cache(self, max_seq_len: int | None = None, batch: int = 1) -> None:
        """Preallocate the KV cache and RoPE tables for ``max_seq_len`` positions and ``batch`` rows
        (the server decodes one sequence; batches are for offline work such as draft training data)."""
        n = min(max_seq_len or self.args.max_seq_len, self.args.max_seq_len)
        dtype, device = self.output.weight.dtype, self.output.weight.device
        for block in self.layers:
            cache = KVCache(self.args.n_kv_heads, self.args.head_dim, n, dtype, batch).to(device)
            block.attention.kv_cache = cache  # type: ignore[union-attr]
        self._set_positions(n)

    def process_prompts_with(self, twin: Transformer) -> None:
        """Prompts (``forward(..., prompt=True)``) run through ``twin`` from now on: the same weights in a
        wider dtype (float32 for bfloat16 or int4 weights where that is faster, `prompts`). It writes
        this model's KV cache, its keys and values rounded to the cache's dtype; its last hidden states
        are rounded to this model's dtype, so the output layer and everything after the prompt run as
        before."""
        for mine, theirs in zip(self.layers, twin.layers, strict=True):
            theirs.attention.kv_cache = mine.attention.kv_cache  # type: ignore[union-attr]
        twin._set_positions(self.max_seq_len)
        self.prompt_model = twin

    def twin(self) -> Transformer:
        """This model on the same weights (shared, not copied: every tensor a module holds but the KV
        cache's) with a KV cache of its own, eager: one that may run while this one does."""
        import copy

        caches = {id(t) for m in self.modules() if isinstance(m, KVCache) for t in (m.k, m.v)}
        held = (v for m in self.modules() for v in vars(m).values() if isinstance(v, Tensor))
        tensors = (*self.parameters(), *self.buffers(), *held)  # and what no register saw (a packed weight)
        memo: dict[int, object] = {id(t): t for t in tensors if id(t) not in caches}
        twin = copy.deepcopy(self, memo)
        twin._compiled = twin._layers
        return twin

    def _set_positions(self, n: int) -> None:
        dtype, device = self.output.weight.dtype, self.output.weight.device
        self.max_seq_len = n
        cos, sin = rope_tables(self.args.head_dim, n, self.args.rope_theta)
        self.rope_cos, self.rope_sin = cos.to(device, dtype), sin.to(device, dtype)

    def forward(
        self,
        tokens: Tensor,
        input_pos: Tensor,
        return_hidden: bool = False,
        pad: Tensor | None = None,
        tree: Tensor | None = None,
        prompt: bool = False,
    ) -> Tensor:
        """tokens: [B, T] at positions input_pos: [T] -> logits [B, T, V] (or final hidden [B, T, dim]).

        ``prompt``: the tokens are a request's prompt, run through the prompt model if one is set.

        ``pad`` [B]: row b's first pad[b] positions are left padding that no query may see (a batch of
        prompts of different lengths; RoPE is relative, so the shift changes nothing else).

        ``tree`` [T, T] bool: the tokens are a tree of drafts, not a sequence; tree[i, j] says token j
        is token i or one of its ancestors. They still fill the cache slots input_pos (contiguous), but
        each sees only the cache before them and its own ancestors, at the position of its depth: token
        i is the continuation of its path alone. `keep` moves one path's entries into place afterwards.
        """
        assert self.max_seq_len > 0, "call setup_cache() first"
        length = int(input_pos[-1]) + 1  # attend over cache positions [0, length)
        if prompt and self.prompt_model is not None:
            hidden = self.prompt_model(tokens, input_pos, return_hidden=True, pad=pad).to(
                self.output.weight.dtype
            )
        elif pad is not None:  # offline batches only: never compiled
            hidden = self._layers(tokens, input_pos, length, pad, tree, 0)
        else:
            start = int(input_pos[0]) if tree is not None else 0
            hidden = self._compiled(tokens, input_pos, length, None, tree, start)
        # the output layer runs outside the compiled graph: one graph serves logits and hidden states, and
        # the layer may be one torch.compile cannot trace (`packed.PackedLinear`)
        return hidden if return_hidden else self.output(hidden)

    def compile_forward(self) -> None:
        """Run every forward but offline batches through torch.compile (inductor, code cached on disk).
        Shapes are dynamic in the tokens and the cache length, so a few graphs serve every position: one
        token, several tokens (prefill, a chain of drafts), a tree. Each compiles at its first use.

        Inductor's C++ wrapper calls the graph's ~300 kernels (int4 matmuls, fused elementwise) from
        compiled code instead of Python: one-token decoding 1.14x faster on 2 cores (51.3 against 45.1
        tok/s, interleaved), for a longer first compile (a C++ file per graph; cached on disk after)."""
        import torch._dynamo.config

        # dynamo gives up on a function after 8 graphs, shared by every model in the process (a server
        # and its draft, a benchmark's several engines): past that it would run eagerly without a word
        torch._dynamo.config.recompile_limit = max(torch._dynamo.config.recompile_limit, 64)
        # a float attribute (RMSNorm's eps) is a graph input by default, and inductor's pass that turns it
        # back into a constant restarts the whole trace: each graph traced twice (~10 s more a start)
        torch._dynamo.config.specialize_float = True
        self._compiled = torch.compile(self._layers, dynamic=True, options={"cpp_wrapper": True})

    def _layers(
        self,
        tokens: Tensor,
        input_pos: Tensor,
        length: int,
        pad: Tensor | None,
        tree: Tensor | None,
        start: int,
    ) -> Tensor:
        keys = torch.arange(length, device=tokens.device)
        # mask[i, j]: query at input_pos[i] may see key position j
        mask = keys[None, :] <= input_pos[:, None]  # [T, L]
        rope_pos = input_pos
        if tree is not None:
            mask[:, start:] = tree
            rope_pos = start + tree.sum(-1) - 1  # start + depth
        if pad is not None:
            mask = mask[None, None] & (keys >= pad[:, None])[:, None, None, :]  # [B, 1, T, L]
        cos, sin = self.rope_cos[rope_pos], self.rope_sin[rope_pos]  # [T, D]
        x = self.tok_embeddings(tokens)  # [B, T, dim]
        for block in self.layers:
            x = block(x, cos, sin, mask, input_pos)
        return self.norm(x)  # [B, T, dim]: the final hidden states

    def keep(self, slots: list[int], start: int) -> None:
        """Move the cache entries at ``slots`` (increasing) to start, start + 1, ...: after a tree
        forward, the accepted path's keys and values (already rotated for those positions)."""
        src = torch.tensor(slots, dtype=torch.long)
        for block in self.layers:
            cache = cast(Attention, block.attention).kv_cache
            assert cache is not None
            cache.k[:, :, start : start + len(slots)] = cache.k[:, :, src]
            cache.v[:, :, start : start + len(slots)] = cache.v[:, :, src]


def attend(q: Tensor, k: Tensor, v: Tensor, mask: Tensor) -> Tensor:
    """q [B, H, T, D], k and v [B, Hkv, L, D] (Hkv divides H; query head h reads kv head h // (H / Hkv)),
    mask [T, L] or [B, 1, T, L] -> [B, H, T, D]."""
    bsz, n_heads, seqlen, head_dim = q.shape
    group = n_heads // k.shape[1]
    if group == 1 or q.dtype != torch.bfloat16:  # float32 is fastest as is
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=group > 1)
    # PyTorch's CPU attention is slow in bfloat16 with one query per head (one-token decoding): 72 us
    # against 26 at 151 keys, 272 against 55 at 600 on 2 cores. Folding the query heads that share a kv
    # head into the query axis gives the same sums with several queries per call: query (head g of the
    # group, position t) becomes query g * T + t of its kv head.
    folded = q.reshape(bsz, k.shape[1], group * seqlen, head_dim)
    rows = mask.repeat(*([1] * (mask.dim() - 2)), group, 1)  # [.., group * T, L]
    return F.scaled_dot_product_attention(folded, k, v, attn_mask=rows).view(bsz, n_heads, seqlen, head_dim)


def rope_tables(head_dim: int, n_pos: int, theta: float) -> tuple[Tensor, Tensor]:
    # computed in float64 so that float64 tests match the reference to 1e-9
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim))
    angles = torch.outer(torch.arange(n_pos, dtype=torch.float64), inv_freq)  # [P, D/2]
    angles = torch.cat([angles, angles], dim=-1)  # [P, D]
    return angles.cos(), angles.sin()


def apply_rope(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    # x: [B, H, T, D]; cos, sin: [T, D]
    half = x.shape[-1] // 2
    rotated = torch.cat([-x[..., half:], x[..., :half]], dim=-1)
    return x * cos + rotated * sin
