"""Greedy speculative decoding equals plain greedy decoding token for token (float64, tiny models),
whatever the drafter, and a draft identical to the target is always accepted."""

from __future__ import annotations

from collections.abc import Sequence

import pytest
import torch
from exact_models import noisy_copy, tiny
from torch import Tensor

from lossless.engine.model.sampling import SamplingParams
from lossless.engine.model.transformer import Transformer
from lossless.engine.speculate.drafts import ModelDrafter, NgramDrafter, NoDrafter
from lossless.engine.speculate.speculative import Draft, Drafter, speculative_decode
from lossless.engine.speculate.stats import SpecStats

GREEDY = SamplingParams(temperature=0.0)
NEW = 40
# Untied: a random model whose output layer is its embedding just repeats the last token.


# Tiny tensors: a second OpenMP thread only spin-waits, which costs seconds on a loaded machine.
pytestmark = pytest.mark.usefixtures("torch_one_thread")


@pytest.fixture(scope="module")
def target() -> Transformer:
    return tiny(0)


def plain_greedy(model: Transformer, prompt: list[int], n: int) -> list[int]:
    """The reference: recompute the whole sequence for every token, no cache reuse at all."""
    seq = list(prompt)
    with torch.no_grad():
        for _ in range(n):
            seq.append(int(model(torch.tensor([seq]), torch.arange(len(seq)))[0, -1].argmax()))
    return seq[len(prompt) :]


def spec(
    model: Transformer, drafter: Drafter, prompt: list[int], k: int = 5, **kw
) -> tuple[list[int], SpecStats]:  # type: ignore[no-untyped-def]
    stats = SpecStats(k)
    steps = speculative_decode(model, drafter, prompt, GREEDY, max_new_tokens=NEW, k_max=k, stats=stats, **kw)
    return [t for s in steps for t in s.token_ids], stats


PROMPT = [3, 17, 42, 8, 3, 17, 42, 8, 3, 17, 60, 61, 62, 3, 17]  # repeats: n-gram drafts get made


@pytest.mark.parametrize("kind", ["none", "ngram", "noisy draft", "unrelated draft"])
def test_greedy_speculative_equals_plain(target: Transformer, kind: str) -> None:
    drafter: Drafter = {
        "none": lambda: NoDrafter(),
        "ngram": lambda: NgramDrafter(k_max=5),
        "noisy draft": lambda: ModelDrafter(noisy_copy(target, 0.05), threshold=0.0),
        "unrelated draft": lambda: ModelDrafter(tiny(5), threshold=0.0),
    }[kind]()
    out, stats = spec(target, drafter, PROMPT)
    reference = plain_greedy(target, PROMPT, NEW)
    assert len(set(reference)) > 8  # a reference that varies, or equality proves little
    assert out == reference
    assert stats.emitted + 1 == NEW  # the prefill's token + the verify steps' tokens
    if kind != "none":
        assert stats.drafted > 0
    if kind == "unrelated draft":
        assert stats.accepted < stats.drafted  # rejections (and so rollbacks) happened


@pytest.mark.parametrize("params", [GREEDY, SamplingParams(temperature=1.0), SamplingParams(0.7, top_k=20)])
def test_draft_identical_to_target_is_always_accepted(target: Transformer, params: SamplingParams) -> None:
    drafter = ModelDrafter(noisy_copy(target, 0.0), threshold=0.0)
    stats = SpecStats(4)
    gen = torch.Generator().manual_seed(3)
    steps = speculative_decode(
        target, drafter, PROMPT, params, max_new_tokens=NEW, k_max=4, generator=gen, stats=stats
    )
    assert sum(len(s.token_ids) for s in steps) == NEW
    assert stats.drafted > 0 and stats.accepted == stats.drafted
    assert stats.accept_counts[4] == stats.steps - 1  # every step full-length, but the cut last one


def test_step_logits_are_the_targets_unwarped_logits(target: Transformer) -> None:
    steps = list(speculative_decode(target, NgramDrafter(5), PROMPT, GREEDY, max_new_tokens=12, k_max=5))
    seq = PROMPT + [t for s in steps for t in s.token_ids]
    with torch.no_grad():
        full = target(torch.tensor([seq]), torch.arange(len(seq)))[0]  # [T, V]
    rows = torch.cat([s.logits for s in steps])  # one row per emitted token
    assert torch.allclose(rows, full[len(PROMPT) - 1 : -1], atol=1e-10)


class HiddenProbe:
    """A drafter that reads the target's hidden state (as a trained draft head will)."""

    def __init__(self) -> None:
        self.seen: list[tuple[list[int], Tensor]] = []

    def begin(self, prompt_ids: Sequence[int]) -> None:
        pass

    def propose(self, context, k, params, generator, hidden) -> Draft:  # type: ignore[no-untyped-def]
        self.seen.append((list(context), hidden))
        return Draft([], None)

    def observe(self, drafted: int, accepted: int) -> None:
        pass


def test_hidden_state_reaches_the_drafter(target: Transformer) -> None:
    probe = HiddenProbe()
    out = [
        t
        for s in speculative_decode(target, probe, PROMPT, GREEDY, max_new_tokens=6, k_max=3)
        for t in s.token_ids
    ]
    assert out == plain_greedy(target, PROMPT, 6)
    seen = 0  # positions whose hidden state the drafter has been given, in order
    for context, hidden in probe.seen:
        with torch.no_grad():  # the new states, up to the one that predicted context[-1]
            ref = target(torch.tensor([context[:-1]]), torch.arange(len(context) - 1), return_hidden=True)
        assert len(hidden) == len(context) - 1 - seen
        assert torch.allclose(hidden, ref[0, seen:], atol=1e-10)
        seen = len(context) - 1
