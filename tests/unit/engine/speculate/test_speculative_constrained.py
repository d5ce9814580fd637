"""Speculative decoding under a grammar (constrained decoding, `engine.model.constrain`) samples exactly the
constrained target: the target's distribution with the forbidden tokens masked out, renormalised.

The tiny bigram of test_speculative_mc.py, over a six-token vocabulary that is a real tokenizer
(`tiny_grammar.char_tokenizer`: eos then "abcde"), under a real llguidance grammar; the truth is
enumerated exactly from a mask written out here by hand, so the grammar library is checked too.
Mutations - drafts judged against the unmasked target, the grammar not rolled back past rejected
tokens - must fail the very same chi-square test. Greedy: speculative == plain token for token.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import pytest
import torch
from exact_models import (
    ALPHA,
    NEW,
    PARAMS,
    Bigram,
    bigram_pair,
    chi_square_pvalue,
    exact_distribution,
    noisy_copy,
    tiny,
    warped,
)
from tiny_grammar import PRINTABLE, char_tokenizer
from torch import Tensor

from lossless.engine.model.constrain import Constraint, json_schema_grammar, lark_grammar
from lossless.engine.model.generate import plain_tokens
from lossless.engine.model.sampling import SamplingParams
from lossless.engine.speculate import speculative
from lossless.engine.speculate.drafts import ModelDrafter, NgramDrafter
from lossless.engine.speculate.speculative import Draft, Drafter, speculative_decode
from lossless.engine.speculate.stats import SpecStats

pytestmark = pytest.mark.usefixtures("torch_one_thread")

PROMPT = [1, 3, 2, 4, 1, 3, 2]  # repeats: n-gram drafts get made (and often break the grammar)
GRAMMAR = "start: /[ab][cde][abe][a-e]/"  # four tokens, then only eos
ALLOWED = [{1, 2}, {3, 4, 5}, {1, 2, 5}, {1, 2, 3, 4, 5}, {0}]  # the same, by hand, as token ids
N_SAMPLES = 3000
TOKENIZER = char_tokenizer("abcde")


_CONSTRAINT = Constraint(lark_grammar(GRAMMAR), TOKENIZER, 6)


def constraint() -> Constraint:
    _CONSTRAINT.reset()  # compiled once: a sample costs ~1 ms less
    return _CONSTRAINT


class TreeBigram(Bigram):
    """The bigram verifying a tree: a node's logits depend on its own token alone, so the tree's
    attention mask changes nothing, and there is no cache to move."""

    def forward(
        self, tokens: Tensor, input_pos: Tensor | None, return_hidden: bool = False, tree=None, prompt=False
    ):  # type: ignore[no-untyped-def]
        return super().forward(tokens, input_pos, return_hidden)

    def keep(self, slots: list[int], start: int) -> None:
        pass


def truth(target: Bigram) -> dict:
    def next_probs(seq: list[int]) -> Tensor:
        logits = target.table[seq[-1]].clone()
        allowed = ALLOWED[len(seq) - len(PROMPT)]
        logits[[t for t in range(6) if t not in allowed]] = float("-inf")
        return warped(logits)

    return exact_distribution(next_probs, PROMPT, NEW)


class TinyTrees:
    """Random trees over the six tokens (chosen, q None, or sampled from a random q and verified by
    recursive rejection); the shape never looks at the tokens."""

    def __init__(self, sampled: bool) -> None:
        self.sampled, self.rng = sampled, torch.Generator().manual_seed(3)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        pass

    def propose(self, context, k, params, generator, hidden):  # type: ignore[no-untyped-def]
        tokens: list[int] = []
        parents: list[int] = []
        qs: list[Tensor] = []
        level = [-1]
        for _ in range(k):
            after = []
            for node in level:
                q = torch.softmax(2 * torch.randn(6, generator=self.rng, dtype=torch.float64), -1)
                for _ in range(int(torch.randint(1, 3, (), generator=self.rng))):
                    tokens.append(int(torch.multinomial(q, 1, generator=self.rng)))
                    parents.append(node)
                    qs.append(q)
                    after.append(len(tokens) - 1)
            level = after
        q_all = torch.stack(qs) if self.sampled and qs else None
        return Draft(tokens, q_all, parents if tokens else None)

    def observe(self, drafted: int, accepted: int) -> None:
        pass


def draw_constrained(
    target: Bigram, drafter: Drafter | None, n: int = N_SAMPLES, seed: int = 0
) -> tuple[list[tuple[int, ...]], SpecStats]:
    """n continuations of PROMPT under GRAMMAR: speculative, or plain when ``drafter`` is None."""
    gen = torch.Generator().manual_seed(seed)
    stats = SpecStats(3)
    out = []
    for _ in range(n):
        if drafter is None:
            source = plain_tokens(target, PROMPT, PARAMS, gen, constraint())  # type: ignore[arg-type]
            tokens = [t for _, step in zip(range(NEW), source, strict=False) for t in step.token_ids]
        else:
            steps = speculative_decode(
                target,
                drafter,
                PROMPT,
                PARAMS,
                max_new_tokens=NEW,
                k_max=3,
                generator=gen,
                stats=stats,
                constraint=constraint(),
            )
            tokens = [t for step in steps for t in step.token_ids]
        out.append(tuple(tokens))
    return out, stats


def test_the_grammar_masks_what_the_hand_written_mask_says() -> None:
    c = constraint()
    for allowed, token in zip(ALLOWED, [2, 5, 5, 1, 0], strict=True):
        assert set(c.allowed().nonzero().flatten().tolist()) == allowed
        assert c.advance(token) if token else True


def test_plain_constrained_sampling_matches_the_masked_truth() -> None:
    target, _ = bigram_pair()
    samples, _ = draw_constrained(target, None)
    assert chi_square_pvalue(samples, truth(target)) > ALPHA


DRAFTERS = {
    "model": lambda d: ModelDrafter(d, threshold=0.3),
    "ngram": lambda d: NgramDrafter(3),
    "chosen tree": lambda d: TinyTrees(sampled=False),
    "sampled tree": lambda d: TinyTrees(sampled=True),
}


@pytest.mark.parametrize("kind", list(DRAFTERS))
def test_constrained_speculative_matches_the_masked_truth(kind: str) -> None:
    target, draft = bigram_pair()
    target = TreeBigram(target.table)
    samples, stats = draw_constrained(target, DRAFTERS[kind](draft))
    assert stats.accepted > 0 and stats.accepted < stats.drafted  # both branches exercised
    assert chi_square_pvalue(samples, truth(target)) > ALPHA


@pytest.mark.parametrize("broken", ["unmasked target", "no rollback"])
def test_mutations_fail_the_same_test(broken: str, monkeypatch: pytest.MonkeyPatch) -> None:
    target, draft = bigram_pair()
    if broken == "unmasked target":  # the grammar walks the draft, but p is the model's own
        masked = speculative.masked_rows
        monkeypatch.setattr(speculative, "masked_rows", lambda c, lg, t: (lg, masked(c, lg, t)[1]))
    else:  # rejected draft tokens stay in the grammar's state
        monkeypatch.setattr(Constraint, "rollback", lambda self, n: None)
    samples, _ = draw_constrained(target, ModelDrafter(draft, threshold=0.3))
    assert chi_square_pvalue(samples, truth(target)) < ALPHA, f"{broken} went undetected"


# --- greedy: a real transformer, a JSON schema -------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {"n": {"type": "integer"}, "tag": {"type": "string", "enum": ["ab", "cd"]}},
    "required": ["n", "tag"],
    "additionalProperties": False,
}
GREEDY = SamplingParams(temperature=0.0)
JSON_PROMPT = [3, 17, 42, 8, 3, 17, 42, 8, 3, 17]


def json_constraint() -> Constraint:
    return Constraint(json_schema_grammar(SCHEMA), char_tokenizer(PRINTABLE), 96)


@pytest.mark.parametrize("kind", ["ngram", "noisy draft", "chosen tree"])
def test_greedy_constrained_speculative_equals_plain(kind: str) -> None:
    target = tiny(0)
    plain = plain_tokens(target, JSON_PROMPT, GREEDY, torch.Generator(), json_constraint())
    expected = [t for _, step in zip(range(30), plain, strict=False) for t in step.token_ids]
    drafter: Drafter = {
        "ngram": lambda: NgramDrafter(k_max=5),
        "noisy draft": lambda: ModelDrafter(noisy_copy(target, 0.05), threshold=0.0),
        "chosen tree": lambda: _TreesOf96(),
    }[kind]()
    steps = speculative_decode(
        target, drafter, JSON_PROMPT, GREEDY, max_new_tokens=30, k_max=5, constraint=json_constraint()
    )
    got = [t for s in steps for t in s.token_ids]
    assert got == expected
    text = char_tokenizer(PRINTABLE).decode(got)
    assert text.startswith('{"') and ("}" not in text or 0 in got)  # JSON, closed only at its end


class _TreesOf96(TinyTrees):
    """Trees over TINY's 96 tokens, drafted from the JSON alphabet so that some get accepted."""

    def __init__(self) -> None:
        super().__init__(sampled=False)

    def propose(self, context, k, params, generator, hidden):  # type: ignore[no-untyped-def]
        draft = super().propose(context, k, params, generator, hidden)
        alphabet = char_tokenizer(PRINTABLE).encode('{"n":1,"tag": "ab"}', add_special=False)
        return replace(draft, tokens=[alphabet[t % len(alphabet)] for t in draft.tokens])
