"""Tiny models whose distributions can be enumerated exactly, and the sampling that holds speculative
decoding to them: the shared ground of the exactness tests (tests/unit/engine/speculate/, and the int4
engine's in tests/unit/engine/weights/). A bigram table and a float64 micro-transformer as targets and
drafts; the exact distribution of every continuation; a chi-square goodness-of-fit; a rule that must fail.
"""

from __future__ import annotations

import copy
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import replace

import torch
from scipy import stats as sps
from torch import Tensor

from lossless.engine.model.args import TINY, ModelArgs
from lossless.engine.model.sampling import SamplingParams, sample, warp
from lossless.engine.model.transformer import Transformer
from lossless.engine.speculate.speculative import AcceptRule, Drafter, accept_draft, speculative_decode
from lossless.engine.speculate.stats import SpecStats

ALPHA = 1e-3
V = 6  # bigram vocabulary
NEW = 4  # tokens per sampled continuation: 6**4 sequences enumerated exactly
PROMPT = [0, 1, 2, 3, 1, 2]  # has repeats, so the n-gram drafter finds matches
PARAMS = SamplingParams(temperature=0.7, top_k=4, top_p=0.95)
N_SAMPLES = 4000


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
            model,
            drafter,
            prompt,
            params,
            max_new_tokens=NEW,
            k_max=k_max,
            generator=gen,
            stats=stats,
            accept=accept,
        )
        out.append(tuple(t for step in steps for t in step.token_ids))
    return out, stats


def accept_no_residual(
    p: Tensor, q: Tensor, draft: Sequence[int], generator: torch.Generator | None, greedy: bool
) -> tuple[int, int]:
    """The classic bug: on rejection resample from p instead of norm(max(0, p - q))."""
    for i, x in enumerate(draft):
        u = float(torch.rand((), generator=generator, dtype=torch.float64))
        if not u * float(q[i, x]) < float(p[i, x]):
            return i, sample(p[i], generator)
    return len(draft), sample(p[len(draft)], generator)


def bigram_truth(target: Bigram) -> dict:
    return exact_distribution(lambda seq: warped(target.table[seq[-1]]), PROMPT, NEW)


MICRO = ModelArgs(
    vocab_size=8,
    dim=32,
    n_layers=2,
    n_heads=4,
    n_kv_heads=2,
    hidden_dim=64,
    max_seq_len=64,
    tie_embeddings=False,
)


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


# --- a tiny float64 transformer and a noisy copy of it (greedy equality, constrained decoding) -----------

ARGS = replace(TINY, tie_embeddings=False)


def tiny(seed: int) -> Transformer:
    torch.manual_seed(seed)  # nn init draws from the global generator
    model = Transformer(ARGS).double()
    model.setup_cache(ARGS.max_seq_len)
    return model


def noisy_copy(model: Transformer, scale: float) -> Transformer:
    draft = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for w in draft.parameters():
            w.add_(scale * torch.randn(w.shape, generator=gen, dtype=w.dtype))
    draft.setup_cache(ARGS.max_seq_len)  # its own cache, not the target's
    return draft
