"""A DSpark-style draft head: a block of draft tokens from one pass over the target's hidden states.

Shapes: W = ``window`` context positions, K = ``block`` drafted positions, d = the target's width,
V' = the reduced draft vocabulary. At a step whose pending token is c_n (emitted, not yet run through
the target), the head sees the target's final hidden states h_{n-W}..h_{n-1} with the tokens they
predicted, c_{n-W+1}..c_n, and drafts x_1..x_K for c_{n+1}..c_{n+K}:

    ctx_j  = fuse([norm(h_j); norm(E c_{j+1})]) + pos_j                   [W, d]
    slot_k = ctx_{n-1} + pos_{W+k}                                        [K, d]
    s      = one block: the K slots attend to the W contexts and each other; SwiGLU
    logits_k = norm(s_k) E_{V'}^T + W2 W1 E x_{k-1}     (x_0 = c_n)     the Markov head, rank r
    conf_k   = sigmoid(w . [s_k; E x_{k-1}] + b)                          P(x_k survives | x_<k did)

E is the target's own (tied) embedding, frozen and not stored with the head: the slots learn to be
hidden states the target's output layer reads. The one pass gives every s_k; drafting then walks
k = 1..K with only the Markov term depending on the token just drafted, and stops *before* x_k when
the running product of confidences falls below a threshold - a rule that looks at x_<k only
(non-anticipating, as `speculate.drafts` requires). Tokens outside V' get q = 0: rejection sampling
treats that exactly like any other draft distribution.

This module is the network and its files; `head_drafter` drafts with it when serving, and
`lossless.draft` trains it and writes it with `save_head`.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lossless.atomic import atomic_path, write_atomic
from lossless.engine.model.transformer import RMSNorm
from lossless.engine.weights.quant import GROUP, Int4Linear, Int4Weight
from lossless.errors import CheckpointError

WEIGHTS = "head.safetensors"
CONFIG = "head.json"
# the head shipped for the embedded model, made by `lossless draft train` (lossless.draft, which imports
# this module, never the reverse): the engine serves it from its own room, its recipe and training log
# beside the weights
SHIPPED = Path(__file__).with_name("heads") / "smollm2-135m"


@dataclass(frozen=True)
class HeadConfig:
    dim: int  # the target's width
    vocab_size: int  # the target's vocabulary
    window: int = 8  # W: target positions the head looks at
    block: int = 7  # K: tokens drafted per pass at most
    heads: int = 9
    ffn: int = 1024  # SwiGLU width
    rank: int = 64  # the Markov head's rank
    norm_eps: float = 1e-5


class DSparkHead(nn.Module):
    def __init__(self, config: HeadConfig, embed: Tensor, vocab: Tensor) -> None:
        """``embed`` [V, d]: the target's token embedding (frozen); ``vocab`` [V']: the draft vocabulary."""
        super().__init__()
        c, d = config, config.dim
        self.config = c
        self.embed: Tensor
        self.vocab: Tensor
        self.register_buffer("embed", embed.detach(), persistent=False)
        self.register_buffer("vocab", vocab.to(torch.long), persistent=True)
        self.out_embed: Tensor  # the output layer's rows for the draft vocabulary, gathered once
        self.register_buffer("out_embed", embed.detach()[vocab], persistent=False)
        self.norm_h, self.norm_e = RMSNorm(d, c.norm_eps), RMSNorm(d, c.norm_eps)
        self.fuse = nn.Linear(2 * d, d, bias=False)
        self.pos = nn.Parameter(torch.randn(c.window + c.block, d) * 0.02)
        self.norm_attn, self.norm_ffn, self.norm_out = (RMSNorm(d, c.norm_eps) for _ in range(3))
        self.wq, self.wkv, self.wo = (
            nn.Linear(d, d, False),
            nn.Linear(d, 2 * d, False),
            nn.Linear(d, d, False),
        )
        self.w13, self.w2 = nn.Linear(d, 2 * c.ffn, bias=False), nn.Linear(c.ffn, d, bias=False)
        self.markov_in = nn.Linear(d, c.rank, bias=False)
        self.markov_out = nn.Linear(c.rank, len(vocab), bias=False)
        nn.init.zeros_(self.markov_out.weight)  # starts as a pure block drafter
        self.conf = nn.Linear(2 * d, 1)
        self.dropout = 0.0  # training only: a few hundred prompts are memorised without it
        self.out_int4: Int4Linear | None = None  # ``out_embed`` in 4 bits (`use_int4`)

    def use_int4(self, kernel_name: str | None = None) -> None:
        """Hold the weights in 4 bits (`quant.Int4Weight.quantize`), multiplied by the int4 kernel:
        for an int4 target, whose bfloat16 activations the head shares. Between two forwards of the
        target the head's weights are out of cache, so its pass costs what reading them does: SmolLM2's
        shipped head, 2 AVX-512-BF16 cores, cache flushed, compiled: 1.29 ms a pass against 2.45 in
        bfloat16; greedy open chat took as many steps either way (210 against 207 for 384 tokens).
        The confidence layer, with its bias and one output, stays as it is. ``kernel_name``: the target's
        int4 kernel (`quant.kernel`)."""
        for name, layer in list(self.named_children()):
            if isinstance(layer, nn.Linear) and layer.bias is None and layer.in_features % GROUP == 0:
                setattr(self, name, Int4Linear(Int4Weight.quantize(layer.weight), kernel_name))
        self.out_int4 = Int4Linear(Int4Weight.quantize(self.out_embed), kernel_name)

    def states(self, hidden: Tensor, tokens: Tensor, valid: Tensor | None = None) -> Tensor:
        """hidden [B, W, d], tokens [B, W] (each position's next token), valid [B, W] -> s [B, K, d]."""
        c = self.config
        ctx = self.fuse(torch.cat([self.norm_h(hidden), self.norm_e(self.embed[tokens])], -1))
        ctx = self._drop(ctx + self.pos[: c.window])  # [B, W, d]
        slots = ctx[:, -1:] + self.pos[c.window :]  # [B, K, d]
        b, n_heads = ctx.shape[0], c.heads
        x = self.norm_attn(torch.cat([ctx, slots], 1))  # [B, W+K, d]
        q = self.wq(x[:, c.window :]).view(b, c.block, n_heads, -1).transpose(1, 2)  # [B, H, K, dh]
        k, v = (t.view(b, c.window + c.block, n_heads, -1).transpose(1, 2) for t in self.wkv(x).chunk(2, -1))
        mask = None
        if valid is not None:  # padded context positions are not keys; the slots always are
            keys = torch.cat([valid, valid.new_ones(b, c.block)], 1)  # [B, W+K]
            mask = keys[:, None, None, :]
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)  # [B, H, K, dh]
        s = slots + self._drop(self.wo(y.transpose(1, 2).reshape(b, c.block, -1)))
        gate, up = self.w13(self.norm_ffn(s)).chunk(2, -1)
        return s + self._drop(self.w2(F.silu(gate) * up))  # [B, K, d]

    def _drop(self, x: Tensor) -> Tensor:
        return F.dropout(x, self.dropout, self.training) if self.dropout else x

    def block_logits(self, s: Tensor) -> Tensor:
        """s [..., d] -> logits over the draft vocabulary [..., V'], before the Markov term."""
        x = self.norm_out(s)
        return x @ self.out_embed.T if self.out_int4 is None else self.out_int4(x)

    def markov(self, prev: Tensor) -> Tensor:
        """prev [...] token ids -> the Markov term [..., V']."""
        return self.markov_out(self.markov_in(self.embed[prev]))

    def confidence_logit(self, s: Tensor, prev: Tensor) -> Tensor:
        """s [..., d], prev [...] -> [...]: logit of P(this position's draft survives)."""
        return self.conf(torch.cat([s, self.embed[prev]], -1))[..., 0]


def save_head(head: DSparkHead, folder: Path) -> str:
    """Write head.safetensors and head.json into ``folder``; return the weights' sha256."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    tensors = {k: v.detach().to(torch.float16).contiguous() for k, v in head.state_dict().items()}
    tensors["vocab"] = head.vocab.to(torch.int32)
    with atomic_path(folder / WEIGHTS) as tmp:
        save_file(tensors, str(tmp))
    digest = hashlib.sha256((folder / WEIGHTS).read_bytes()).hexdigest()
    write_atomic(folder / CONFIG, json.dumps({**asdict(head.config), "sha256": digest}, indent=2) + "\n")
    return digest


def load_head(folder: Path, embed: Tensor) -> DSparkHead:
    """A saved head for a target whose embedding is ``embed`` [V, d]; CheckpointError when it does not
    fit that target or its weights do not match the recorded checksum."""
    from safetensors.torch import load_file

    try:
        meta = json.loads((folder / CONFIG).read_text())
        data = (folder / WEIGHTS).read_bytes()
    except (OSError, ValueError) as exc:
        raise CheckpointError(f"draft head {folder}: {exc}") from exc
    digest = meta.pop("sha256", None)
    if digest != hashlib.sha256(data).hexdigest():
        raise CheckpointError(f"draft head {folder}: {WEIGHTS} does not match the sha256 in {CONFIG}")
    try:
        config = HeadConfig(**meta)
    except TypeError as exc:
        raise CheckpointError(f"draft head {folder}: {CONFIG} is not a head's config ({exc})") from exc
    if (config.vocab_size, config.dim) != tuple(embed.shape):
        raise CheckpointError(
            f"draft head {folder}: made for a {config.vocab_size} x {config.dim} embedding, "
            f"the target has {embed.shape[0]} x {embed.shape[1]}"
        )
    tensors = load_file(str(folder / WEIGHTS))
    # The head computes in the target's dtype and shares its embedding (bfloat16 halves the weights a
    # draft reads); the distributions it samples from are made float32 before sampling.
    dtype = embed.dtype if embed.dtype in (torch.float32, torch.bfloat16) else torch.float32
    head = DSparkHead(config, embed.to(dtype), tensors["vocab"])
    head.load_state_dict({k: v.to(dtype) if v.is_floating_point() else v for k, v in tensors.items()})
    return head.to(dtype).eval()
