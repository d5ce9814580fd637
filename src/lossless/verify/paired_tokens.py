"""The same tokens at the same contexts, scored by both endpoints: what distance.py measures.

The texts are greedy answers (likely tokens, the same kind of text whatever the endpoints support, so
that one tolerance fits every way of pairing them). How their tokens are paired depends on what each
side can do, best first (``SOURCES``):

    teacher-forced             both score text (echo): the baseline's answer, scored by both; the
                               baseline scores it twice for its own noise
    teacher-forced, baseline   only the baseline scores: the candidate's answer as the candidate
                               generated it (its own log-probabilities) against the baseline's score of it
    teacher-forced, candidate  only the candidate scores: the baseline's answer, the other way round
    greedy                     neither scores: both answers' tokens until they part, and at the token
                               where they part each side's chosen token among the other's alternatives

Where one side generates and the other scores, the contexts must be the same text: only the
completions API's prompt is (a chat answer follows a template the client does not see). The baseline's
own noise is then its greedy answer twice, read the greedy way.

Each look asks ``PER_LOOK`` new prompts, so a distance near the tolerance gains prompts with the samples.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from lossless.verify.collect import PROMPTS, Caller, TextScore, alternatives_of, logprobs_of, units_of
from lossless.verify.distance import PromptTokens

SOURCES = {
    "teacher-forced": "the baseline's greedy answers scored by both endpoints (echo)",
    "teacher-forced, baseline": "the candidate's greedy answers, its own log-probabilities against the "
    "baseline's scores of them",
    "teacher-forced, candidate": "the baseline's greedy answers, its own log-probabilities against the "
    "candidate's scores of them",
    "greedy": "both greedy answers' tokens until they part, and the token where they part",
}
# Openers of every kind (stories, code, lists, questions, letters): PROMPTS first, then more, so that each
# look has prompts of its own.
DISTANCE_PROMPTS = (
    *PROMPTS,
    "The three primary colours are",
    "Write a haiku about autumn.\n",
    "SELECT name, age FROM",
    "The main difference between a virus and a bacterium is",
    "Hello! How can I",
    "The recipe calls for two cups of flour,",
    "class Stack:\n    def __init__(self):\n",
    "Q: What is the capital of Japan?\nA:",
    "The old lighthouse keeper climbed the stairs",
    "Photosynthesis is the process by which",
    "Step 1: Preheat the oven to",
    "The meeting has been moved to",
    "In conclusion, the results show that",
    "for i in range(10):\n",
    "A good password should",
    "The train left the station at",
    "Water boils at",
    "My grandmother always told me",
    "The first rule of the club is",
    "Dear Sir or Madam,\n",
    "The planet closest to the sun is",
    "To install the package, run",
    "She opened the letter and read:",
    "The quick brown fox",
    "Ingredients:\n-",
    "The stock market fell today because",
    "Once the rain stopped, the children",
    "The function returns",
    "I think the best movie ever made is",
    "Chapter 1\n\nIt was a cold morning",
    "The word 'serendipity' means",
    "Here are five facts about elephants:\n1.",
)
PER_LOOK = 16  # prompts a look adds
TOKENS = 32  # per greedy answer: enough tokens per prompt, cheap next to the sampled sets


@dataclass(frozen=True)
class GreedyAnswer:
    """A greedy answer as its endpoint generated it, token by token."""

    tokens: tuple[str, ...]
    logprobs: tuple[float, ...]
    tops: tuple[dict[str, float], ...]  # each position's alternatives (may be empty)
    text: str


def look_prompts(look: int) -> range:
    """The indices into DISTANCE_PROMPTS that look ``look`` (0-based) asks; empty past the list."""
    start = min(look * PER_LOOK, len(DISTANCE_PROMPTS))
    return range(start, min(start + PER_LOOK, len(DISTANCE_PROMPTS)))


def source_of(base: Caller, cand: Caller, api: str) -> str | None:
    """How the two endpoints' tokens can be paired; None when neither gives log-probabilities."""
    if base.scoring is not None and cand.scoring is not None:
        return "teacher-forced"
    if api == "completions" and base.scoring is not None and cand.tokens:
        return "teacher-forced, baseline"
    if api == "completions" and cand.scoring is not None and base.tokens:
        return "teacher-forced, candidate"
    return "greedy" if base.tokens and cand.tokens else None


async def pair_tokens(
    base: Caller, cand: Caller, source: str, indices: range, tokens: int
) -> list[PromptTokens]:
    """Every prompt's paired tokens; a prompt whose requests failed is left out."""
    got = await asyncio.gather(*(_one(base, cand, source, j, tokens) for j in indices))
    return [p for p in got if p is not None]


async def _one(base: Caller, cand: Caller, source: str, j: int, n: int) -> PromptTokens | None:
    prompt = DISTANCE_PROMPTS[j]
    if source == "teacher-forced":
        first = await greedy_answer(base, prompt, n)
        if first is None or not first.text:
            return None
        s1, s2, s3 = await asyncio.gather(*(c.score(prompt, first.text) for c in (base, base, cand)))
        if s1 is None or s2 is None or s3 is None:
            return None
        return PromptTokens(j, tuple(_same_tokens(s1, s3)), tuple(_same_tokens(s1, s2)))
    answers = await asyncio.gather(*(greedy_answer(c, prompt, n) for c in (base, base, cand)))
    a, again, c = answers
    if a is None or again is None or c is None:
        return None
    noise = _along(a, again)
    if source == "greedy":
        return PromptTokens(j, tuple(_along(a, c)), tuple(noise))
    generated, scorer = (c, base) if source == "teacher-forced, baseline" else (a, cand)
    scored = await scorer.score(prompt, generated.text)
    if scored is None:
        return None
    return PromptTokens(j, tuple(_generated_vs_scored(generated, len(prompt), scored)), tuple(noise))


async def greedy_answer(caller: Caller, prompt: str, n: int) -> GreedyAnswer | None:
    """The greedy answer with each token's log-probability and its likeliest alternatives."""
    reply = await caller.complete(prompt, n, 0.0, None, logprobs=True, top=5)
    if not reply.ok:
        return None
    units, values = units_of(reply), logprobs_of(reply)
    if values is None or len(values) != len(units):
        return None
    lp = reply.choices[0].logprobs if reply.choices else None
    return GreedyAnswer(units, values, alternatives_of(lp, len(units)), reply.text)


def _along(a: GreedyAnswer, b: GreedyAnswer) -> list[float]:
    """|a - b| of the chosen tokens until the answers part; where they part, each side's token among the
    other's alternatives (when listed): the one context there is still shared."""
    out = []
    for i, (ta, tb) in enumerate(zip(a.tokens, b.tokens, strict=False)):
        if ta == tb:
            out.append(abs(a.logprobs[i] - b.logprobs[i]))
            continue
        if ta in b.tops[i]:
            out.append(abs(a.logprobs[i] - b.tops[i][ta]))
        if tb in a.tops[i]:
            out.append(abs(b.logprobs[i] - a.tops[i][tb]))
        break
    return out


def _same_tokens(a: TextScore, b: TextScore) -> list[float]:
    """|a - b| of the tokens both scored alike (the same text at the same offset: another tokenizer
    shares only some)."""
    theirs = {(at, token): v for at, token, v in b.tokens}
    return [abs(v - theirs[at, token]) for at, token, v in a.tokens if (at, token) in theirs]


def _generated_vs_scored(generated: GreedyAnswer, start: int, scored: TextScore) -> list[float]:
    """A generated answer's own log-probabilities against another's scores of the same tokens, paired by
    offset (the generated tokens' offsets counted from the prompt's end) and text."""
    theirs = {(at, token): v for at, token, v in scored.tokens}
    out, at = [], start
    for token, value in zip(generated.tokens, generated.logprobs, strict=True):
        if (at, token) in theirs:
            out.append(abs(value - theirs[at, token]))
        at += len(token)
    return out
