"""Monte Carlo proof that speculative decoding samples the target's distribution, and that the test
has the power to see the classic bugs (mutations that must fail the very same test, same seeds).

Tiny models make the target's distribution over whole continuations exactly enumerable, so the
samples are compared with the truth by a chi-square goodness-of-fit test at alpha = 1e-3.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Sequence

import pytest
import torch
from scipy import stats as sps
from torch import Tensor

from lossless.engine.model.args import ModelArgs
from lossless.engine.model.sampling import SamplingParams, sample, warp
from lossless.engine.model.transformer import Transformer
from lossless.engine.speculate.drafts import ModelDrafter, NgramDrafter
from lossless.engine.speculate.speculative import (
    AcceptRule,
    Draft,
    Drafter,
    SpecStats,
    accept_draft,
    speculative_decode,
)

ALPHA = 1e-3
V = 6  # bigram vocabulary
NEW = 4  # tokens per sampled continuation: 6**4 sequences enumerated exactly
PROMPT = [0, 1, 2, 3, 1, 2]  # has repeats, so the n-gram drafter finds matches
PARAMS = SamplingParams(temperature=0.7, top_k=4, top_p=0.95)
N_SAMPLES = 4000


# Tiny tensors: a second OpenMP thread only spin-waits, which costs seconds on a loaded machine.
pytestmark = pytest.mark.usefixtures("torch_one_thread")


class Bigram(torch.nn.Module):
    """A causal LM whose next-token logits depend on the last token only: logits[t] = table[t]."""

    def __init__(self, table: Tensor) -> None:
        super().__init__()
        self.table = table  # [V, V]
        self.max_seq_len = 64

    def forward(
        self, tokens: Tensor, input_pos: Tensor | None, return_hidden: bool = False, prompt: bool = False
    ) -> Tensor:
        hidden = torch.nn.functional.one_hot(tokens, V).to(self.table.dtype)  # [1, T] -> [1, T, V]
        return hidden if return_hidden else self.output(hidden)

    def output(self, hidden: Tensor) -> Tensor:
        return hidden @ self.table  # the last token's row of the table


def bigram_pair() -> tuple[Bigram, Bigram]:
    gen = torch.Generator().manual_seed(1234)
    target = torch.randn(V, V, generator=gen, dtype=torch.float64) * 1.5
    draft = target + torch.randn(V, V, generator=gen, dtype=torch.float64)  # similar, not equal
    return Bigram(target), Bigram(draft)


def warped(logits: Tensor, params: SamplingParams = PARAMS) -> Tensor:
    return warp(logits, params.temperature, params.top_k, params.top_p)


def exact_distribution(next_probs: Callable[[list[int]], Tensor], prompt: list[int], n: int) -> dict:
    """P(continuation) for every continuation of n tokens with nonzero probability."""
    out: dict[tuple[int, ...], float] = {}
    frontier: list[tuple[tuple[int, ...], float]] = [((), 1.0)]
    for _ in range(n):
        nxt = []
        for seq, prob in frontier:
            p = next_probs(prompt + list(seq))
            nxt += [((*seq, t), prob * float(p[t])) for t in range(len(p)) if p[t] > 0]
        frontier = nxt
    out.update(frontier)
    return out


def chi_square_pvalue(samples: list[tuple[int, ...]], truth: dict) -> float:
    """Goodness of fit; cells expected < 5 times are pooled; an impossible sample fails outright."""
    counts = Counter(samples)
    if any(seq not in truth for seq in counts):
        return 0.0
    n = len(samples)
    big = [seq for seq, p in truth.items() if n * p >= 5]
    observed = [counts[s] for s in big] + [n - sum(counts[s] for s in big)]
    expected = [n * truth[s] for s in big] + [n - sum(n * truth[s] for s in big)]
    if expected[-1] < 1e-9:
        observed, expected = observed[:-1], expected[:-1]
    return float(sps.chisquare(observed, expected).pvalue)


def draw(
    model: torch.nn.Module,
    drafter: Drafter,
    prompt: list[int],
    n_samples: int,
    params: SamplingParams = PARAMS,
    accept: AcceptRule = accept_draft,
    seed: int = 0,
    k_max: int = 3,
) -> tuple[list[tuple[int, ...]], SpecStats]:
    gen = torch.Generator().manual_seed(seed)
    stats = SpecStats(k_max)
    out = []
    for _ in range(n_samples):
        steps = speculative_decode(
            model, drafter, prompt, params, max_new_tokens=NEW, k_max=k_max, generator=gen,
            stats=stats, accept=accept,
        )  # fmt: skip
        out.append(tuple(t for step in steps for t in step.token_ids))
    return out, stats


# --- mutations: broken variants that the same test must reject ------------------------------------


def accept_no_residual(
    p: Tensor, q: Tensor, draft: Sequence[int], generator: torch.Generator | None, greedy: bool
) -> tuple[int, int]:
    """The classic bug: on rejection resample from p instead of norm(max(0, p - q))."""
    for i, x in enumerate(draft):
        u = float(torch.rand((), generator=generator, dtype=torch.float64))
        if not u * float(q[i, x]) < float(p[i, x]):
            return i, sample(p[i], generator)
    return len(draft), sample(p[len(draft)], generator)


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


def bigram_truth(target: Bigram) -> dict:
    return exact_distribution(lambda seq: warped(target.table[seq[-1]]), PROMPT, NEW)


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


# --- a tiny transformer in float64: the same proof through real KV caches and rollback -------------

MICRO = ModelArgs(
    vocab_size=8, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=64, max_seq_len=64,
    tie_embeddings=False,
)  # fmt: skip


def micro_pair() -> tuple[Transformer, Transformer]:
    torch.manual_seed(7)  # nn init draws from the global generator; fixed so the test is fixed
    target = Transformer(MICRO).double()
    draft = Transformer(MICRO).double()
    with torch.no_grad():
        target.output.weight.mul_(4.0)  # sharper than a random init, so distributions differ
        for t, d in zip(target.parameters(), draft.parameters(), strict=True):
            d.copy_(t + 0.2 * torch.randn_like(t))  # a draft that agrees often, not always
    for m in (target, draft):
        m.setup_cache(64)
    return target, draft


def transformer_truth(target: torch.nn.Module, prompt: list[int], params: SamplingParams) -> dict:
    """`exact_distribution` of a transformer's NEW-token continuations of ``prompt`` under ``params``;
    no cache reuse: a fresh forward from position 0 for every prefix."""

    def next_probs(seq: list[int]) -> Tensor:
        with torch.no_grad():
            return warped(target(torch.tensor([seq]), torch.arange(len(seq)))[0, -1], params)

    return exact_distribution(next_probs, prompt, NEW)


def test_tiny_transformer_speculative_matches_exact_distribution() -> None:
    target, draft = micro_pair()
    prompt = [1, 5, 2, 7, 3]
    params = SamplingParams(temperature=0.9, top_k=4)

    truth = transformer_truth(target, prompt, params)
    drafter = ModelDrafter(draft, threshold=0.2)
    samples, stats = draw(target, drafter, prompt, 3000, params=params, k_max=3)
    assert stats.accept_counts[0] > 0 and stats.accept_counts[2] > 0  # rollbacks of every depth
    assert chi_square_pvalue(samples, truth) > ALPHA
