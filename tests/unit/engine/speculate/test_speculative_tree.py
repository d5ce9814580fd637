"""Trees of draft tokens verified in one forward (`speculative.Draft` with parents): exact for any tree,
sampled or greedy, and the cache and hidden states left behind are those of the accepted text alone.

The drafter here makes random trees, so that every shape - deep paths, wide fans, a late sibling
accepted - is met; the draft head's own trees are tested in test_draft_head.py.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence

import pytest
import torch
from exact_models import ALPHA, chi_square_pvalue, draw, micro_pair, transformer_truth

from lossless.engine.model.sampling import SamplingParams
from lossless.engine.model.transformer import Transformer
from lossless.engine.speculate import speculative
from lossless.engine.speculate.speculative import Draft, speculative_decode

pytestmark = pytest.mark.usefixtures("torch_one_thread")

PROMPT = [1, 5, 2, 7, 3]
PARAMS = SamplingParams(temperature=0.9, top_k=4)


class RandomTrees:
    """Drafts a random tree of ``nodes`` tokens (depth at most k, parents listed first) each step."""

    def __init__(self, nodes: int, seed: int = 0) -> None:
        self.nodes, self.rng = nodes, torch.Generator().manual_seed(seed)
        self.hidden: list[torch.Tensor] = []  # what the decoder handed over, step by step

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self.hidden = []

    def propose(self, context, k, params, generator, hidden):  # type: ignore[no-untyped-def]
        self.hidden.append(hidden)
        tokens: list[int] = []
        parents: list[int] = []
        depth: list[int] = []
        for _ in range(self.nodes if k > 0 else 0):
            fits = [-1] + [i for i, d in enumerate(depth) if d < k]
            parent = fits[int(torch.randint(len(fits), (), generator=self.rng))]
            tokens.append(int(torch.randint(8, (), generator=self.rng)))
            parents.append(parent)
            depth.append(1 + (depth[parent] if parent >= 0 else 0))
        return Draft(tokens, None, parents)

    def observe(self, drafted: int, accepted: int) -> None:
        pass


class SampledTrees(RandomTrees):
    """Random shapes again, but every node's children are draws from one random q (the node's),
    verified by recursive rejection sampling; the shape never looks at the drawn tokens. The draws are
    independent, or ``distinct`` (without replacement: each sibling's q is the node's without the
    earlier siblings' tokens, renormalised; ``claim_parent_q`` records the node's q instead, a bug).
    ``scale`` sharpens the q's (a larger one makes a first draw take more of q's mass)."""

    def __init__(self, nodes: int, distinct: bool = False, claim_parent_q: bool = False, scale: float = 2.0):
        super().__init__(nodes)
        self.distinct, self.claim_parent_q, self.scale = distinct, claim_parent_q, scale

    def propose(self, context, k, params, generator, hidden):  # type: ignore[no-untyped-def]
        self.hidden.append(hidden)
        tokens: list[int] = []
        parents: list[int] = []
        qs: list[torch.Tensor] = []
        level, depth = [-1], 0
        while level and depth < k and len(tokens) < self.nodes:
            after = []
            for node in level:
                q = torch.softmax(self.scale * torch.randn(8, generator=self.rng, dtype=torch.float64), -1)
                q_sibling = q
                for _ in range(int(torch.randint(1, 4, (), generator=self.rng))):
                    if len(tokens) < self.nodes:
                        tokens.append(int(torch.multinomial(q_sibling, 1, generator=generator)))
                        parents.append(node)
                        qs.append(q if self.claim_parent_q else q_sibling)
                        after.append(len(tokens) - 1)
                        if self.distinct:
                            q_sibling = q_sibling.clone()
                            q_sibling[tokens[-1]] = 0.0
                            q_sibling = q_sibling / q_sibling.sum()
            level, depth = after, depth + 1
        return Draft(tokens, torch.stack(qs) if qs else None, parents if qs else None)


@pytest.mark.parametrize("distinct", [False, True], ids=["independent", "without replacement"])
def test_sampled_trees_keep_the_target_distribution_exactly(distinct: bool) -> None:
    target, _ = micro_pair()
    drafter = SampledTrees(6, distinct, scale=3.0 if distinct else 2.0)
    samples, stats = draw(target, drafter, PROMPT, 3000, params=PARAMS)
    assert stats.accept_counts[0] > 0 and stats.accept_counts[1] > 0 and stats.accept_counts[2] > 0
    assert chi_square_pvalue(samples, transformer_truth(target, PROMPT, PARAMS)) > ALPHA


def test_siblings_drawn_without_replacement_but_claiming_the_parents_q_fail_the_same_test() -> None:
    """Recursive rejection must be given the distribution each sibling was really drawn from (the
    exact test above draws the same sharp q's)."""
    target, _ = micro_pair()
    drafter = SampledTrees(6, True, claim_parent_q=True, scale=3.0)
    samples, _ = draw(target, drafter, PROMPT, 3000, params=PARAMS)
    assert chi_square_pvalue(samples, transformer_truth(target, PROMPT, PARAMS)) < ALPHA


def test_sampled_trees_without_the_residual_between_siblings_fail_the_same_test(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The classic bug, one level up: a rejected sibling must take its q out of what the next one is
    tried against."""
    target, _ = micro_pair()
    monkeypatch.setattr(speculative, "residual_distribution", lambda p, q: p)
    samples, _ = draw(target, SampledTrees(6), PROMPT, 3000, params=PARAMS)
    assert chi_square_pvalue(samples, transformer_truth(target, PROMPT, PARAMS)) < ALPHA


def test_random_trees_keep_the_target_distribution_exactly() -> None:
    target, _ = micro_pair()

    truth = transformer_truth(target, PROMPT, PARAMS)
    samples, stats = draw(target, RandomTrees(6), PROMPT, 3000, params=PARAMS)  # chosen, not sampled
    assert stats.accept_counts[0] > 0 and stats.accept_counts[1] > 0 and stats.accept_counts[2] > 0
    assert chi_square_pvalue(samples, truth) > ALPHA


def _matches_a_plain_forward(target: Transformer, params: SamplingParams) -> bool:
    """Decode through random trees, then run the emitted text through a fresh copy of the target in
    one plain forward: the hidden states handed to the drafter and the cache left behind must match."""
    fresh = copy.deepcopy(target)
    gen, same = torch.Generator().manual_seed(0), True
    for prompt in (PROMPT, [4, 4, 0], [6, 1, 2, 3, 5, 7, 0, 2]):
        drafter = RandomTrees(8, seed=len(prompt))
        steps = speculative_decode(target, drafter, prompt, params, max_new_tokens=24, k_max=3, generator=gen)
        text = prompt + [t for s in steps for t in s.token_ids]
        with torch.no_grad():
            want = fresh(torch.tensor([text[:-1]]), torch.arange(len(text) - 1), return_hidden=True)[0]
        got = torch.cat(drafter.hidden[1:])  # the steps' states, from position len(prompt)
        same &= torch.allclose(got, want[len(prompt) : len(prompt) + len(got)])
        n = len(text) - 1  # cache entries: all but the pending token
        for mine, theirs in zip(target.layers, fresh.layers, strict=True):
            a, b = mine.attention.kv_cache, theirs.attention.kv_cache
            same &= torch.allclose(a.k[:, :, :n], b.k[:, :, :n]) and torch.allclose(
                a.v[:, :, :n], b.v[:, :, :n]
            )
    return bool(same)


@pytest.mark.parametrize("params", [PARAMS, SamplingParams(temperature=0.0)], ids=["sampled", "greedy"])
def test_tree_steps_leave_the_cache_and_states_a_plain_forward_gives(params: SamplingParams) -> None:
    target, _ = micro_pair()
    assert _matches_a_plain_forward(target, params)


@pytest.mark.parametrize("broken", ["no cache move", "no tree mask"])
def test_tree_mutations_fail_the_same_check(broken: str, monkeypatch: pytest.MonkeyPatch) -> None:
    target, _ = micro_pair()
    if broken == "no cache move":  # the next step reads whichever sibling sat in the slot
        monkeypatch.setattr(target, "keep", lambda slots, start: None)
    else:  # siblings see each other as if the tree were one sequence
        forward = target.forward
        monkeypatch.setattr(target, "forward", lambda *a, tree=None, **kw: forward(*a, **kw))
    assert not _matches_a_plain_forward(target, PARAMS)


def test_a_tree_is_cut_to_the_cache_that_is_left() -> None:
    """Near the end of the context a tree keeps its first nodes only (parents first: still a tree)."""
    target, _ = micro_pair()  # a 64-position cache
    prompt = [1, 2, 3] * 20  # 60 tokens: 4 slots left, the pending token's included
    steps = speculative_decode(
        target,
        RandomTrees(12),
        prompt,
        PARAMS,
        max_new_tokens=4,
        k_max=3,
        generator=torch.Generator().manual_seed(0),
    )
    assert sum(len(s.token_ids) for s in steps) == 4
