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
(non-anticipating, as `engine.drafts` requires). Tokens outside V' get q = 0: rejection sampling
treats that exactly like any other draft distribution.

This module is the head's serving half (the network, its files, the drafter); `lossless.draft` trains
it and writes it with `save_head`.
"""

from __future__ import annotations

import hashlib
import heapq
import json
from collections import deque
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from lossless.atomic import atomic_path, write_atomic
from lossless.engine.model import RMSNorm
from lossless.engine.sampling import SamplingParams, sample, warp
from lossless.engine.speculative import Draft, Drafter, Rng, one_hot_q
from lossless.errors import CheckpointError

WEIGHTS = "head.safetensors"
CONFIG = "head.json"
# the head shipped for the embedded model, trained by `lossless draft train` (lossless.draft, which
# imports this module): its recipe and training log lie beside the weights
SHIPPED = Path(__file__).parents[1] / "draft" / "smollm2-135m"
ROOT_DRAWS = 3  # sampled trees: draws (without replacement) for the first position
CHILD_DRAWS = 1  # ... and after each drafted node
BRANCH = 4  # children per tree node at most (held out, the target's argmax is in the head's top 4 58%)


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
        return self.norm_out(s) @ self.out_embed.T

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


class HeadDrafter:
    """`speculative.Drafter` around a trained head: one head pass per step, then up to K cheap steps.

    It keeps the target's last W hidden states (the decoder hands over each step's new ones). Draft
    position k is made only while the product of conf_1..conf_k stays at or above ``threshold``.

    With ``tree`` > 0 a step drafts a tree of up to that many candidates instead of one chain, all
    verified in one forward (`speculative.Draft`): for greedy requests the head's likeliest
    continuations, best first; for sampled ones ``ROOT_DRAWS`` distinct draws for the first position,
    each continued as a chain under the same confidence rule. On a CPU a forward over 5 tokens costs
    little more than one over 2, and the target's choice is the head's top 1 at a third of positions
    but in its top 4 at more than half.

    With ``lookup`` (an n-gram drafter), a step whose context ends in text seen before drafts what
    followed it instead, as `NgramDrafter` would (it backs off by itself where copying fails): the head
    learned open text, and copying input is what prompt lookup does best. A sampled step with a tree
    drafts both: the lookup's chain and the head's draws as siblings, the chain tried first. Which one
    drafts depends on the context and past outcomes only, so the choice is non-anticipating and the
    output stays exact.
    """

    def __init__(
        self, head: DSparkHead, threshold: float, lookup: Drafter | None = None, tree: int = 0
    ) -> None:
        self.head, self.threshold, self.lookup, self.tree = head, threshold, lookup, tree
        self.window: Tensor  # the target's last W hidden states, in the head's dtype
        self.begin(())
        self.confidences: list[float] = []  # conf_k of the last draft's positions (the head's)
        self.looked_up = False  # the last draft came from ``lookup`` (alone or grafted)
        # a sampled step's lookup chain grafted beside the head's tree, and where its step's tokens
        # begin in the context: kept until the next context shows which branch was taken
        self.grafted: tuple[list[int], int] | None = None
        # (conf_k, accepted) for every drafted position that verification reached: the confidence
        # head's calibration as served (benchmarks read it; bounded, it keeps the latest only)
        self.outcomes: deque[tuple[float, bool]] = deque(maxlen=100_000)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self.window = torch.zeros(0, self.head.config.dim, dtype=self.head.out_embed.dtype)
        self.grafted = None
        if self.lookup is not None:
            self.lookup.begin(prompt_ids)

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, generator: Rng, hidden: Tensor | None
    ) -> Draft:
        w, dtype = self.head.config.window, self.head.out_embed.dtype
        if hidden is not None:
            self.window = torch.cat([self.window, hidden.to(dtype)])[-w:]
        self.confidences = []
        if self.grafted is not None and self.lookup is not None:
            self.lookup.observe(*self._chain_outcome(context))
        copied = (
            self.lookup.propose(context, k, params, generator, hidden) if self.lookup else Draft([], None)
        )
        self.looked_up = bool(copied.tokens)
        n = min(len(self.window), len(context) - 1, w)
        if self.looked_up and (params.greedy or not self.tree or n == 0):
            return copied
        if k <= 0 or n == 0:
            return Draft([], None)
        head, vocab = self.head, self.head.vocab
        with torch.inference_mode():
            hid = torch.zeros(1, w, head.config.dim, dtype=dtype)
            hid[0, w - n :] = self.window[-n:]
            toks = torch.zeros(1, w, dtype=torch.long)
            toks[0, w - n :] = torch.tensor(context[-n:])
            valid = torch.arange(w)[None] >= w - n
            s = head.states(hid, toks, valid)[0, :k]  # [k, d]
            base = head.block_logits(s)  # [k, V']
            if self.tree and params.greedy:
                return self._tree(base, int(context[-1]))
            if self.tree:
                tree = self._sampled_tree(s, base, int(context[-1]), params, generator)
                if self.looked_up:
                    self.grafted = (copied.tokens, len(context))
                    return _graft(copied.tokens, tree, head.config.vocab_size)
                return tree
            tokens: list[int] = []
            qs: list[Tensor] = []
            prev, survive = int(context[-1]), 1.0
            for i in range(len(s)):
                prev_t = torch.tensor(prev)
                conf = float(torch.sigmoid(head.confidence_logit(s[i], prev_t)))
                survive *= conf
                if survive < self.threshold:  # decided before x_i is drawn
                    break
                self.confidences.append(conf)
                logits = (base[i] + head.markov(prev_t)).float()
                q = warp(logits, params.temperature, params.top_k, params.top_p)  # exactly what is sampled
                j = int(q.argmax()) if params.greedy else sample(q, generator)
                prev = int(vocab[j])
                tokens.append(prev)
                qs.append(q)
        if not tokens:
            return Draft([], None)
        return Draft(tokens, self._full_vocabulary(qs))

    def _full_vocabulary(self, qs: list[Tensor]) -> Tensor:
        """Draft-vocabulary distributions [V'] each -> [n, V], q = 0 outside the draft vocabulary."""
        q_full = torch.zeros(len(qs), self.head.config.vocab_size)
        q_full[:, self.head.vocab] = torch.stack(qs)
        return q_full

    def _chain_outcome(self, context: Sequence[int]) -> tuple[int, int]:
        """(drafted, accepted) of the last step's grafted lookup chain: its first token was accepted
        exactly when it is the step's first emitted token (once it is rejected, recursive rejection
        leaves it no probability, so nothing else emits it), and then the whole accepted path is the
        chain's."""
        assert self.grafted is not None
        chain, at = self.grafted  # the step emitted context[at:], its accepted tokens and one more
        self.grafted = None
        return len(chain), len(context) - at - 1 if context[at] == chain[0] else 0

    def _tree(self, base: Tensor, pending: int) -> Draft:
        """Up to ``tree`` nodes, best first: a node's score is the product of the head's probabilities
        (temperature 1) along its path, and each added node offers its ``BRANCH`` likeliest children.
        Depth is bounded by the rows of ``base`` [depth, V']; the confidence head plays no part: stopping
        paths by it measured no better with bfloat16 weights (open chat 1.67x either way) and worse with
        float32 (1.07x against 1.18x at its threshold of 0.3), where a chain needs it most."""
        head, vocab = self.head, self.head.vocab
        tokens: list[int] = []
        parents: list[int] = []
        heap: list[tuple[float, int, int, int]] = []  # (-score, depth, parent node, draft-vocab index)

        def offer(parent: int, depth: int, prev: int, score: float) -> None:
            probs = torch.softmax((base[depth] + head.markov(torch.tensor(prev))).float(), -1)
            top = probs.topk(BRANCH)
            for pr, j in zip(top.values.tolist(), top.indices.tolist(), strict=True):
                heapq.heappush(heap, (-score * pr, depth + 1, parent, j))

        offer(-1, 0, pending, 1.0)
        while heap and len(tokens) < self.tree:
            neg, depth, parent, j = heapq.heappop(heap)
            tokens.append(int(vocab[j]))
            parents.append(parent)
            if depth < len(base) and len(tokens) < self.tree:  # else its children could not join
                offer(len(tokens) - 1, depth, tokens[-1], -neg)
        return Draft(tokens, None, parents)

    def _sampled_tree(
        self, s: Tensor, base: Tensor, pending: int, params: SamplingParams, generator: torch.Generator | None
    ) -> Draft:
        """Up to ``tree`` nodes drawn from the head, level by level: ``ROOT_DRAWS`` draws without
        replacement for the first position, then ``CHILD_DRAWS`` after each node of the level before, each
        path stopped by the confidence rule of a chain (decided from its own tokens before its next is
        drawn). Without replacement, a second draw is never a wasted copy of the first: held out, two
        draws make the first position survive 0.427 of the time against 0.401 for independent ones."""
        head, vocab = self.head, self.head.vocab
        tokens: list[int] = []
        parents: list[int] = []
        qs: list[Tensor] = []
        level = [(-1, pending, 1.0)]  # (node, its token, survival so far)
        for depth in range(len(base)):
            after = []
            for node, prev, survive in level:
                prev_t = torch.tensor(prev)
                survive *= float(torch.sigmoid(head.confidence_logit(s[depth], prev_t)))
                if survive < self.threshold:
                    continue
                q = warp((base[depth] + head.markov(prev_t)).float(), params.temperature, params.top_k,
                         params.top_p)  # fmt: skip
                draws = min(ROOT_DRAWS if node < 0 else CHILD_DRAWS, self.tree - len(tokens))
                for j, q_j in _without_replacement(q, draws, generator):
                    tokens.append(int(vocab[j]))
                    parents.append(node)
                    qs.append(q_j)
                    after.append((len(tokens) - 1, tokens[-1], survive))
            level = after
        if not tokens:
            return Draft([], None)
        return Draft(tokens, self._full_vocabulary(qs), parents)

    def observe(self, drafted: int, accepted: int) -> None:
        # a grafted chain's outcome is read from the next context instead (`_chain_outcome`)
        if self.looked_up and self.lookup is not None and self.grafted is None:
            self.lookup.observe(drafted, accepted)
        # position i was reached when the i before it were accepted
        for i, conf in enumerate(self.confidences[: min(drafted, accepted + 1)]):
            self.outcomes.append((conf, i < accepted))
        self.confidences = []


def _without_replacement(q: Tensor, n: int, generator: torch.Generator | None) -> list[tuple[int, Tensor]]:
    """Up to ``n`` distinct draws from q [V'], each with the distribution it was drawn from: q without
    the tokens drawn before it, renormalised. Recursive rejection sampling must be given exactly
    those (Sequoia, Chen et al. 2024), and it then stays exact. Fewer when q runs out of tokens."""
    out: list[tuple[int, Tensor]] = []
    for _ in range(n):
        j = sample(q, generator)
        out.append((j, q))
        rest = q.clone()
        rest[j] = 0.0
        mass = float(rest.sum())
        if mass <= 0.0:
            break
        q = rest / mass
    return out


def _graft(chain: list[int], tree: Draft, vocab_size: int) -> Draft:
    """Prompt lookup's chain, then the head's sampled tree beside it as one tree: the chain's first
    token is tried first and the head's draws against what its rejection leaves. A chosen token is a
    draw from a one-hot q, so recursive rejection stays exact (for the chain alone it is the chain's
    rule)."""
    m = len(chain)
    one_hot = one_hot_q(chain, vocab_size)
    chain_parents = list(range(-1, m - 1))
    if tree.q is None or tree.parents is None:
        return Draft(chain, one_hot, chain_parents)
    parents = chain_parents + [p + m if p >= 0 else -1 for p in tree.parents]
    return Draft(chain + tree.tokens, torch.cat([one_hot, tree.q]), parents)
