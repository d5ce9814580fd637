"""verify's plan: what one run may spend (``Budget``), the error rates it holds (``Criteria``), and how
both are spread over its looks. No numpy, no network: the CLI reads budgets and what each can show from
here for ``--help``, before anything runs.

The samples are drawn in looks (10, 20, then 30 per prompt and set by default) and verify stops at the
first look that settles the question, so a budget is a ceiling, not a fixed spend. Each error rate is
spent over the looks in proportion to the samples each adds (a linear alpha-spending plan): look k
tests at ``alpha * share_k``, and since the shares sum to one, the chance of that error at any look,
wherever the run stops, is at most ``alpha`` (a union bound: no assumption on how looks correlate).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from statistics import NormalDist

from lossless.errors import UsageError

MAX_SAMPLES, MAX_TOKENS = 10_000, 4096  # far past "large" (16 x 48 tokens); past them, a typo
TESTS = 9  # the A/B family without tool parity: seven two-sample tests, task accuracy, distance (Holm's m)


@dataclass(frozen=True)
class Budget:
    prompts: int  # distinct prompts (at most len(collect.PROMPTS))
    samples: int  # at most this many completions per prompt and set (three sets: A, A', candidate)
    max_tokens: int  # per completion
    tasks: int  # bundled tasks, greedy, on both endpoints
    # Short completions, candidate only, for the contexts test: many draws at the same few contexts
    # (the baseline's distribution there is asked for, so it needs none), split over the ``focus``
    # prompts whose first token the baseline is surest of, so that they share their first token. This
    # many at the first look, and more at each later one in proportion to the samples.
    repeats: int = 0
    focus: int = 1
    repeat_tokens: int = 3  # the first token comes from the prefill; speculation acts from the second
    looks: int = 3  # the samples come in this many equal steps, each followed by the tests
    permutations: int = 2000  # permutation-null draws per comparison at least (more where a look needs)

    @property
    def label(self) -> str:
        return f"{self.prompts}x{self.samples}x{self.max_tokens}"

    @property
    def schedule(self) -> tuple[int, ...]:
        """Samples per prompt and set drawn by the end of each look."""
        return tuple(math.ceil(self.samples * (k + 1) / self.looks) for k in range(self.looks))


@dataclass(frozen=True)
class Criteria:
    """The error rates verify holds and the differences it is asked to rule out."""

    alpha: float = 0.01  # "different" for a candidate serving the baseline's distribution: all tests, looks
    alpha_equivalent: float = 0.05  # "equivalent" for a score difference at the tolerance or more: all looks
    alpha_aa: float = 0.01  # the A/A family at each look: a baseline that differs from itself
    # The score difference equivalence must rule out, in standard deviations of one sample's score: a
    # scale-free margin (nats/token mean little across models).
    tolerance_sd: float = 0.6
    margin: float = 0.1  # task accuracy: the TOST equivalence margin (absolute)
    # nats a token: the largest log-probability distance (distance.py) still called the same model.
    # Faithful servers of the same weights measured 0.04-0.06 apart, the nearest change of weights (a
    # requantization) 0.23 (docs/results/2026-12-06-verify-distance.md)
    tolerance: float = 0.1
    aa_margin: float = 2.0  # a test the baseline fails against itself needs this many times its drift
    hint: float = 0.05  # a Holm p-value below this before the last look draws more samples, not a verdict


@dataclass(frozen=True)
class Look:
    """One look of a run: its place in the schedule and the share of each error rate it spends."""

    index: int = 0
    schedule: tuple[int, ...] = (1,)

    @property
    def final(self) -> bool:
        return self.index == len(self.schedule) - 1

    @property
    def samples(self) -> int:
        return self.schedule[self.index]

    @property
    def before(self) -> int:
        """Samples per prompt and set drawn by the looks before this one."""
        return self.schedule[self.index - 1] if self.index else 0

    @property
    def share(self) -> float:
        return (self.samples - self.before) / self.schedule[-1]

    def level(self, alpha: float) -> float:
        return alpha * self.share


def looks(budget: Budget) -> tuple[Look, ...]:
    return tuple(Look(k, budget.schedule) for k in range(budget.looks))


def score_se_sd(prompts: int, samples: int) -> float:
    """The standard error of the stratified score difference (the baseline's two sets pooled against the
    candidate's), in sd of one sample's score, with every sample scored."""
    return math.sqrt(1 / (2 * samples) + 1 / samples) / math.sqrt(prompts)


def task_reach(tasks: int) -> float:
    """The narrowest half-width of the tasks' 90% interval (TOST): no task answered differently."""
    return NormalDist().inv_cdf(0.95) * 1 / (tasks + 2) if tasks else math.inf


def can_show(budget: Budget, criteria: Criteria, tasks: int | None = None) -> tuple[float, float, str]:
    """What a budget can show at its last look, from its sizes alone: the score difference it detects
    with 80% power (sd), the narrowest bound it can put on a score difference (sd), and why it cannot
    confirm equivalence ("" when it can)."""
    last = looks(budget)[-1]
    se = score_se_sd(budget.prompts, budget.samples)
    z = NormalDist().inv_cdf
    detects = (z(1 - last.level(criteria.alpha) / TESTS / 2) + z(0.8)) * se
    bound = z(1 - last.level(criteria.alpha_equivalent)) * se
    tasks = budget.tasks if tasks is None else tasks
    why = []
    if bound >= criteria.tolerance_sd:
        why.append(f"{budget.samples} samples bound a score difference to +-{bound:.2g} sd at best")
    if task_reach(tasks) >= criteria.margin:
        why.append(f"{tasks} tasks bound an accuracy difference to +-{task_reach(tasks):.2g} at best")
    return detects, bound, "; ".join(why)


def describe_budget(budget: Budget, criteria: Criteria) -> str:
    detects, _, cannot = can_show(budget, criteria)
    sizes = f"{budget.label} in {budget.looks} looks" if budget.looks > 1 else budget.label
    what = "finds differences only" if cannot else "confirms equivalence"
    return f"{sizes}: detects {detects:.2g} sd, {what}"


BUDGETS = {
    # 12 tasks cannot confirm equivalence (at best +-0.12 > 0.1): a quick screen for differences
    "small": Budget(4, 12, 16, 12, repeats=48, looks=2),
    # The first look (8 prompts x 10 samples x 16 tokens, 192 repeats, 24 tasks) takes about a minute
    # against the embedded SmolLM2 on 2 cores; 16 tokens rather than 20 cost the tiny-model power
    # benchmark nothing (benchmarks/verify_power.py).
    "default": Budget(8, 30, 16, 24, repeats=192),
    "large": Budget(16, 48, 32, 24, repeats=384, focus=2),
}

# What the sampled texts detect alone, with no log-probabilities (--no-logprobs, or a server that gives
# none): `different` in K of N calibration runs at each budget on a 2-bit requantization of the embedded
# SmolLM2 (llama-server on its Q4_1 file against the file requantized to Q2_K, 0.46-0.75 nats a token
# apart), docs/results/2026-12-06-verify-distance.md. A budget not listed was not measured.
ALONE_PAIR = "a 4-bit to 2-bit requantization"
SAMPLED_ALONE: dict[str, tuple[int, int]] = {"small": (15, 20), "default": (20, 20), "large": (20, 20)}


def sampled_alone(budget: Budget) -> tuple[int, int] | None:
    """(different, runs) of the sampled texts alone on ALONE_PAIR at this budget; None: not measured."""
    name = next((n for n, b in BUDGETS.items() if b == budget), None)
    return SAMPLED_ALONE.get(name) if name else None


def alone_by_budget() -> str:
    """The sampled texts' measured power alone at each named budget, in a few words."""
    return ", ".join(f"{name} {k} of {n}" for name, (k, n) in SAMPLED_ALONE.items())


def describe_alone(found: tuple[int, int] | None) -> str:
    if found is None:
        return (
            "what the sampled texts detect alone was not measured at this budget (they called "
            f"{ALONE_PAIR} different in {alone_by_budget()} calibration runs at the named budgets)"
        )
    k, n = found
    return (
        f"the sampled texts alone called {ALONE_PAIR} different in {k} of {n} calibration runs at this budget"
    )


def parse_budget(text: str, base: Budget = BUDGETS["default"], option: str = "--budget") -> Budget:
    """A name in BUDGETS, or PROMPTSxSAMPLESxTOKENS: those three fields of ``base``, the rest kept."""
    from lossless.verify.collect import PROMPTS

    if text in BUDGETS:
        return BUDGETS[text]
    m = re.fullmatch(r"(\d+)x(\d+)x(\d+)", text.strip())
    if not m or min(int(g) for g in m.groups()) < 1:
        raise UsageError(
            f"{option}: expected {'|'.join(BUDGETS)} or PROMPTSxSAMPLESxTOKENS like 8x8x24, got {text!r}"
        )
    prompts, samples, tokens = (int(g) for g in m.groups())
    if samples < 2 or prompts > len(PROMPTS):
        raise UsageError(f"{option}: 2 or more samples and at most {len(PROMPTS)} prompts, got {text!r}")
    # its sample and token counts size arrays only after all the traffic (numpy refused 1x2x10**30 there)
    if samples > MAX_SAMPLES or tokens > MAX_TOKENS:
        raise UsageError(f"{option}: at most {MAX_SAMPLES:,} samples of {MAX_TOKENS:,} tokens, got {text!r}")
    # every look draws at least two samples per prompt and set
    looks = min(base.looks, samples // 2)
    return replace(base, prompts=prompts, samples=samples, max_tokens=tokens, looks=looks)
