"""Everything verify asks the two endpoints, gathered into one ``Evidence``; the judging is elsewhere.

Capabilities first (detect.py), the same for both sides where a difference would bias the comparison
(token boundaries, the sampler's fields). Then, look by look (budget.py), the sample sets, their scores
and the contexts; at the first look also the greedy answers and tasks. A request that fails is left out
and counted; ``problems`` says when so much failed, or the baseline sampled so little, that no verdict
but ``inconclusive`` is honest.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import AsyncGenerator
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from lossless.client.endpoints import Endpoint
from lossless.client.wire import Wire
from lossless.console import phase
from lossless.verify import collect, paired_tokens
from lossless.verify.budget import Budget, Look, looks
from lossless.verify.collect import Caller, Drawn, Greedy
from lossless.verify.decide import ONE_LOOK
from lossless.verify.detect import NEUTRAL, Capabilities, detect
from lossless.verify.distance import PromptTokens
from lossless.verify.taskset import ToolParity, run_tasks
from lossless.verify.two_sample import Alternatives, Context, Sample, repeated_contexts, total_variation

if TYPE_CHECKING:
    from lossless.verify.result import VerifyConfig

SEED_STRIDE = 1_000_000  # seeds of the four sample sets never overlap
MAX_FAILED = 0.1  # a side losing more of its requests than this: the rest may be a biased sample


@dataclass(frozen=True)
class Evidence:
    sets: tuple[list[list[Sample]], ...]  # baseline A, baseline A', candidate, candidate's repeats
    known: dict[Context, Alternatives]  # the baseline's second-token distributions (contexts test)
    greedy: tuple[list[Greedy | None], ...]  # baseline, baseline again, candidate
    tasks: tuple[list[bool | None], list[bool | None]]  # right or wrong per task; None: failed
    paired: tuple[PromptTokens, ...]  # the same tokens scored by both, per prompt (distance.py)
    source: str | None  # how they were paired (paired_tokens.SOURCES); None: no log-probabilities
    notes: tuple[str, ...]
    problems: tuple[str, ...]  # why the data cannot carry a verdict other than inconclusive
    capabilities: dict[str, dict[str, Any]]  # per side, what detect found
    draw_tokens: bool  # sampled answers are in tokens (else in characters)
    tool_parity: ToolParity | None = None  # verify --tasks on a set with tools
    look: Look = ONE_LOOK  # the look this is the evidence of: samples per prompt and set so far
    requests: int = 0  # sent to both endpoints after detection, so far
    # the candidate's own second-token distributions at the contexts it drew again (contexts test)
    own: dict[Context, Alternatives] = field(default_factory=dict)


async def gather(
    baseline: Endpoint, candidate: Endpoint, config: VerifyConfig
) -> AsyncGenerator[Evidence, None]:
    """The evidence after each look of the budget's schedule, growing: the caller stops reading when a
    look settles the question (and closes this generator, which closes the connections). The greedy
    answers and the tasks are asked once, at the first look; each look pairs the tokens of new prompts'
    greedy answers for the log-probability distance."""
    b, every = config.budget, collect.PROMPTS
    prompts, tasks = every[: b.prompts], collect.load_questions()[: b.tasks]
    gate = asyncio.Semaphore(config.concurrency)
    async with (
        Wire(baseline, config.timeout, api=config.api) as wb,
        Wire(candidate, config.timeout, api=config.api) as wc,
    ):
        base, cand = Caller(wb, config.api, gate), Caller(wc, config.api, gate)
        phase("verify: what each endpoint supports")
        caps = await asyncio.gather(detect(base), detect(cand))
        notes = _settle(base, cand, *caps, logprobs=config.logprobs)
        source = paired_tokens.source_of(base, cand, config.api)
        paired: list[PromptTokens] = []
        focus = await _focus(base, b.focus) if b.repeats and config.api == "completions" else ()
        s0 = config.seed * 4 * SEED_STRIDE
        pool = _Pool.empty(len(prompts), len(focus))
        known: dict[Context, Alternatives] = {}
        own: dict[Context, Alternatives] = {}
        for look in looks(b):
            await _draw_look(base, cand, b, focus, look, s0, pool)
            sets = _sets(pool, focus)
            if config.api == "completions":  # the distributions at contexts are read as completions
                await _contexts(base, cand, sets, known, own)
            if source is not None and (more := paired_tokens.look_prompts(look.index)):
                phase(f"verify: {len(more)} prompts' greedy answers scored by both ({source})")
                tokens = max(paired_tokens.TOKENS, b.max_tokens)
                paired += await paired_tokens.pair_tokens(base, cand, source, more, tokens)
            if look.index == 0:
                phase("verify: greedy answers and tasks")
                greedy = await asyncio.gather(
                    *(collect.greedy(c, prompts, b.max_tokens) for c in (base, base, cand))
                )
                solved, parity = await _tasks(base, cand, (baseline, candidate), tasks, config)
            said = list(notes)
            problems = _problems(base, cand, pool, said)
            yield Evidence(
                sets=sets,
                known=dict(known),
                greedy=tuple(greedy),
                tasks=(solved[0], solved[1]),
                paired=tuple(paired),
                source=source,
                notes=tuple(dict.fromkeys(said + base.notes + cand.notes)),
                problems=tuple(problems),
                capabilities={"baseline": caps[0].as_dict(), "candidate": caps[1].as_dict()},
                draw_tokens=base.draw_tokens,
                tool_parity=parity,
                look=look,
                requests=base.sent + cand.sent,
                own=dict(own),
            )


def _sets(pool: _Pool, focus: tuple[int, ...]) -> tuple[list[list[Sample]], ...]:
    """The sample sets as judged: baseline A, A', candidate (as the baseline scored them), and every
    prompt's repeats under its index in PROMPTS (empty but at the focus prompts)."""
    x1, x2, y = pool.scored
    y2: list[list[Sample]] = [[] for _ in collect.PROMPTS]
    for j, group in zip(focus, pool.repeats, strict=True):
        y2[j] = [d.sample for d in group]
    return [list(g) for g in x1], [list(g) for g in x2], [list(g) for g in y], y2


def _problems(base: Caller, cand: Caller, pool: _Pool, said: list[str]) -> list[str]:
    """Why the data cannot carry a verdict but inconclusive (notes of lesser trouble go to ``said``)."""
    a1, a2, c1 = pool.drawn
    problems = [
        *_failures(base, said),
        *_failures(cand, said),
        *_not_sampling(base, [g + h for g, h in zip(a1, a2, strict=True)], said),
    ]
    _not_sampling(cand, c1, said)  # the candidate's: a note, the sampling tests show the difference
    return problems


@dataclass
class _Pool:
    """Every draw so far: the three long sets (baseline A, A', candidate) as drawn and as scored by the
    baseline, and the candidate's repeats at the focus prompts."""

    drawn: tuple[list[list[Drawn]], ...]
    scored: tuple[list[list[Sample]], ...]
    repeats: list[list[Drawn]]

    @classmethod
    def empty(cls, prompts: int, focus: int) -> _Pool:
        def sets() -> tuple[list[Any], ...]:
            return tuple([[] for _ in range(prompts)] for _ in range(3))

        return cls(sets(), sets(), [[] for _ in range(focus)])


async def _draw_look(
    base: Caller, cand: Caller, b: Budget, focus: tuple[int, ...], look: Look, s0: int, pool: _Pool
) -> None:
    """This look's samples (the next seeds of each set) and repeats, scored and added to ``pool``."""
    every = collect.PROMPTS
    prompts = every[: b.prompts]
    before = look.before
    if look.index == 0:
        phase(
            f"verify: {look.samples} samples of {b.prompts} prompts, twice from the baseline, once "
            f"from the candidate ({b.max_tokens} tokens each)"
        )
    else:
        phase(
            f"verify: not settled by {before} samples: look {look.index + 1} of {b.looks}, "
            f"{look.samples - before} more of each prompt from each set"
        )
    # the repeats grow with the samples: the contexts test gains power with the rest
    each = b.repeats // max(1, len(focus))
    first, upto = each * before // look.schedule[0], each * look.samples // look.schedule[0]
    new = await asyncio.gather(
        *(
            collect.draw(c, prompts, range(before, look.samples), b.max_tokens, s0 + k * SEED_STRIDE)
            for k, c in enumerate((base, base, cand))
        ),
        collect.draw(
            cand, tuple(every[j] for j in focus), range(first, upto), b.repeat_tokens, s0 + 3 * SEED_STRIDE
        ),
    )
    for old, got in zip((*pool.drawn, pool.repeats), new, strict=True):
        for group, more in zip(old, got, strict=True):
            group.extend(more)
    phase("verify: the samples scored by the baseline")
    for into, fresh in zip(pool.scored, new[:3], strict=True):
        now = await collect.scored(base, prompts, fresh)
        for samples, more_scored in zip(into, now, strict=True):
            samples.extend(more_scored)


async def _tasks(
    base: Caller,
    cand: Caller,
    sides: tuple[Endpoint, Endpoint],
    tasks: tuple[collect.Question, ...],
    config: VerifyConfig,
) -> tuple[tuple[list[bool | None], list[bool | None]], ToolParity | None]:
    """Right or wrong per task on each side: the bundled questions, or ``--tasks``' set run by the task
    runner (with tool-call parity when its tasks offer tools)."""
    if config.task_set is None:
        solved = await asyncio.gather(collect.solve(base, tasks), collect.solve(cand, tasks))
        return (solved[0], solved[1]), None
    api = "chat" if config.api == "completions" else config.api  # a task set's turns need messages
    found = await run_tasks(*sides, config.task_set, config.concurrency, config.timeout, api)
    return found.solved, found.parity


def _settle(
    base: Caller, cand: Caller, cb: Capabilities, cc: Capabilities, *, logprobs: bool = True
) -> list[str]:
    """Apply what detection found. Token boundaries and the sampler's fields go to both sides or to
    neither: tokens on one side and characters on the other would differ by construction. Without
    ``logprobs``, neither side is asked for any, as if neither gave them (--no-logprobs)."""
    notes = [*cb.said, *cc.said]
    if not logprobs:
        cb = replace(cb, tokens=False, scoring=None)
        cc = replace(cc, tokens=False, scoring=None)
        notes.append("log-probabilities not asked for (--no-logprobs): the sampled texts alone decide")
    base.tokens = cand.tokens = cb.tokens and cc.tokens
    base.draw_tokens = cand.draw_tokens = base.tokens and cb.scoring is not None
    if not base.draw_tokens:
        notes.append("sampled answers are compared by their characters (no token boundaries asked for)")
    if cb.sampler and cc.sampler:
        base.sampler = cand.sampler = dict(NEUTRAL)
    elif cb.sampler or cc.sampler:
        notes.append("only one side accepts top_k/min_p/repeat_penalty: both sample with their own defaults")
    base.scoring, cand.scoring = cb.scoring, cc.scoring
    return notes


def _failures(c: Caller, notes: list[str]) -> list[str]:
    failed = sum(c.failed.values())
    if not failed:
        return []
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(c.failed.items(), key=lambda kv: -kv[1]))
    said = f"{c.wire.endpoint.name}: {failed} of {c.sent} requests failed ({kinds})"
    if failed <= MAX_FAILED * c.sent:
        notes.append(said + "; left out")
        return []
    return [f"{said}: more than {MAX_FAILED:.0%}, so what came back may not represent it"]


def _not_sampling(c: Caller, drawn: list[list[Drawn]], notes: list[str]) -> list[str]:
    """Identical texts for every seed at temperature 1, on every prompt: the endpoint does not sample
    (``transformers serve`` decodes greedily unless the checkpoint's generation_config samples)."""
    groups = [g for g in drawn if len(g) >= 2]
    if not groups or any(len({d.text for d in g}) > 1 for g in groups):
        return []
    said = (
        f"{c.wire.endpoint.name} gave one text per prompt for every seed at temperature 1 on all "
        f"{len(groups)} prompts: it does not sample (temperature or seed ignored)"
    )
    notes.append(said)
    return [said + ", so there is no distribution to compare with"]


def with_repeats(y: list[list[Sample]], y2: list[list[Sample]]) -> list[list[Sample]]:
    """The candidate's draws by prompt index: its long set's (the first prompts) and its repeats'."""
    return [*(u + v for u, v in zip(y, y2, strict=False)), *y2[len(y) :]]


async def _focus(base: Caller, k: int) -> tuple[int, ...]:
    """The ``k`` prompts whose first token the baseline is surest of (the largest chance that two
    draws share it), so that the repeats meet at the fewest contexts; of those, only prompts whose
    likeliest first token survives tokenizing the prompt and it again (after a prompt ending in a
    newline, a newline merges into one token), so that the distribution after it can be asked for."""
    every = collect.PROMPTS
    dists = await asyncio.gather(*(base.next_token(p) for p in every))
    share = {j: sum(math.exp(2 * v) for _, v in d) for j, d in enumerate(dists) if d}
    chosen: list[int] = []
    for j in sorted(share, key=lambda j: -share[j]):
        likeliest = max(dists[j] or (), key=lambda tv: tv[1])[0]
        if len(chosen) < k and await base.next_token(every[j], likeliest):
            chosen.append(j)
    return tuple(sorted(chosen))


async def _contexts(
    base: Caller,
    cand: Caller,
    sets: tuple[list[list[Sample]], ...],
    known: dict[Context, Alternatives],
    own: dict[Context, Alternatives],
) -> None:
    """Adds to ``known`` the baseline's distributions, and to ``own`` the candidate's, at the contexts
    the sample sets drew twice or more (the contexts test's references)."""
    every = collect.PROMPTS
    tested = ([g + h for g, h in zip(sets[0], sets[1], strict=True)], with_repeats(sets[2], sets[3]))
    known |= await _contexts_known(base, every, tested, known)
    own |= await _contexts_own(cand, every, tested[1], known, own)


# A candidate's own distribution at a context this far from the baseline's there (total variation) is
# taken for another context's: same-weight servers measured 0.02-0.07 apart at the contexts verify draws
# at, and a prompt cut at another token boundary gives another distribution altogether.
OWN_TV = 0.5


async def _contexts_own(
    cand: Caller,
    prompts: tuple[str, ...],
    drawn: list[list[Sample]],
    known: dict[Context, Alternatives],
    own: dict[Context, Alternatives],
) -> dict[Context, Alternatives]:
    """The candidate's own distribution of the second token at each context it drew twice or more where
    the baseline's is known and its own is not yet: by echo where it scores text (the token boundary
    checked), else as it reports it while generating, kept where it is near the baseline's there."""
    wanted = sorted((repeated_contexts(drawn) & set(known)) - set(own))

    async def one(j: int, first: str) -> Alternatives | None:
        if cand.scoring is not None:
            return await cand.next_token(prompts[j], first)
        if not cand.tokens:
            return None
        got = await cand.generated_next(prompts[j] + first)
        return got if got and total_variation(got, known[j, first]) < OWN_TV else None

    got = await asyncio.gather(*(one(j, first) for j, first in wanted))
    return {c: alts for c, alts in zip(wanted, got, strict=True) if alts}


async def _contexts_known(
    base: Caller,
    prompts: tuple[str, ...],
    sets: tuple[list[list[Sample]], ...],
    known: dict[Context, Alternatives],
) -> dict[Context, Alternatives]:
    """The baseline's distribution of the second token at every context a group drew twice or more and
    that is not ``known`` yet."""
    wanted = sorted(set().union(*(repeated_contexts(s) for s in sets)) - set(known))
    got = await asyncio.gather(*(base.next_token(prompts[j], first) for j, first in wanted))
    return {c: alts for c, alts in zip(wanted, got, strict=True) if alts}
