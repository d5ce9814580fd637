"""Prompt suites: seeded, endless iterators of prompts, identical for every endpoint of a run.

short    greeting-sized chat turns
long     requests for ~150-word essays (long outputs: output speed dominates)
mixed    short and long, drawn at random
lengths  inputs of about 100 / 1k / 10k tokens, each opened by a unique prefix so that no prefix cache
         can serve one request from another
file:P   a JSONL file, one {"prompt": "..."} or {"messages": [...]} per line (optional "max_tokens",
         "id"), cycled
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from lossless.errors import UsageError


@dataclass(frozen=True)
class Prompt:
    id: str  # stable across endpoints, e.g. "short-3"
    cls: str  # suite label used to group results: "short", "long", "len-1k", "file"
    messages: tuple[tuple[str, str], ...]  # (role, content) chat turns
    max_tokens: int | None = None  # overrides --max-tokens for this prompt

    @property
    def text(self) -> str:  # the completions-API prompt
        return "\n\n".join(content for _, content in self.messages)


SUITES = ("short", "long", "mixed", "lengths")

_GREETINGS = (
    "Hi!",
    "Hello, how are you?",
    "Good morning!",
    "Hey, what's up?",
    "Thanks for your help.",
    "Say hello in French.",
    "What is 2 + 2?",
    "Tell me a one-line joke.",
    "Name a colour.",
    "Who are you?",
)
_TOPICS = (
    "the history of the bicycle",
    "why the sky is blue",
    "how bees make honey",
    "the water cycle",
    "the invention of the printing press",
    "how a compiler works",
    "the life of a star",
    "why we sleep",
    "the game of chess",
    "how bridges stay up",
    "the origins of coffee",
    "volcanoes",
)
_PROSE = (
    "time year people way day man thing woman life child world school state family student group country "
    "problem hand part place case week company system program question work government number night point "
    "home water room mother area money story fact month lot right study book eye job word business issue "
    "side kind head house service friend father power hour game line end member law car city community"
)
_WORDS = tuple(_PROSE.split(" "))
# ~1.3 tokens per common English word in Llama/GPT tokenizers; close enough for 100 / 1k / 10k classes.
_LENGTHS = (("len-100", 100), ("len-1k", 1_000), ("len-10k", 10_000))


def prompts(suite: str, rng: random.Random) -> Iterator[Prompt]:
    if suite.startswith("file:"):
        return _from_file(Path(suite[5:]))
    makers = {"short": _short, "long": _long, "mixed": _mixed, "lengths": _lengths}
    if suite not in makers:
        raise UsageError(f"unknown suite {suite!r}; choose one of {', '.join(SUITES)} or file:PATH.jsonl")
    return makers[suite](rng)


def _user(text: str) -> tuple[tuple[str, str], ...]:
    return (("user", text),)


def _short(rng: random.Random) -> Iterator[Prompt]:
    for i in range(1_000_000_000):
        yield Prompt(f"short-{i}", "short", _user(rng.choice(_GREETINGS)))


def _long(rng: random.Random) -> Iterator[Prompt]:
    for i in range(1_000_000_000):
        text = f"Write an essay of about 150 words on {rng.choice(_TOPICS)}."
        yield Prompt(f"long-{i}", "long", _user(text))


def _mixed(rng: random.Random) -> Iterator[Prompt]:
    short, long = _short(random.Random(rng.random())), _long(random.Random(rng.random()))
    for i in range(1_000_000_000):
        p = next(short) if rng.random() < 0.5 else next(long)
        yield Prompt(f"mixed-{i}", p.cls, p.messages)


def _lengths(rng: random.Random) -> Iterator[Prompt]:
    for i in range(1_000_000_000):
        cls, tokens = _LENGTHS[i % len(_LENGTHS)]
        prefix = f"Request {i} id {rng.getrandbits(64):016x}."  # unique first tokens: no prefix-cache hits
        filler = " ".join(rng.choices(_WORDS, k=int(tokens / 1.3)))
        text = f"{prefix} Summarise the following text in one sentence.\n\n{filler}"
        yield Prompt(f"{cls}-{i}", cls, _user(text))


def _from_file(path: Path) -> Iterator[Prompt]:
    try:
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    except OSError as exc:
        raise UsageError(f"cannot read prompt file {path}: {exc.strerror}") from exc
    if not lines:
        raise UsageError(f"prompt file {path} is empty")
    loaded = [_file_prompt(line, f"{path}:{n + 1}", n) for n, line in enumerate(lines)]

    def cycle() -> Iterator[Prompt]:
        while True:
            yield from loaded

    return cycle()


def _file_prompt(line: str, where: str, n: int) -> Prompt:
    try:
        row = json.loads(line)
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: not valid JSON ({exc.msg})") from exc
    if not isinstance(row, dict):
        raise UsageError(f"{where}: each line must be a JSON object")
    if isinstance(row.get("prompt"), str):
        messages: tuple[tuple[str, str], ...] = _user(row["prompt"])
    elif isinstance(row.get("messages"), list) and all(
        isinstance(m, dict) and isinstance(m.get("content"), str) for m in row["messages"]
    ):
        messages = tuple((str(m.get("role", "user")), m["content"]) for m in row["messages"])
    else:
        raise UsageError(f"{where}: needs a 'prompt' string or a 'messages' list of {{role, content}}")
    max_tokens = row.get("max_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 1):
        raise UsageError(f"{where}: 'max_tokens' must be a positive integer")
    return Prompt(str(row.get("id", f"file-{n}")), "file", messages, max_tokens)
