"""Two-sample tests for sampled completions, stratified by prompt. Pure numpy/scipy, no I/O.

Every test here compares group X (the baseline's samples) with group Y (another set) prompt by prompt:
a sample is exchangeable only with samples of its own prompt, so the permutation null shuffles the
group labels *within* each prompt. One set of permutations serves every statistic of a comparison.

    mmd_hamming    MMD^2 with a Hamming kernel (the share of positions where two token sequences agree)
    first_token    chi-square on the first token, summed over prompts
    lengths        Kolmogorov-Smirnov distance between the length distributions
    mean_score     difference of the mean baseline log-probability per token (teacher-forced)
    rank           difference of the mean rank position (mid-PIT) of the tokens in the baseline's
                   distribution: where, from its likeliest token (0) to its least likely (1), they fall
    tail           difference of the share of tokens drawn from the baseline's least likely 10%
    contexts       one group's second tokens at contexts it drew more than once (a prompt and the same
                   first token) against the baseline's own distribution there

The last three score both groups' texts under the baseline. A lossy sampler (temperature, hidden top-p)
or weights moves its tokens along the baseline's own ranking; rank and tail are bounded per token, so
a few very unlikely tokens (re-tokenized fragments, -10 nats) do not drown the shift as they do in
the mean log-probability. A token drawn from the baseline has an expected rank of exactly 1/2, yet the
candidate is compared with the baseline's own samples, not with 1/2: re-tokenizing sampled text and
scoring it in one forward pass move both groups alike, and only the comparison is immune to that.

``contexts`` is the one test that sees a change which keeps every token as likely as before and only
moves mass between tokens the baseline rates about alike: a speculative decoder that skips the
residual distribution favours whatever its draft favours, from the second token on (the first is
the prefill's, and first_token's to test). One draw per context cannot show that; several draws at one
context can, against the baseline's distribution there (its top alternatives and the rest as one
category). Per context with n draws x_i and the baseline's p, the sum over pairs i != k of
<e(x_i) - p, e(x_k) - p> has mean n(n-1) ||P - p||^2 (P: the group's own distribution there), 0 when
the group draws from p. Its null comes from drawing each context's counts from p again.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray
from scipy import stats

Floats = NDArray[np.float64]
PAD = "\x00<end>"  # what a finished sequence shows at later positions: two ended samples agree there
TAIL = 0.9  # a token whose mid-PIT is at least this came from the baseline's least likely 10%
# an endpoint's likeliest next tokens and their log-probabilities
Alternatives = tuple[tuple[str, float], ...]
Context = tuple[int, str]  # a prompt (its index) and a first token drawn after it


@dataclass(frozen=True)
class Sample:
    units: tuple[str, ...]  # the completion's tokens as text (characters when the endpoint gave no tokens)
    n_tokens: int  # completion length in tokens (usage), or len(units)
    score: float | None = None  # mean log-probability per token under the baseline (teacher-forced)
    rank: float | None = None  # mean mid-PIT of its tokens under the baseline (see token_rank)
    tail: float | None = None  # share of its tokens with a mid-PIT of TAIL or more


@dataclass(frozen=True)
class Finding:
    name: str
    statistic: float
    p_value: float
    effect: float  # on a scale people read: see EFFECTS
    n_x: int
    n_y: int
    threshold: float  # the smallest statistic this run would have flagged at the given level


EFFECTS = {
    "mmd_hamming": "MMD^2 (share of positions)",
    "first_token": "first-token total variation, mean over prompts",
    "lengths": "KS distance between lengths",
    "mean_score": "Y - X mean baseline log-prob, nats/token",
    "rank": "Y - X mean rank in the baseline's distribution (0 likeliest, 1 least likely)",
    "tail": f"Y - X share of tokens from the baseline's least likely {1 - TAIL:.0%}",
    "contexts": "squared L2 distance to the baseline's next-token distribution at repeated contexts",
}
TEACHER_FORCED = {"mean_score": "score", "rank": "rank", "tail": "tail"}  # test -> Sample field


@dataclass(frozen=True)
class _Stratum:
    labels: NDArray[np.bool_]  # [n] True: group Y
    perms: NDArray[np.bool_]  # [B, n] permuted labels


def _strata(groups: Sequence[tuple[int, int]], n_perm: int, rng: np.random.Generator) -> list[_Stratum]:
    out = []
    for n_x, n_y in groups:
        labels = np.array([False] * n_x + [True] * n_y)
        perms = rng.permuted(np.tile(labels, (n_perm, 1)), axis=1) if n_perm else labels[None, :0]
        out.append(_Stratum(labels, perms))
    return out


def _p_value(observed: float, null: Floats) -> float:
    # (1 + count) / (B + 1): exact under the null, never 0
    return float((1 + np.count_nonzero(null >= observed - 1e-12)) / (len(null) + 1))


def token_rank(logprob: float, top: Sequence[float]) -> float:
    """The mid-PIT of one token: the baseline's probability mass above it plus half its own, with its
    tokens ordered from likeliest to least likely. ``top``: the log-probabilities of the baseline's
    top-k tokens at that position. Tokens outside the top k are one category, ranked last; whatever k
    is, a token drawn from the baseline has an expected mid-PIT of exactly 1/2."""
    probs = np.exp(np.asarray(top, dtype=np.float64))
    p = float(np.exp(logprob))
    if len(probs) and logprob >= float(np.log(probs.min())) - 1e-6:  # one of the top k
        return float(probs[probs > p * (1 + 1e-6)].sum()) + p / 2
    rest = max(0.0, 1.0 - float(probs.sum()))
    return 1.0 - rest / 2


def hamming_kernel(seqs: Sequence[tuple[str, ...]], length: int) -> Floats:
    """[n, n] share of the first ``length`` positions at which two sequences hold the same unit."""
    ids: dict[str, int] = {PAD: 0}
    grid = np.zeros((len(seqs), length), dtype=np.int64)
    for i, seq in enumerate(seqs):
        for j, unit in enumerate(seq[:length]):
            grid[i, j] = ids.setdefault(unit, len(ids))
    same = (grid[:, None, :] == grid[None, :, :]).mean(-1)
    return np.asarray(same, dtype=np.float64)


def _mmd(kernel: Floats, w: Floats) -> Floats:
    # w: [B, n] = 1_x/n_x - 1_y/n_y -> (w K w^T) per row: the (biased) MMD^2 of each labelling
    return np.asarray(np.einsum("bi,ij,bj->b", w, kernel, w), dtype=np.float64)


def _weights(labels: NDArray[np.bool_]) -> Floats:
    y = labels.astype(np.float64)
    x = 1.0 - y
    return np.asarray(x / x.sum(-1, keepdims=True) - y / y.sum(-1, keepdims=True), dtype=np.float64)


def _chi2(onehot: Floats, labels: NDArray[np.bool_]) -> Floats:
    """onehot: [n, C]; labels: [B, n] -> chi-square of the 2 x C table of each labelling."""
    y = labels.astype(np.float64)
    counts_y = y @ onehot  # [B, C]
    total = onehot.sum(0)  # [C]
    counts_x = total - counts_y
    n = onehot.shape[0]
    n_y = y.sum(-1, keepdims=True)
    e_y, e_x = n_y * total / n, (n - n_y) * total / n
    return np.asarray(((counts_y - e_y) ** 2 / e_y + (counts_x - e_x) ** 2 / e_x).sum(-1), dtype=np.float64)


def _first_token_tv(first: list[str], labels: NDArray[np.bool_]) -> float:
    xs = [t for t, lab in zip(first, labels, strict=True) if not lab]
    ys = [t for t, lab in zip(first, labels, strict=True) if lab]
    return 0.5 * sum(abs(xs.count(t) / len(xs) - ys.count(t) / len(ys)) for t in set(first))


def _ks(values: Floats, labels: NDArray[np.bool_]) -> Floats:
    """values: [n]; labels: [B, n] -> KS distance of each labelling (ties handled exactly)."""
    grid = np.unique(values)
    below = values[None, :] <= grid[:, None]  # [G, n]
    y = labels.astype(np.float64)
    cdf_y = (y @ below.T) / y.sum(-1, keepdims=True)  # [B, G]
    cdf_x = ((1 - y) @ below.T) / (1 - y).sum(-1, keepdims=True)
    return np.asarray(np.abs(cdf_y - cdf_x).max(-1), dtype=np.float64)


def _threshold(null: Floats, level: float) -> float:
    return float(np.quantile(null, 1 - level)) if len(null) else float("inf")


def compare_sets(
    x: Sequence[Sequence[Sample]],
    y: Sequence[Sequence[Sample]],
    *,
    n_perm: int,
    seed: int,
    length: int,
    level: float,
) -> list[Finding]:
    """x[j], y[j]: the two groups' samples of prompt j -> the tests, with permutation p-values and the
    permutation null's critical value at ``level`` (the smallest statistic the run could flag)."""
    rng = np.random.default_rng(seed)
    pairs = [(list(a), list(b)) for a, b in zip(x, y, strict=True) if a and b]
    strata = _strata([(len(a), len(b)) for a, b in pairs], n_perm, rng)
    n_x, n_y = sum(len(a) for a, _ in pairs), sum(len(b) for _, b in pairs)
    obs = {"mmd": 0.0, "chi2": 0.0, "tv": 0.0}
    null = {k: np.zeros(n_perm) for k in ("mmd", "chi2")}
    forced = [
        f for f in TEACHER_FORCED.values() if all(_value(s, f) is not None for a, b in pairs for s in a + b)
    ]
    for f in forced:
        obs[f], null[f] = 0.0, np.zeros(n_perm)
    for (a, b), s in zip(pairs, strata, strict=True):
        both = a + b
        kernel = hamming_kernel([smp.units for smp in both], length)
        obs["mmd"] += float(_mmd(kernel, _weights(s.labels[None]))[0])
        null["mmd"] += _mmd(kernel, _weights(s.perms))
        first = [smp.units[0] if smp.units else PAD for smp in both]
        onehot = (np.array(first)[:, None] == np.array(sorted(set(first)))[None, :]).astype(np.float64)
        obs["chi2"] += float(_chi2(onehot, s.labels[None])[0])
        null["chi2"] += _chi2(onehot, s.perms)
        obs["tv"] += _first_token_tv(first, s.labels) / len(pairs)
        for f in forced:  # mean_y - mean_x, averaged over prompts
            values = np.array([_value(smp, f) for smp in both], dtype=np.float64)
            obs[f] += float(-_weights(s.labels[None])[0] @ values) / len(pairs)
            null[f] += (-_weights(s.perms) @ values) / len(pairs)
    values = np.concatenate([np.array([smp.n_tokens for smp in a + b], dtype=np.float64) for a, b in pairs])
    labels = np.concatenate([s.labels for s in strata])
    perms = np.concatenate([s.perms for s in strata], axis=1)
    ks_obs, ks_null = float(_ks(values, labels[None])[0]), _ks(values, perms)

    def result(name: str, stat: float, nul: Floats, effect: float) -> Finding:
        return Finding(name, stat, _p_value(stat, nul), effect, n_x, n_y, _threshold(nul, level))

    out = [
        result("mmd_hamming", obs["mmd"], null["mmd"], obs["mmd"]),
        result("first_token", obs["chi2"], null["chi2"], obs["tv"]),
        result("lengths", ks_obs, ks_null, ks_obs),
    ]
    # two-sided: the size of the difference, whichever way it goes
    out += [
        result(name, abs(obs[f]), np.abs(null[f]), obs[f])
        for name, f in TEACHER_FORCED.items()
        if f in forced
    ]
    return out


def _second_tokens(groups: Sequence[Sequence[Sample]]) -> dict[Context, list[str]]:
    """groups[j]: samples of prompt j -> the second tokens drawn at each context (prompt, first token)."""
    drawn: dict[Context, list[str]] = {}
    for j, group in enumerate(groups):
        for s in group:
            if len(s.units) >= 2:
                drawn.setdefault((j, s.units[0]), []).append(s.units[1])
    return drawn


def repeated_contexts(groups: Sequence[Sequence[Sample]]) -> set[Context]:
    """The contexts (prompt, first token) at which a group drew a second token more than once."""
    return {c for c, tokens in _second_tokens(groups).items() if len(tokens) >= 2}


def contexts(
    groups: Sequence[Sequence[Sample]],
    known: Mapping[Context, Alternatives],
    *,
    n_null: int,
    seed: int,
    level: float,
) -> Finding | None:
    """groups[j]: one group's samples of prompt j; known: the baseline's distribution of the second
    token at each context (prompt, first token), asked for apart -> the ``contexts`` test (statistic:
    the sum over pairs; effect: per pair, an unbiased estimate of the pair-weighted ||P - p||^2). None
    when no context was drawn twice with its distribution known.

    Only the second token is tested: which contexts exist then depends on the first tokens alone, which
    the statistic leaves out, so that drawing each context's counts from p again is its exact null.
    (With deeper positions, two samples share a context only because they agreed before it, which the
    statistic has already counted.)"""
    rng = np.random.default_rng(seed)
    observed, pairs, samples, null = 0.0, 0, 0, np.zeros(n_null)
    for key, tokens in sorted(_second_tokens(groups).items()):
        n = len(tokens)
        if n < 2 or not known.get(key):
            continue
        listed = [(t, v) for t, v in known[key] if not _ambiguous(t)]
        index = {t: i for i, (t, _) in enumerate(listed)}
        p = np.exp(np.array([v for _, v in listed], dtype=np.float64))
        p = np.append(p, max(0.0, 1.0 - p.sum()))  # the rest: every token not listed
        p /= p.sum()
        counts = np.bincount([index.get(t, len(listed)) for t in tokens], minlength=len(p)).astype(np.float64)
        observed += _pair_sum(counts[None], n, p)[0]
        null += _pair_sum(rng.multinomial(n, p, size=n_null).astype(np.float64), n, p)
        pairs, samples = pairs + n * (n - 1), samples + n
    if not pairs:
        return None
    return Finding(
        "contexts", observed, _p_value(observed, null), observed / pairs, 0, samples, _threshold(null, level)
    )


def total_variation(a: Alternatives, b: Alternatives) -> float:
    """Half the L1 distance of two listed distributions (a token one does not list has 0 there)."""
    pa, pb = dict(a), dict(b)
    return 0.5 * sum(
        abs(np.exp(pa.get(t, -np.inf)) - np.exp(pb.get(t, -np.inf))) for t in pa.keys() | pb.keys()
    )


def _ambiguous(token: str) -> bool:
    """A string that several tokens show as (bytes of a split character, specials): the baseline's
    alternatives list one of them, a draw may be any; such draws and alternatives join the rest."""
    return not token or "\ufffd" in token


def _pair_sum(counts: Floats, n: int, p: Floats) -> Floats:
    """counts [B, C] of n draws over categories with probabilities p [C] -> sum over pairs i != k of
    <e_i - p, e_k - p> = ||counts - n p||^2 - sum_i ||e_i - p||^2, per row."""
    return np.asarray(
        ((counts - n * p) ** 2).sum(-1) - (n - 2 * counts @ p + n * float(p @ p)), dtype=np.float64
    )


def _value(sample: Sample, field: str) -> float | None:
    value: float | None = getattr(sample, field)
    return value


def score_se(x: Sequence[Sequence[Sample]], y: Sequence[Sequence[Sample]]) -> float | None:
    """Standard error of the stratified mean-score difference (the mean_score statistic)."""
    terms = []
    for a, b in zip(x, y, strict=True):
        sa = [s.score for s in a if s.score is not None]
        sb = [s.score for s in b if s.score is not None]
        if len(sa) < 2 or len(sb) < 2:
            return None
        terms.append(np.var(sa, ddof=1) / len(sa) + np.var(sb, ddof=1) / len(sb))
    return float(np.sqrt(np.sum(terms)) / len(terms)) if terms else None


def pooled_sd(groups: Sequence[Sequence[Sample]]) -> float | None:
    """One sample's score spread around its prompt's mean (prompts differ; that is not noise)."""
    resid = [
        s - float(np.mean(sc))
        for g in groups
        if len(sc := [s.score for s in g if s.score is not None]) >= 2
        for s in sc
    ]
    return float(np.sqrt(np.mean(np.square(resid)))) if resid else None


def detectable(se: float, alpha: float, power: float = 0.8) -> float:
    """The smallest true difference a two-sided z-test at ``alpha`` detects with ``power``."""
    return float((stats.norm.ppf(1 - alpha / 2) + stats.norm.ppf(power)) * se)


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm-adjusted p-values (step-down, monotone), in the input order."""
    order = np.argsort(p_values)
    m, adjusted, running = len(p_values), [0.0] * len(p_values), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted
