"""What verify asks the two endpoints: sampled completions, teacher-forced scores, greedy answers, tasks.

All requests of a run share one gate (``concurrency``): against the embedded engine both servers may
share one model and its KV cache, and must then never run at the same time.
"""

from __future__ import annotations

import asyncio
import json
import string
from dataclasses import dataclass, field, replace
from importlib import resources
from itertools import repeat
from typing import Any

from lossless.probe.wire import Reply, Wire
from lossless.verify.stats import TAIL, Alternatives, Sample, token_rank

# Openers that leave many continuations open (the distribution, not one answer, is what is compared).
PROMPTS = (
    "Once upon a time, in a small village,",
    "The best way to learn a new language is",
    "Here is a short poem about the ocean:\n",
    "def fibonacci(n):\n",
    "My favourite food is",
    "The history of the Roman Empire",
    "Dear team, I am writing to let you know that",
    "Three tips for a good night's sleep:\n1.",
    "In the year 2050, cities will",
    "The cat looked at the door and",
    "Breaking news:",
    "To make a cup of tea, first",
    "The most important invention of all time is",
    "Q: Why is the sky blue?\nA:",
    "import numpy as np\n",
    "Once there was a robot who",
)


@dataclass(frozen=True)
class Task:
    id: str
    prompt: str
    answer: str  # compared with the first word of the reply, lower-cased, punctuation stripped


def load_tasks() -> tuple[Task, ...]:
    text = resources.files("lossless.verify").joinpath("tasks.jsonl").read_text(encoding="utf-8")
    return tuple(Task(**json.loads(line)) for line in text.splitlines() if line.strip())


def graded(task: Task, reply_text: str) -> bool:
    words = reply_text.strip().split()
    return bool(words) and words[0].strip(string.punctuation).lower() == task.answer.lower()


@dataclass
class Caller:
    """One endpoint as verify uses it; learns once what the endpoint accepts."""

    wire: Wire
    api: str  # "completions" or "chat"
    gate: asyncio.Semaphore
    tokens: bool = True  # ask for logprobs to get token boundaries; dropped if refused
    scoring: int | None = 0  # index into SCORING of the first body the endpoint took; None: cannot score
    notes: list[str] = field(default_factory=list)

    async def post(self, body: dict[str, Any], path: str) -> Reply:
        async with self.gate:
            return await self.wire.post(body, path)

    async def complete(self, prompt: str, max_tokens: int, temperature: float, seed: int | None) -> Reply:
        body: dict[str, Any] = {"max_tokens": max_tokens, "temperature": temperature}
        if seed is not None:
            body["seed"] = seed
        if self.api == "chat":
            body["messages"] = [{"role": "user", "content": prompt}]
            path = "/chat/completions"
        else:
            body["prompt"] = prompt
            path = "/completions"
        if self.tokens:
            reply = await self.post({**body, "logprobs": True if self.api == "chat" else 0}, path)
            if reply.status not in range(400, 500):
                return reply
            self.tokens = False
            self.notes.append(f"{self.wire.endpoint.name}: logprobs refused, comparing characters")
        return await self.post(body, path)

    async def score(self, prefix: str, text: str) -> Scored | None:
        """``text`` after ``prefix``, teacher-forced by echo; None if the endpoint cannot score."""
        if self.scoring is None or not text:
            return None
        full = prefix + text
        while (tried := self.scoring) is not None:
            max_tokens, top = SCORING[tried]
            body = {"prompt": full, "echo": True, "logprobs": top, "max_tokens": max_tokens, "temperature": 0}
            reply = await self.post(body, "/completions")
            lp = reply.choices[0].logprobs if reply.ok and reply.choices else None
            if isinstance(lp, dict) and isinstance(lp.get("token_logprobs"), list):
                return _scored(lp, len(prefix), len(full), top)
            if not reply.ok and reply.status not in range(400, 500):
                return None  # a failure, not a refusal: this text goes unscored
            if self.scoring == tried:  # another request in flight may have moved on already
                self.scoring = tried + 1 if tried + 1 < len(SCORING) else None
        self.notes.append(f"{self.wire.endpoint.name}: cannot score text (echo + logprobs)")
        return None

    async def next_token(self, prefix: str, first: str = "") -> Alternatives | None:
        """The endpoint's distribution after ``prefix`` (+ ``first``, one token): its likeliest tokens
        and their log-probabilities, or None when it cannot say, or when ``prefix + first`` does not end
        in exactly that token once tokenized again (the distribution would be another context's)."""
        if self.scoring is None or not (top := SCORING[self.scoring][1]):
            return None
        body = {"prompt": prefix + first, "echo": True, "logprobs": top, "max_tokens": 1, "temperature": 1.0}
        reply = await self.post(body, "/completions")
        lp = reply.choices[0].logprobs if reply.ok and reply.choices else None
        if not isinstance(lp, dict):
            return None
        tokens, offsets, tops = lp.get("tokens"), lp.get("text_offset"), lp.get("top_logprobs")
        if (
            not (isinstance(tokens, list) and isinstance(offsets, list) and isinstance(tops, list))
            or not tops
        ):
            return None
        # the echoed prompt, then the one generated token: the last echoed one must be ``first``
        if first and (len(tokens) < 2 or tokens[-2] != first or offsets[-2] != len(prefix)):
            return None
        alts = tops[-1]
        return tuple((str(t), float(v)) for t, v in alts.items()) if isinstance(alts, dict) else None


# What scoring asks, in order, until an endpoint takes it: ours and vLLM's take max_tokens 0 and 20
# alternatives per token; OpenAI's legacy API at most 5; some servers refuse max_tokens 0.
SCORING = ((0, 20), (0, 5), (0, 0), (1, 20), (1, 5), (1, 0))


@dataclass(frozen=True)
class Scored:
    mean: float  # mean log-probability per token
    rank: float | None  # mean mid-PIT of the tokens (stats.token_rank); None without alternatives
    tail: float | None  # share of tokens with a mid-PIT of stats.TAIL or more


def _scored(lp: dict[str, Any], start: int, end: int, top: int) -> Scored | None:
    """The text's tokens: those whose offset falls in [start, end) (the prompt's are not scored)."""
    tops = lp.get("top_logprobs") if top else None
    rows = list(zip(lp["token_logprobs"], lp.get("text_offset") or [], tops or repeat(None), strict=False))
    picked = [(v, alts) for v, at, alts in rows if v is not None and start <= at < end]
    if not picked:
        return None
    mean = sum(v for v, _ in picked) / len(picked)
    if not all(isinstance(alts, dict) and alts for _, alts in picked):
        return Scored(mean, None, None)
    ranks = [token_rank(v, list(alts.values())) for v, alts in picked]
    return Scored(mean, sum(ranks) / len(ranks), sum(r >= TAIL for r in ranks) / len(ranks))


def units_of(reply: Reply) -> tuple[str, ...]:
    """Token strings from the logprobs when present; otherwise characters."""
    lp = reply.choices[0].logprobs if reply.choices else None
    if isinstance(lp, dict) and isinstance(lp.get("content"), list):
        return tuple(str(t.get("token", "")) for t in lp["content"] if isinstance(t, dict))
    if isinstance(lp, dict) and isinstance(lp.get("tokens"), list):
        return tuple(str(t) for t in lp["tokens"])
    if isinstance(lp, list):  # a stream's pieces; not asked for here, kept for completeness
        return tuple(str(t) for t in lp)
    return tuple(reply.text)


@dataclass(frozen=True)
class Drawn:
    prompt: int  # index into the prompts
    text: str
    sample: Sample


async def draw(
    caller: Caller, prompts: tuple[str, ...], samples: int, max_tokens: int, seed0: int
) -> list[list[Drawn]]:
    """``samples`` completions at temperature 1 per prompt, each with its own seed."""

    async def one(j: int, i: int) -> Drawn:
        reply = await caller.complete(prompts[j], max_tokens, 1.0, seed0 + j * 1000 + i)
        _must(reply, caller, "a sampled completion")
        units = units_of(reply)
        n = reply.usage_int("completion_tokens")
        return Drawn(j, reply.text, Sample(units, n if n is not None else len(units)))

    flat = await asyncio.gather(*(one(j, i) for j in range(len(prompts)) for i in range(samples)))
    return [[d for d in flat if d.prompt == j] for j in range(len(prompts))]


async def scored(scorer: Caller, prompts: tuple[str, ...], sets: list[list[Drawn]]) -> list[list[Sample]]:
    async def one(d: Drawn) -> Sample:
        got = await scorer.score(prompts[d.prompt], d.text)
        if got is None:
            return d.sample
        return replace(d.sample, score=got.mean, rank=got.rank, tail=got.tail)

    return [list(await asyncio.gather(*(one(d) for d in group))) for group in sets]


async def greedy(caller: Caller, prompts: tuple[str, ...], max_tokens: int) -> list[tuple[str, ...]]:
    async def one(prompt: str) -> tuple[str, ...]:
        reply = await caller.complete(prompt, max_tokens, 0.0, None)
        _must(reply, caller, "a greedy completion")
        return units_of(reply)

    return list(await asyncio.gather(*(one(p) for p in prompts)))


async def solve(caller: Caller, tasks: tuple[Task, ...]) -> list[bool]:
    async def one(task: Task) -> bool:
        reply = await caller.complete(task.prompt, 8, 0.0, None)
        _must(reply, caller, f"task {task.id}")
        return graded(task, reply.text)

    return list(await asyncio.gather(*(one(t) for t in tasks)))


def _must(reply: Reply, caller: Caller, what: str) -> None:
    if not reply.ok:
        from lossless.errors import EndpointError

        e = caller.wire.endpoint
        raise EndpointError(
            f"endpoint {e.name!r} ({e.base_url}) refused {what}: HTTP {reply.status} {reply.error}"
        )
