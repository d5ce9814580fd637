"""Monte Carlo proof that speculative decoding samples the target's distribution, and that the test
has the power to see the classic bugs (mutations that must fail the very same test, same seeds).

Tiny models make the target's distribution over whole continuations exactly enumerable, so the
samples are compared with the truth by a chi-square goodness-of-fit test at alpha = 1e-3.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import pytest
import torch
from exact_models import (
    ALPHA,
    N_SAMPLES,
    NEW,
    PROMPT,
    Bigram,
    V,
    accept_no_residual,
    bigram_pair,
    bigram_truth,
    chi_square_pvalue,
    draw,
    micro_pair,
    transformer_truth,
    warped,
)
from scipy import stats as sps

from lossless.engine.model.sampling import SamplingParams, sample
from lossless.engine.speculate.drafts import ModelDrafter, NgramDrafter
from lossless.engine.speculate.speculative import (
    AcceptRule,
    Draft,
    Drafter,
    accept_draft,
)

# Tiny tensors: a second OpenMP thread only spin-waits, which costs seconds on a loaded machine.
pytestmark = pytest.mark.usefixtures("torch_one_thread")


# --- mutations: broken variants that the same test must reject ------------------------------------


class PeekingDrafter(ModelDrafter):
    """Stops *before* a token it dislikes: draft x_{i+1}, drop it when q(x_{i+1}) < threshold.

    The kept tokens then come from q restricted to confident tokens, not from the q the decoder
    is told about, and the output is biased."""

    def propose(self, context, k, params, generator, hidden) -> Draft:  # type: ignore[no-untyped-def]
        tokens, qs = [], []
        for _ in range(k):
            prev = tokens[-1] if tokens else context[-1]
            q = warped(self.model(torch.tensor([[prev]]), None)[0, -1], params)
            x = sample(q, generator)
            if float(q[x]) < self.threshold:
                break  # peeked at x_{i+1} to decide to stop at i
            tokens.append(x)
            qs.append(q)
        return Draft(tokens, torch.stack(qs) if qs else None)


class OneSidedTemperatureDrafter(ModelDrafter):
    """Samples its draft at the request's temperature but reports q at temperature 1."""

    def propose(self, context, k, params, generator, hidden) -> Draft:  # type: ignore[no-untyped-def]
        draft = super().propose(context, k, params, generator, hidden)
        prev = [context[-1], *draft.tokens[:-1]]
        q_unwarped = torch.softmax(self.model(torch.tensor([prev]), None)[0], -1)  # [k, V]
        return Draft(draft.tokens, q_unwarped)


# --- the tests ------------------------------------------------------------------------------------


def test_bigram_exact_distribution_is_a_distribution() -> None:
    target, _ = bigram_pair()
    truth = bigram_truth(target)
    assert math.isclose(sum(truth.values()), 1.0, abs_tol=1e-12)
    assert len(truth) < V**NEW  # top-k/top-p masking removed sequences: p = 0 cells exist


@pytest.mark.parametrize("drafter_kind", ["model", "ngram"])
def test_bigram_speculative_matches_exact_distribution(drafter_kind: str) -> None:
    target, draft = bigram_pair()
    drafter: Drafter = ModelDrafter(draft, threshold=0.3) if drafter_kind == "model" else NgramDrafter(3)
    samples, stats = draw(target, drafter, PROMPT, N_SAMPLES)
    assert stats.accepted > 0 and stats.accepted < stats.drafted  # both branches exercised
    assert chi_square_pvalue(samples, bigram_truth(target)) > ALPHA


MUTATIONS: dict[str, Callable[[Bigram], tuple[Drafter, AcceptRule]]] = {
    "no residual": lambda d: (ModelDrafter(d, threshold=0.3), accept_no_residual),
    "peeking stop rule": lambda d: (PeekingDrafter(d, threshold=0.3), accept_draft),
    "temperature on one side": lambda d: (OneSidedTemperatureDrafter(d, threshold=0.3), accept_draft),
}


@pytest.mark.parametrize("name", list(MUTATIONS))
def test_mutation_fails_the_same_test(name: str) -> None:
    target, draft = bigram_pair()
    drafter, accept = MUTATIONS[name](draft)
    samples, _ = draw(target, drafter, PROMPT, N_SAMPLES, accept=accept)
    assert chi_square_pvalue(samples, bigram_truth(target)) < ALPHA, f"{name} went undetected"


class Recorder:
    """Wraps a drafter to log each proposal's context and tokens, for the acceptance z-test."""

    def __init__(self, inner: Drafter) -> None:
        self.inner = inner
        self.log: list[tuple[list[int], list[int], int]] = []  # (context, draft, accepted)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self.inner.begin(prompt_ids)

    def propose(self, context, k, params, generator, hidden) -> Draft:  # type: ignore[no-untyped-def]
        draft = self.inner.propose(context, k, params, generator, hidden)
        self.log.append((list(context), list(draft.tokens), -1))
        return draft

    def observe(self, drafted: int, accepted: int) -> None:
        ctx, toks, _ = self.log[-1]
        self.log[-1] = (ctx, toks, accepted)
        self.inner.observe(drafted, accepted)


def test_acceptance_rate_equals_sum_of_min_p_q() -> None:
    """Each verified position i is accepted with probability sum_x min(p_i(x), q_i(x)) given its
    context; summed over positions, (accepted - sum alpha) / sqrt(sum alpha(1-alpha)) ~ N(0, 1)."""
    target, draft = bigram_pair()
    recorder = Recorder(ModelDrafter(draft, threshold=0.3))
    draw(target, recorder, PROMPT, 2000)
    hits, mean, var = 0, 0.0, 0.0
    for ctx, toks, accepted in recorder.log:
        prev = [ctx[-1], *toks]
        for i in range(min(accepted + 1, len(toks))):  # positions that were verified
            p, q = warped(target.table[prev[i]]), warped(draft.table[prev[i]])
            alpha = float(torch.minimum(p, q).sum())
            hits += i < accepted
            mean += alpha
            var += alpha * (1 - alpha)
    z = (hits - mean) / math.sqrt(var)
    assert abs(z) < sps.norm.isf(ALPHA / 2), z


def test_tiny_transformer_speculative_matches_exact_distribution() -> None:
    target, draft = micro_pair()
    prompt = [1, 5, 2, 7, 3]
    params = SamplingParams(temperature=0.9, top_k=4)

    truth = transformer_truth(target, prompt, params)
    drafter = ModelDrafter(draft, threshold=0.2)
    samples, stats = draw(target, drafter, prompt, 3000, params=params, k_max=3)
    assert stats.accept_counts[0] > 0 and stats.accept_counts[2] > 0  # rollbacks of every depth
    assert chi_square_pvalue(samples, truth) > ALPHA
