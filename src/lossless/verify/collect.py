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

from lossless.client.wire import Reply, Wire
from lossless.errors import EndpointError
from lossless.records import Failure, http_failure
from lossless.verify.two_sample import TAIL, Alternatives, Sample, token_rank

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
class Question:
    id: str
    prompt: str
    answer: str  # compared with the first word of the reply, lower-cased, punctuation stripped


def load_questions() -> tuple[Question, ...]:
    text = resources.files("lossless.verify").joinpath("tasks.jsonl").read_text(encoding="utf-8")
    return tuple(Question(**json.loads(line)) for line in text.splitlines() if line.strip())


def graded(task: Question, reply_text: str) -> bool:
    words = reply_text.strip().split()
    return bool(words) and words[0].strip(string.punctuation).lower() == task.answer.lower()


@dataclass
class Caller:
    """One endpoint as verify uses it. What it supports is learned once, up front (``detect``); after
    that a failed request is data (counted by kind), never the end of the run."""

    wire: Wire
    api: str  # "completions", or "chat", "responses", "messages" (chat bodies: Wire puts them in their API)
    gate: asyncio.Semaphore
    tokens: bool = True  # the endpoint gives token log-probabilities (greedy answers ask for them)
    # ... and sampled answers ask too, for token boundaries: only where the teacher-forced tests use
    # them, since they cost some servers dearly (llama-cpp-python: 0.8 s for 16 tokens instead of 0.17)
    draw_tokens: bool = True
    scoring: int | None = 0  # index into SCORING of what the endpoint takes; None: cannot score
    sampler: dict[str, Any] = field(default_factory=dict)  # fields sent with every request (NEUTRAL)
    notes: list[str] = field(default_factory=list)
    sent: int = 0  # requests after detection
    failed: dict[str, int] = field(default_factory=dict)  # error kind -> requests

    async def post(self, body: dict[str, Any], path: str) -> Reply:
        async with self.gate:
            self.sent += 1
            try:
                reply = await self.wire.post({**self.sampler, **body}, path)
            except EndpointError as exc:  # never answered before? detection answered, so rarely
                reply = Reply(0, 0.0, error=str(exc))
        if not reply.ok:
            kind: str = Failure.TIMEOUT if reply.elapsed_s else Failure.CONNECTION
            if reply.status != 0:
                kind = http_failure(reply.status) if reply.status != 200 else Failure.MALFORMED_STREAM
            self.failed[kind] = self.failed.get(kind, 0) + 1
        return reply

    async def complete(
        self, prompt: str, max_tokens: int, temperature: float, seed: int | None, logprobs: bool, top: int = 1
    ) -> Reply:
        """``top``: the alternatives asked for at each token, when asking for log-probabilities."""
        body: dict[str, Any] = {"max_tokens": max_tokens, "temperature": temperature}
        if seed is not None:
            body["seed"] = seed
        if self.api != "completions":
            body["messages"] = [{"role": "user", "content": prompt}]
            path = "/chat/completions"
            # llama.cpp sends no chat logprobs unless top_logprobs is set too
            tokens: dict[str, Any] = {"logprobs": True, "top_logprobs": top}
        else:
            body["prompt"] = prompt
            path = "/completions"
            tokens = {"logprobs": top}
        return await self.post({**body, **tokens} if logprobs and self.tokens else body, path)

    async def score(self, prefix: str, text: str) -> TextScore | None:
        """``text`` after ``prefix``, teacher-forced by echo; None if it cannot be scored. One token is
        generated and dropped: servers disagree on ``max_tokens: 0`` (llama.cpp reads it as no limit)."""
        if self.scoring is None or not text:
            return None
        lp = await self.echoed(prefix + text)
        return _text_score(lp, len(prefix), len(prefix + text), SCORING[self.scoring]) if lp else None

    async def echoed(self, prompt: str) -> dict[str, Any] | None:
        """The logprobs object of ``prompt`` echoed and scored (plus one generated token), or None."""
        if self.scoring is None:
            return None
        body = {
            "prompt": prompt,
            "echo": True,
            "logprobs": SCORING[self.scoring],
            "max_tokens": 1,
            "temperature": 0,
        }
        reply = await self.post(body, "/completions")
        lp = reply.choices[0].logprobs if reply.ok and reply.choices else None
        return lp if isinstance(lp, dict) and isinstance(lp.get("token_logprobs"), list) else None

    async def generated_next(self, prefix: str) -> Alternatives | None:
        """The endpoint's distribution after ``prefix`` as it reports it while generating (its likeliest
        tokens at the one token it makes), for an endpoint that cannot echo. Nothing checks that the
        prompt ends on the token boundary the caller means: the caller compares with a distribution it
        trusts there."""
        body = {"prompt": prefix, "max_tokens": 1, "temperature": 1.0, "logprobs": SCORING[0]}
        reply = await self.post(body, "/completions")
        lp = reply.choices[0].logprobs if reply.ok and reply.choices else None
        alts = alternatives_of(lp, 1)[0]
        return tuple(alts.items()) if alts else None

    async def next_token(self, prefix: str, first: str = "") -> Alternatives | None:
        """The endpoint's distribution after ``prefix`` (+ ``first``, one token): its likeliest tokens
        and their log-probabilities, or None when it cannot say, or when ``prefix + first`` does not end
        in exactly that token once tokenized again (the distribution would be another context's)."""
        if self.scoring is None:
            return None
        top = SCORING[self.scoring]
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


# Alternatives per token that scoring asks for, in order, until an endpoint takes it: ours and vLLM's
# take 20, OpenAI's legacy API at most 5.
SCORING = (20, 5)


@dataclass(frozen=True)
class TextScore:
    mean: float  # mean log-probability per token
    rank: float | None  # mean mid-PIT of the tokens (stats.token_rank); None without alternatives
    tail: float | None  # share of tokens with a mid-PIT of stats.TAIL or more
    tokens: tuple[tuple[int, str, float], ...] = ()  # each token's offset, text and log-probability


def _text_score(lp: dict[str, Any], start: int, end: int, top: int) -> TextScore | None:
    """The text's tokens: those whose offset falls in [start, end) (the prompt's are not scored)."""
    tops = lp.get("top_logprobs") if top else None
    rows = zip(
        lp["token_logprobs"],
        lp.get("text_offset") or [],
        lp.get("tokens") or repeat(""),
        tops or repeat(None),
        strict=False,
    )
    picked = [(v, at, str(token), alts) for v, at, token, alts in rows if v is not None and start <= at < end]
    if not picked:
        return None
    mean = sum(v for v, *_ in picked) / len(picked)
    tokens = tuple((at, token, v) for v, at, token, _ in picked)
    if not all(isinstance(alts, dict) and alts for *_, alts in picked):
        return TextScore(mean, None, None, tokens)
    ranks = [token_rank(v, list(alts.values())) for v, _, _, alts in picked]
    return TextScore(mean, sum(ranks) / len(ranks), sum(r >= TAIL for r in ranks) / len(ranks), tokens)


def logprobs_of(reply: Reply) -> tuple[float, ...] | None:
    """The chosen tokens' log-probabilities, aligned with ``units_of``; None when not given."""
    lp = reply.choices[0].logprobs if reply.choices else None
    values: list[Any]
    if isinstance(lp, dict) and isinstance(lp.get("content"), list):
        values = [t.get("logprob") if isinstance(t, dict) else None for t in lp["content"]]
    elif isinstance(lp, dict) and isinstance(lp.get("token_logprobs"), list):
        values = lp["token_logprobs"]
    else:
        return None
    if not values or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
        return None
    return tuple(float(v) for v in values)


def alternatives_of(lp: Any, n: int) -> tuple[dict[str, float], ...]:
    """Each position's alternatives, from either shape of logprobs object (chat's list of entries with
    their own top_logprobs lists, or the legacy list of {token: logprob} maps)."""
    rows: list[Any] = []
    if isinstance(lp, dict) and isinstance(lp.get("content"), list):
        rows = [e.get("top_logprobs") if isinstance(e, dict) else None for e in lp["content"]]
        rows = [
            {str(t.get("token")): t.get("logprob") for t in r if isinstance(t, dict)}
            if isinstance(r, list)
            else None
            for r in rows
        ]
    elif isinstance(lp, dict) and isinstance(lp.get("top_logprobs"), list):
        rows = lp["top_logprobs"]
    tops = [
        {str(k): float(v) for k, v in r.items() if isinstance(v, int | float) and not isinstance(v, bool)}
        if isinstance(r, dict)
        else {}
        for r in rows
    ]
    return tuple(tops[:n]) + ({},) * max(0, n - len(tops))


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


PROMPT_STRIDE = 10_000  # seeds of one prompt's samples: budget.MAX_SAMPLES of them never reach the next's


@dataclass(frozen=True)
class Drawn:
    prompt: int  # index into the prompts
    text: str
    sample: Sample


async def draw(
    caller: Caller, prompts: tuple[str, ...], samples: range, max_tokens: int, seed0: int
) -> list[list[Drawn]]:
    """Completions number ``samples`` at temperature 1 of every prompt, each with its own seed (failed
    ones left out): a later look asks for the next range, and its seeds are new."""

    async def one(j: int, i: int) -> Drawn | None:
        seed = seed0 + j * PROMPT_STRIDE + i
        reply = await caller.complete(prompts[j], max_tokens, 1.0, seed, caller.draw_tokens)
        if not reply.ok:
            return None
        units = units_of(reply)
        n = reply.usage_int("completion_tokens")
        return Drawn(j, reply.text, Sample(units, n if n is not None else len(units)))

    flat = await asyncio.gather(*(one(j, i) for j in range(len(prompts)) for i in samples))
    return [[d for d in flat if d is not None and d.prompt == j] for j in range(len(prompts))]


async def scored(scorer: Caller, prompts: tuple[str, ...], sets: list[list[Drawn]]) -> list[list[Sample]]:
    """Each drawn text with its score; a text whose scoring request failed is left out, an empty text
    (nothing to score) is kept unscored."""

    async def one(d: Drawn) -> Sample | None:
        if scorer.scoring is None or not d.text:
            return d.sample
        got = await scorer.score(prompts[d.prompt], d.text)
        if got is None:
            return None
        return replace(d.sample, score=got.mean, rank=got.rank, tail=got.tail)

    return [[s for s in await asyncio.gather(*(one(d) for d in group)) if s is not None] for group in sets]


@dataclass(frozen=True)
class Greedy:
    units: tuple[str, ...]
    logprobs: tuple[float, ...] | None  # the chosen tokens' log-probabilities, when the endpoint gives them


async def greedy(caller: Caller, prompts: tuple[str, ...], max_tokens: int) -> list[Greedy | None]:
    async def one(prompt: str) -> Greedy | None:
        reply = await caller.complete(prompt, max_tokens, 0.0, None, logprobs=True)
        if not reply.ok:
            return None
        units, lp = units_of(reply), logprobs_of(reply)
        return Greedy(units, lp if lp is not None and len(lp) == len(units) else None)

    return list(await asyncio.gather(*(one(p) for p in prompts)))


async def solve(caller: Caller, tasks: tuple[Question, ...]) -> list[bool | None]:
    async def one(task: Question) -> bool | None:
        reply = await caller.complete(task.prompt, 8, 0.0, None, logprobs=False)
        return graded(task, reply.text) if reply.ok else None

    return list(await asyncio.gather(*(one(t) for t in tasks)))
