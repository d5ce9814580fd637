"""Prompt suites: seeded, endless iterators of prompts, identical for every endpoint of a run.

short    greeting-sized chat turns
long     requests for ~150-word essays (long outputs: output speed dominates)
mixed    short and long, drawn at random
lengths  inputs of about 100 / 1k / 10k tokens, each opened by a unique prefix so that no prefix cache
         can serve one request from another
grounded tasks whose answers copy the input (repeat, rewrite, rename in code): where n-gram drafting,
         which drafts from the prompt, pays
prefix:N[,K]  prompt caching: K shared prefixes (system prompts) of about N tokens each, taken in
         turn, then a unique question; class "prefix-first" for a prefix's first use, "prefix-repeat"
         after (what a prefix cache can serve)
A+B+C    several suites taking turns (prompt i from suite i mod 3), each keeping its class
file:P   a JSONL file, one {"prompt": "..."} or {"messages": [...]} per line (optional "max_tokens",
         "id"), cycled

Conversations (chat:, conversations:) and ShareGPT files are in ``conversation``, traces in ``trace``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lossless import validate
from lossless.client.prompt import Prompt
from lossless.errors import UsageError

SUITES = ("short", "long", "mixed", "lengths", "grounded")

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
WORDS = tuple(_PROSE.split(" "))
# ~1.3 tokens per common English word in Llama/GPT tokenizers; close enough for 100 / 1k / 10k classes.
_LENGTHS = (("len-100", 100), ("len-1k", 1_000), ("len-10k", 10_000))


def prompts(suite: str, rng: random.Random) -> Iterator[Prompt]:
    if suite.startswith("file:"):
        return _from_file(Path(suite[5:]))
    if suite.startswith("prefix:"):
        return _prefixed(*_prefix_spec(suite), rng)
    if "+" in suite:
        parts = [prompts(part, random.Random(rng.random())) for part in suite.split("+")]
        return _turns(parts)
    makers = {"short": _short, "long": _long, "mixed": _mixed, "lengths": _lengths, "grounded": _grounded}
    if suite not in makers:
        raise UsageError(
            f"unknown suite {suite!r}; choose one of {', '.join(SUITES)}, prefix:TOKENS[,PREFIXES], "
            "file:PATH.jsonl or several joined by + (short+long)"
        )
    return makers[suite](rng)


def _turns(parts: list[Iterator[Prompt]]) -> Iterator[Prompt]:
    for i in range(1_000_000_000):
        p = next(parts[i % len(parts)])
        yield Prompt(f"{p.cls}-{i}", p.cls, p.messages, p.max_tokens)  # ids stay unique: "short+short"


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
        filler = " ".join(rng.choices(WORDS, k=int(tokens / 1.3)))
        text = f"{prefix} Summarise the following text in one sentence.\n\n{filler}"
        yield Prompt(f"{cls}-{i}", cls, _user(text))


def _prefix_spec(suite: str) -> tuple[int, int]:
    parts = suite[len("prefix:") :].split(",")
    try:
        tokens, pool = int(parts[0]), int(parts[1]) if len(parts) > 1 else 1
    except ValueError:
        tokens = pool = 0
    if len(parts) > 2 or not 1 <= tokens <= 1_000_000 or not 1 <= pool <= 100_000:
        raise UsageError(f"suite {suite!r}: expected prefix:TOKENS[,PREFIXES], e.g. prefix:5000,4")
    return tokens, pool


def _prefixed(tokens: int, pool: int, rng: random.Random) -> Iterator[Prompt]:
    # each prefix opens with its own id, so prefixes share no first tokens with each other
    words = int(tokens / 1.3)
    prefixes = [
        f"Document {k} ({rng.getrandbits(64):016x}). " + " ".join(rng.choices(WORDS, k=words))
        for k in range(pool)
    ]
    for i in range(1_000_000_000):
        question = f"Question {i} ({rng.getrandbits(32):08x}): summarise the document above in one sentence."
        cls = "prefix-first" if i < pool else "prefix-repeat"
        yield Prompt(f"prefix-{i}", cls, (("system", prefixes[i % pool]), ("user", question)))


_PASSAGES = (
    "The bicycle was invented in the nineteenth century. Early models had no pedals, and riders pushed "
    "themselves along with their feet. Pedals, chains and air-filled tyres came later, and by 1900 the "
    "bicycle had become the cheapest way for ordinary people to travel.",
    "Bees collect nectar from flowers and carry it back to the hive. There they pass it from bee to bee, "
    "and fan it with their wings until most of the water has gone. What remains is honey, which the bees "
    "store in wax cells and seal for the winter.",
    "A compiler reads a program as text, splits it into tokens, and builds a tree from them. It then checks "
    "the tree, improves it, and finally writes machine code that the processor can run directly.",
)
_CODE = (
    "def total(items):\n    acc = 0\n    for item in items:\n        acc = acc + item.price * item.count\n"
    "    return acc\n",
    "def longest(words):\n    acc = ''\n    for word in words:\n        if len(word) > len(acc):\n"
    "            acc = word\n    return acc\n",
    "def count_vowels(text):\n    acc = 0\n    for ch in text.lower():\n        if ch in 'aeiou':\n"
    "            acc += 1\n    return acc\n",
)
# Each answer should copy most of its input: the n-gram drafter proposes text from the prompt.
_GROUNDED = (
    lambda rng: f"Repeat the following text exactly, word for word:\n\n{rng.choice(_PASSAGES)}",
    lambda rng: (
        f"Rewrite the following text, replacing every full stop with an exclamation mark:\n\n"
        f"{rng.choice(_PASSAGES)}"
    ),
    lambda rng: (
        f"Rename the variable `acc` to `result` in this Python function and show the whole "
        f"function:\n\n```python\n{rng.choice(_CODE)}```"
    ),
    lambda rng: (
        f"Add a docstring to this Python function and show the whole function:\n\n```python\n"
        f"{rng.choice(_CODE)}```"
    ),
)


def _grounded(rng: random.Random) -> Iterator[Prompt]:
    for i in range(1_000_000_000):
        yield Prompt(f"grounded-{i}", "grounded", _user(rng.choice(_GROUNDED)(rng)))


def _from_file(path: Path) -> Iterator[Prompt]:
    try:
        lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    except OSError as exc:
        raise UsageError(f"cannot read prompt file {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"prompt file {path} is not UTF-8 text: {exc.reason}") from None
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
    except ValueError as exc:  # JSONDecodeError, and an int past Python's 4300 digits
        raise UsageError(f"{where}: not valid JSON ({getattr(exc, 'msg', exc)})") from None
    except RecursionError:
        raise UsageError(f"{where}: nests too deeply") from None
    if not isinstance(row, dict):
        raise UsageError(f"{where}: each line must be a JSON object")
    max_tokens, prompt_id = row.get("max_tokens"), row.get("id", f"file-{n}")
    if max_tokens is not None and not validate.is_count(max_tokens):  # true is an int to Python
        raise UsageError(f"{where}: 'max_tokens' must be a positive integer, got {max_tokens!r}")
    if not isinstance(prompt_id, str | int) or isinstance(prompt_id, bool) or prompt_id == "":
        raise UsageError(f"{where}: 'id' must be a non-empty string or an integer, got {prompt_id!r}")
    return Prompt(str(prompt_id), "file", _messages(row, where), max_tokens)


def _messages(row: dict[str, Any], where: str) -> tuple[tuple[str, str], ...]:
    prompt, messages = row.get("prompt"), row.get("messages")
    if isinstance(prompt, str) and prompt and messages is None:
        return _user(prompt)
    usage = f"{where}: needs a non-empty 'prompt' string or a non-empty 'messages' list of {{role, content}}"
    if prompt is not None or not isinstance(messages, list) or not messages:
        raise UsageError(usage)
    turns = []
    for m in messages:
        role = m.get("role", "user") if isinstance(m, dict) else None
        if not isinstance(role, str) or not role or not isinstance(m.get("content"), str):
            raise UsageError(f"{usage}, strings both; got {m!r:.80}")
        turns.append((role, m["content"]))
    return tuple(turns)
