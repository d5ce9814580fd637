"""Serving with a trained DSpark-style draft head (`head.DSparkHead`): chains and trees of drafts from
one pass of the head per step, prompt lookup beside it, and that pass compiled where the target is.
"""

from __future__ import annotations

import copy
import heapq
from collections import deque
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

from lossless.engine.model.sampling import SamplingParams, sample, warp
from lossless.engine.speculate.head import DSparkHead
from lossless.engine.speculate.speculative import Draft, Drafter, Rng, one_hot_q

ROOT_DRAWS = 3  # sampled trees: draws (without replacement) for the first position
CHILD_DRAWS = 1  # ... and after each drafted node
BRANCH = 4  # children per tree node at most (held out, the target's argmax is in the head's top 4 58%)
# (hidden [1, W, d], tokens [1, W], valid [1, W], rows) -> the pass's s [rows, d] and block logits [rows, V']
HeadPass = Callable[[Tensor, Tensor, Tensor, int], tuple[Tensor, Tensor]]
# (a position's block logits [V'], the token before it [1]) -> its BRANCH likeliest (probabilities, indices)
Children = Callable[[Tensor, Tensor], tuple[Tensor, Tensor]]


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

    The head's pass and a greedy tree's scoring run eagerly until `compile`.
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
        self._pass: HeadPass = self._head_pass
        self._children: Children = self._top_children
        self.compiled = False

    def fork(self) -> HeadDrafter:
        """A drafter for another sequence beside this one (a batch's, `batch.decode`): the same head and
        compiled passes, state of its own (window, lookup, outcomes)."""
        other = copy.copy(self)
        other.lookup = None if self.lookup is None else copy.deepcopy(self.lookup)
        other.outcomes = deque(maxlen=self.outcomes.maxlen)
        other.begin(())
        return other

    def compile(self) -> None:
        """Run the head's pass and a greedy tree's scoring through torch.compile, static shapes, and make
        their graphs now: inductor fuses the small operations between the products and its C++ wrapper
        calls the kernels. SmolLM2's shipped head in bfloat16 on 2 AVX-512-BF16 cores: a pass for a
        greedy tree of 2 took 1.67 ms, against 2.71 eager (2.07 against 3.64 with the weights out of
        cache, as between two target forwards). Inductor's freezing (weights as constants) measured no
        faster (2.34 against 2.38 ms cold, 1.16 against 1.19 in 4 bits) and is left off: it only takes
        effect when set process-wide while dynamo traces, not as a per-call option. The drafts are the
        same computation in another order: they may differ in the last bits, and the target's
        verification keeps the output exact either way."""
        options: dict[str, str | int | bool | Callable[..., object]] = {"cpp_wrapper": True}
        self._pass = torch.compile(self._head_pass, dynamic=False, options=options)
        self._children = torch.compile(self._top_children, dynamic=False, options=options)
        c, dtype = self.head.config, self.head.out_embed.dtype
        with torch.inference_mode():  # inference tensors, as `propose` makes (or dynamo compiles twice)
            hidden = torch.zeros(1, c.window, c.dim, dtype=dtype)
            tokens = torch.zeros(1, c.window, dtype=torch.long)
            valid = torch.ones(1, c.window, dtype=torch.bool)
            for rows in sorted({self._rows(greedy=True), self._rows(greedy=False)}):
                _, base = self._pass(hidden, tokens, valid, rows)
            if self.tree:
                self._children(base[0], torch.tensor([0]))
        self.compiled = True

    def _rows(self, greedy: bool) -> int:
        """Positions a pass scores: all K, but no deeper than a greedy tree can reach (one per node)."""
        block = self.head.config.block
        return min(self.tree, block) if self.tree and greedy else block

    def _head_pass(self, hidden: Tensor, tokens: Tensor, valid: Tensor, rows: int) -> tuple[Tensor, Tensor]:
        s = self.head.states(hidden, tokens, valid)[0, :rows]  # [rows, d]
        return s, self.head.block_logits(s)

    def _top_children(self, logits: Tensor, prev: Tensor) -> tuple[Tensor, Tensor]:
        # prev [1]: a 0-dimensional index would be read as a Python number, which the graph cannot hold
        probs = torch.softmax((logits + self.head.markov(prev)[0]).float(), -1)  # temperature 1
        top = probs.topk(BRANCH)
        return top.values, top.indices

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
            s, base = self._pass(hid, toks, valid, self._rows(params.greedy))
            s, base = s[:k], base[:k]  # [k, d], [k, V']
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
        vocab = self.head.vocab
        tokens: list[int] = []
        parents: list[int] = []
        heap: list[tuple[float, int, int, int]] = []  # (-score, depth, parent node, draft-vocab index)

        def offer(parent: int, depth: int, prev: int, score: float) -> None:
            probs, indices = self._children(base[depth], torch.tensor([prev]))
            for pr, j in zip(probs.tolist(), indices.tolist(), strict=True):
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
                q = warp(
                    (base[depth] + head.markov(prev_t)).float(),
                    params.temperature,
                    params.top_k,
                    params.top_p,
                )
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
