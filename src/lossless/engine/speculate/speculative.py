"""Lossless speculative decoding, gpt-fast style: draft -> one target forward -> accept -> roll back.

One step, with p_i the target's and q_i the drafter's distribution after the *same* warp
(temperature -> top-k -> top-p, `sampling.warp`):

    draft x_1..x_k with q_1..q_k       (the stop rule may look at x_<=i only: non-anticipating)
    one target forward over [last, x_1..x_k] -> p_1..p_{k+1}
    accept x_i while u_i * q_i(x_i) < p_i(x_i); at the first rejection emit a sample of
    norm(max(0, p_i - q_i)) (p_i when that has no mass) and stop; all accepted -> a bonus from p_{k+1}

Every emitted token is then distributed exactly as plain sampling from the warped target would give it
(Leviathan et al. 2023, Chen et al. 2023); tests/unit/engine/speculate/test_speculative_*.py prove it
three ways. The KV cache "rolls back" for free: `Transformer` attends by position, so the next forward
simply starts at the accepted prefix's length and overwrites what the rejected tokens left behind.

A drafter may instead offer a tree of candidates (`Draft` with parents): one forward verifies all of
its paths (each token sees only its ancestors, `Transformer.forward(tree=...)`), the walk draws each
token from the target and follows it while it is a candidate, and `Transformer.keep` moves the
accepted path's cache entries into place. Exact for any tree; test_speculative_tree.py proves it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Protocol, cast

import torch
from torch import Tensor

from lossless.engine.model.constrain import Constraint, masked_rows
from lossless.engine.model.generate import Accepted
from lossless.engine.model.sampling import SamplingParams, sample, warp
from lossless.engine.speculate.stats import SpecStats

Rng = torch.Generator | None  # a request's random stream (None: torch's global one)


@dataclass(frozen=True)
class Draft:
    """A chain x_1..x_k (verified by rejection sampling against q), or a tree of candidates.

    A tree (``parents`` given) lists its nodes parents first; parents[i] is the index of node i's
    parent, -1 for a child of the pending token. One forward scores every node; a walk from the pending
    token then emits the step's tokens, node by node:

    - q None (candidates chosen, not sampled): draw the next token from the target (its argmax when
      greedy); if it is a child of the current node, accept it and go on from there, else emit it and
      stop. Every emitted token is the target's own draw: exact whatever the tree holds.
    - q given, q[i] the distribution node i was drawn from, given its earlier siblings (independent
      draws from one q, or draws without replacement: q without the earlier siblings' tokens,
      renormalised): recursive rejection sampling. Try the children in order, accepting child x with
      probability min(1, r(x) / q_x(x)), where r starts as the target's p and becomes
      norm(max(0, r - q_x)) after each rejection; when all are rejected emit a draw from r. With one
      child per node this is the chain's rule; with several it is exact too (SpecInfer, Miao et al.
      2024; without replacement, Sequoia, Chen et al. 2024).
    """

    tokens: list[int]  # x_1..x_k, k >= 0 (a tree: its nodes)
    q: Tensor | None  # [k, V] the distributions they were sampled from; None: deterministic (one-hot)
    parents: list[int] | None = None

    def depth(self) -> int:
        """Draft positions: the chain's length, or the deepest path of the tree."""
        if self.parents is None:
            return len(self.tokens)
        depths: list[int] = []
        for parent in self.parents:
            depths.append(1 + (depths[parent] if parent >= 0 else 0))
        return max(depths, default=0)


class Drafter(Protocol):
    """What `speculative_decode` needs from a drafter (n-gram, draft model, later a draft head)."""

    def begin(self, prompt_ids: Sequence[int]) -> None:
        """A new request: forget everything about the previous one."""

    def propose(
        self, context: Sequence[int], k: int, params: SamplingParams, generator: Rng, hidden: Tensor | None
    ) -> Draft:
        """Draft at most k tokens to follow ``context`` (prompt + everything emitted so far).

        ``params`` is the request's warp (apply it with `sampling.warp`). ``hidden`` [m, dim] holds
        the target's final hidden states that are new since the last call: those at positions
        len(context) - 1 - m .. len(context) - 2, each the state that predicted the token after it
        (the whole prompt's at the first call; the last row predicted ``context[-1]``). Free to pass,
        they are what a trained draft head drafts from.
        """
        ...

    def observe(self, drafted: int, accepted: int) -> None:
        """Feedback after each step, for adaptive draft lengths (past outcomes only)."""


class CausalLM(Protocol):
    """The target: `model.Transformer`, or anything with its contract (tests use bigrams)."""

    max_seq_len: int  # KV cache positions

    def __call__(
        self, tokens: Tensor, input_pos: Tensor, return_hidden: bool = False, *, prompt: bool = False
    ) -> Tensor: ...  # prompt: the tokens are the request's prompt (a model may process those apart)

    def output(self, hidden: Tensor) -> Tensor: ...  # final hidden [..., dim] -> logits [..., V]


class TreeLM(CausalLM, Protocol):
    """A target that can verify a tree of drafts in one forward (`model.Transformer`)."""

    def __call__(
        self,
        tokens: Tensor,
        input_pos: Tensor,
        return_hidden: bool = False,
        *,
        prompt: bool = False,
        tree: Tensor | None = None,
    ) -> Tensor: ...

    def keep(self, slots: list[int], start: int) -> None: ...


def residual_distribution(p: Tensor, q: Tensor) -> Tensor:
    """p, q: [V] -> norm(max(0, p - q)), or p itself when that has no mass (then p == q and the
    rejection had probability 0: any distribution would do, p keeps fp round-off harmless)."""
    residual = (p - q).clamp_min(0.0)
    mass = float(residual.sum())
    return residual / mass if mass > 0 else p


class AcceptRule(Protocol):
    """`accept_draft`'s signature: the seam where the mutation tests put a broken rule."""

    def __call__(
        self, p: Tensor, q: Tensor, draft: Sequence[int], generator: torch.Generator | None, greedy: bool
    ) -> tuple[int, int]: ...


def accept_draft(
    p: Tensor, q: Tensor, draft: Sequence[int], generator: torch.Generator | None, greedy: bool
) -> tuple[int, int]:
    """p: [k+1, V] target, q: [k, V] draft probabilities -> (accepted count n, token to emit next)."""
    for i, x in enumerate(draft):
        if greedy:
            # p_i is one-hot on the argmax: the general rule reduces to this, minus the float noise
            target = int(p[i].argmax())
            if x != target:
                return i, target
            continue
        u = float(torch.rand((), generator=generator, dtype=torch.float64))
        # THE acceptance rule: P(accept x_i) = min(1, p_i(x_i) / q_i(x_i)), with no division, so
        # q_i(x_i) = 0 (cannot happen for a sampled x_i, but fp) never divides by zero.
        if u * float(q[i, x]) < float(p[i, x]):
            continue
        # Rejected: the residual supplies exactly the mass acceptance under-delivered, so the
        # emitted token is distributed as p_i overall.
        return i, sample(residual_distribution(p[i], q[i]), generator)
    k = len(draft)
    return k, int(p[k].argmax()) if greedy else sample(p[k], generator)


def speculative_decode(
    model: CausalLM,
    drafter: Drafter,
    prompt_ids: Sequence[int],
    params: SamplingParams,
    *,
    max_new_tokens: int,
    k_max: int,
    generator: torch.Generator | None = None,
    stats: SpecStats | None = None,
    accept: AcceptRule = accept_draft,
    constraint: Constraint | None = None,
) -> Iterator[Accepted]:
    """A token source for `generate.generate_text`: the prefill's token, then a batch per target
    forward as soon as it is accepted. Forwards run lazily, inside ``next``.

    At most ``max_new_tokens`` are produced and drafts are cut so that no step overshoots.
    ``stats`` (optional) is updated in place after every step. ``accept`` is the seam through which
    the mutation tests swap in a broken rule (and must see the statistical test fail).

    Under a ``constraint`` (a grammar) every target distribution is the masked one - the forbidden
    tokens' logits at -inf before the warp - and drafts are judged against it: a drafted token the
    grammar forbids has p = 0 and is rejected with probability 1, so the drafters need not know the
    grammar. The grammar advances over the emitted tokens only (rolled back past rejected ones).
    """
    assert len(prompt_ids) >= 1 and k_max >= 0
    stats = stats if stats is not None else SpecStats(k_max)
    tokens = list(prompt_ids)
    if max_new_tokens <= 0:
        return
    drafter.begin(prompt_ids)
    with torch.inference_mode():
        hidden = model(torch.tensor([tokens]), torch.arange(len(tokens)), return_hidden=True, prompt=True)[0]
        logits = model.output(hidden[-1])  # [V]: the prompt's other positions need no vocabulary matmul
    if constraint is not None:
        logits = constraint.mask(logits)
    tokens.append(_choose(logits, params, generator))
    if constraint is not None:
        constraint.advance(tokens[-1])
    yield Accepted(tokens[-1:], logits[None])
    while len(tokens) - len(prompt_ids) < max_new_tokens:
        # the cache holds tokens[:-1]; the pending token tokens[-1] goes in with the draft
        room = min(max_new_tokens - (len(tokens) - len(prompt_ids)) - 1, model.max_seq_len - len(tokens))
        draft = drafter.propose(tokens, min(k_max, room), params, generator, hidden)
        if draft.parents is None:
            step, hidden = _verify(model, tokens, draft, params, generator, accept, constraint)
        else:  # a tree: its nodes need cache slots too (parents first, so a prefix is still a tree)
            slots = model.max_seq_len - len(tokens)
            q = None if draft.q is None else draft.q[:slots]
            draft = Draft(draft.tokens[:slots], q, draft.parents[:slots])
            step, hidden = _verify_tree(cast(TreeLM, model), tokens, draft, params, generator, constraint)
        stats.record(draft.depth(), len(step.token_ids) - 1)
        drafter.observe(len(draft.tokens), len(step.token_ids) - 1)
        tokens.extend(step.token_ids)
        yield step


def _verify(
    model: CausalLM,
    tokens: list[int],
    draft: Draft,
    params: SamplingParams,
    generator: torch.Generator | None,
    accept: AcceptRule,
    constraint: Constraint | None = None,
) -> tuple[Accepted, Tensor]:
    """One target forward over [pending, x_1..x_k] and the acceptance rule -> the emitted tokens and
    the target's hidden states at the positions that predicted them: [n + 1, dim]."""
    k = len(draft.tokens)
    start = len(tokens) - 1  # rolling back = starting here, over whatever rejected tokens left
    with torch.inference_mode():  # inference tensors in, as every forward has (or dynamo compiles twice)
        inp = torch.tensor([[tokens[-1], *draft.tokens]])  # [1, k+1]
        hidden = model(inp, torch.arange(start, start + k + 1), return_hidden=True)[0]  # [k+1, dim]
        logits = model.output(hidden)  # [k+1, V]
    step = judge_chain(logits, draft, params, generator, accept, constraint)
    return step, hidden[: len(step.token_ids)]


def judge_chain(
    logits: Tensor,
    draft: Draft,
    params: SamplingParams,
    generator: torch.Generator | None,
    accept: AcceptRule = accept_draft,
    constraint: Constraint | None = None,
) -> Accepted:
    """A chain's verification once the target has scored it: logits [k+1, V] over [pending, x_1..x_k]
    -> the emitted tokens, x_1..x_n and the correction or bonus (a batch judges each sequence's chain
    with this, `batch.decode`)."""
    consumed = 0
    if constraint is not None:  # row i masked by the grammar's state after x_1..x_i
        logits, consumed = masked_rows(constraint, logits, draft.tokens)
    p = warp(logits, params.temperature, params.top_k, params.top_p)  # [k+1, V], the same warp as q
    # [k, V]; a model-free draft (q None): one-hot on the drafted tokens
    q = one_hot_q(draft.tokens, p.shape[-1], p.dtype) if draft.q is None else draft.q.to(p.dtype)
    n, nxt = accept(p, q, draft.tokens, generator, params.greedy)
    if constraint is not None:  # keep x_1..x_n, then the correction or bonus token
        constraint.rollback(consumed - n)
        constraint.advance(nxt)
    return Accepted([*draft.tokens[:n], nxt], logits[: n + 1])


def one_hot_q(tokens: Sequence[int], vocab_size: int, dtype: torch.dtype = torch.float32) -> Tensor:
    """[k, V]: the distributions chosen tokens were "drawn" from, each all mass on its token."""
    index = torch.tensor(list(tokens), dtype=torch.long)[:, None]  # [k, 1]
    return torch.zeros(len(index), vocab_size, dtype=dtype).scatter_(-1, index, 1.0)


def _verify_tree(
    model: TreeLM,
    tokens: list[int],
    draft: Draft,
    params: SamplingParams,
    generator: torch.Generator | None,
    constraint: Constraint | None = None,
) -> tuple[Accepted, Tensor]:
    """One target forward over [pending, tree nodes]; walk the tree (see `Draft`); move the accepted
    path's cache entries into place -> the emitted tokens and the hidden states that predicted them."""
    start = len(tokens) - 1
    with torch.inference_mode():  # inference tensors in, as every forward has (or dynamo compiles twice)
        tree = tree_mask(draft)
        inp = torch.tensor([[tokens[-1], *draft.tokens]])  # [1, n + 1]
        hidden = model(inp, torch.arange(start, start + len(inp[0])), return_hidden=True, tree=tree)[0]
        logits = model.output(hidden)  # [n + 1, V]
    step, rows = judge_tree(logits, draft, params, generator, constraint)
    if rows[1:] != list(range(1, len(rows))):  # the path is not where its first-listed nodes were
        model.keep([start + r for r in rows[1:]], start + 1)
    return step, hidden[rows]


def tree_mask(draft: Draft) -> Tensor:
    """[n + 1, n + 1] bool over [pending, tree nodes]: entry (i, j) says row j is row i or one of its
    ancestors (row 0 is the pending token, node i is row i + 1)."""
    assert draft.parents is not None
    n_nodes = len(draft.tokens)
    tree = torch.zeros(n_nodes + 1, n_nodes + 1, dtype=torch.bool)
    tree[:, 0] = True
    for i, parent in enumerate(draft.parents):
        assert -1 <= parent < i, "a tree lists parents first"
        tree[i + 1] = tree[parent + 1]
        tree[i + 1, i + 1] = True
    return tree


def judge_tree(
    logits: Tensor,
    draft: Draft,
    params: SamplingParams,
    generator: torch.Generator | None,
    constraint: Constraint | None = None,
) -> tuple[Accepted, list[int]]:
    """A tree's walk once the target has scored it: logits [n + 1, V] over [pending, nodes] -> the
    emitted tokens and the rows of the accepted path (0 first), whose cache entries the caller moves
    into place when they are not rows 0, 1, 2, ..."""
    assert draft.parents is not None
    children: list[list[int]] = [[] for _ in range(len(draft.tokens) + 1)]  # rows, in the draft's order
    for i, parent in enumerate(draft.parents):
        children[parent + 1].append(i + 1)
    # ties: the lowest id, as `warp` has it; under a grammar each row is masked as the walk reaches it
    argmax = logits.argmax(-1).tolist() if params.greedy and constraint is None else []
    rows, emitted, seen = [0], [], []
    while True:
        row = rows[-1]
        row_logits = logits[row] if constraint is None else constraint.mask(logits[row])
        seen.append(row_logits)
        if params.greedy:
            nxt = argmax[row] if constraint is None else int(row_logits.argmax())
            child = next((c for c in children[row] if draft.tokens[c - 1] == nxt), None)
        elif draft.q is None:  # only the rows the walk reaches are warped
            nxt = sample(warp(row_logits, params.temperature, params.top_k, params.top_p), generator)
            child = next((c for c in children[row] if draft.tokens[c - 1] == nxt), None)
        else:
            nxt, child = _recursive_rejection(row_logits, draft, children[row], params, generator)
        emitted.append(nxt)
        if constraint is not None:  # the walk emits tokens one by one: the grammar follows, no rollback
            constraint.advance(nxt)
        if child is None:
            break
        rows.append(child)
    return Accepted(emitted, torch.stack(seen)), rows


def _recursive_rejection(
    logits: Tensor,
    draft: Draft,
    children: list[int],
    params: SamplingParams,
    generator: torch.Generator | None,
) -> tuple[int, int | None]:
    """One node of a sampled tree: its children (rows; node c - 1 each) tried in order against the
    target's ``logits`` [V] -> (token emitted, the child row accepted or None)."""
    assert draft.q is not None
    r = warp(logits, params.temperature, params.top_k, params.top_p)
    for c in children:
        x, q = draft.tokens[c - 1], draft.q[c - 1].to(r.dtype)
        u = float(torch.rand((), generator=generator, dtype=torch.float64))
        if u * float(q[x]) < float(r[x]):  # the chain's rule, against what is left of p
            return x, c
        r = residual_distribution(r, q)
    return sample(r, generator), None


def _choose(logits: Tensor, params: SamplingParams, generator: torch.Generator | None) -> int:
    # logits: [V]; the prefill's token is plain sampling, through the same warp
    probs = warp(logits, params.temperature, params.top_k, params.top_p)
    return int(probs.argmax()) if params.greedy else sample(probs, generator)
