"""Conversations: multi-turn sessions, each turn one request whose messages carry the whole history.

chat:TURNS[,THINK]          synthetic conversations of TURNS user turns: a question on a topic, then
                            follow-ups ("give an example", "shorter"), THINK seconds (default 0) between
                            an answer's end and the next turn, as a person reading and typing
conversations:PATH[,THINK]  the human turns of a ShareGPT file (JSON or JSONL), each conversation one
                            session; a turn's max_tokens from the recorded reply's length
sharegpt:PATH               the same files as single requests, as vLLM's benchmark reads them: the first
                            human turn of each conversation, max_tokens from the recorded reply

A session's history is what *this endpoint* answered (the assistant messages it sent), so every turn asks
what a user of that endpoint would: a later turn's prompt grows with the endpoint's own answers, and two
endpoints' later turns differ in length as their answers do. A turn that fails ends its session (the user
gives up); the records of its turns carry ``session`` and ``turn``, and each turn is its own prompt class
(``turn-1``, ``turn-2``, ...), so per-turn TTFT and E2E come out of the per-class breakdown.
``--requests`` counts sessions, and ``--concurrency`` is sessions in flight.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from lossless.bench.workload.prompts import prompts
from lossless.bench.workload.trace import Dialogue, load_sharegpt, load_trace, sharegpt_prompts
from lossless.client.prompt import Prompt
from lossless.errors import UsageError

MOST_TURNS = 1000
TOKENS_PER_WORD = 1.3


@dataclass(frozen=True)
class Conversation:
    id: str  # stable across endpoints, e.g. "chat-3"
    turns: tuple[str, ...]  # the user's messages, in order
    think_s: float = 0.0  # between an answer's end and the next turn
    system: str | None = None
    max_tokens: tuple[int | None, ...] = ()  # per turn (a recorded reply's length); empty: the run's

    def prompt(self, turn: int, history: Sequence[tuple[str, str]]) -> Prompt:
        """Turn ``turn`` (from 0): the system message, the history so far, this turn's user message."""
        opening = (("system", self.system),) if self.system else ()
        messages = (*opening, *history, ("user", self.turns[turn]))
        most = self.max_tokens[turn] if turn < len(self.max_tokens) else None
        return Prompt(f"{self.id}-t{turn + 1}", f"turn-{turn + 1}", messages, most)


def source(suite: str, rng: random.Random) -> Iterator[Prompt] | Iterator[Conversation]:
    """The workload a suite names: prompts (one request each) or conversations (several)."""
    if suite.startswith("chat:"):
        turns, think = _spec(suite, "chat:", "TURNS")
        return _chats(int(turns), think, rng)
    if suite.startswith("conversations:"):
        path, think = _spec(suite, "conversations:", "PATH")
        return _dialogues(load_sharegpt(Path(path)), think)
    if suite.startswith("trace:"):  # (bench replays a trace token-exact, at its own times: workload.trace)
        return iter([prompt for _, prompt in load_trace(Path(suite[len("trace:") :]), 1.0, rng)])
    if suite.startswith("sharegpt:"):
        return sharegpt_prompts(load_sharegpt(Path(suite[len("sharegpt:") :])), rng)
    return prompts(suite, rng)


def _spec(suite: str, prefix: str, first: str) -> tuple[str, float]:
    """``PREFIX:FIRST[,THINK]``: the first part as given (a file name may hold commas: split at the last),
    and the think time in seconds."""
    body = suite[len(prefix) :]
    head, _, think = body.rpartition(",") if "," in body else (body, "", "0")
    try:
        seconds = float(think)
    except ValueError:
        seconds = -1.0
    if not head or not 0 <= seconds <= 3600:
        raise UsageError(f"suite {suite!r}: expected {prefix}{first}[,THINK_SECONDS], think time 0-3600 s")
    if first == "TURNS" and not (head.isdigit() and 1 <= int(head) <= MOST_TURNS):
        raise UsageError(f"suite {suite!r}: TURNS must be a whole number from 1 to {MOST_TURNS}")
    return head, seconds


_TOPICS = (
    "how tides work",
    "the history of paper money",
    "why leaves change colour in autumn",
    "how a refrigerator keeps food cold",
    "the rules of cricket",
    "how vaccines train the immune system",
    "why cats purr",
    "how a bill becomes law",
    "the life cycle of a frog",
    "how GPS finds your position",
)
_FOLLOW_UPS = (
    "Can you give me a concrete example?",
    "Explain that again in simpler words.",
    "What is the most common misunderstanding about this?",
    "Summarise what you said in two sentences.",
    "How would you explain it to a ten-year-old?",
    "What should I read next to learn more?",
    "Which part of that is still debated?",
    "Give me three quick facts about it.",
)


def _chats(turns: int, think: float, rng: random.Random) -> Iterator[Conversation]:
    for i in range(1_000_000_000):
        opening = f"I'd like to understand {rng.choice(_TOPICS)}. Can you explain it briefly?"
        follow = [rng.choice(_FOLLOW_UPS) for _ in range(turns - 1)]
        yield Conversation(f"chat-{i}", (opening, *follow), think)


def _dialogues(found: list[Dialogue], think: float) -> Iterator[Conversation]:
    conversations = [
        Conversation(
            f"conv-{d.id}",
            d.turns,
            think,
            d.system,
            tuple(max(1, round(w * TOKENS_PER_WORD)) if w else None for w in d.reply_words),
        )
        for d in found
    ]
    for i in range(1_000_000_000):
        c = conversations[i % len(conversations)]
        yield (
            c
            if i < len(conversations)
            else Conversation(f"{c.id}-{i}", c.turns, think, c.system, c.max_tokens)
        )
