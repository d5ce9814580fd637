"""Recorded workloads: timestamped request traces (Mooncake) and recorded chats (ShareGPT).

Mooncake traces (kvcache-ai/Mooncake: ``mooncake_trace.jsonl`` and ``FAST25-release/traces/*.jsonl``,
Kimi's production traffic) hold one request a line and no text:

    {"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48, ...]}

``timestamp`` is milliseconds into the trace; the lengths are tokens; ``hash_ids`` names each block of
512 input tokens (``block_tokens``), the same id wherever the same block recurs, so two requests whose
leading ids agree share that prefix: what a prefix cache can serve. ``load_trace`` writes one text per
hash id, seeded from the id alone (the same in every request and every run), and joins them, so a shared
run of leading ids gives an identical leading text; the last block is cut so that the prompt holds
``input_length`` tokens, the chat template's own (``overhead``) among them. Ids past what the tokens left
after the overhead fill are dropped; tokens past the listed ids, and a line without ids, get text of their
own, opened by the request's number and a random id, so they share no prefix with anything.

Replay: request i is sent ``(timestamp_i - timestamp_0) / 1000 / speed`` seconds into the run (speed 2:
twice as fast), asking for ``output_length`` tokens (``max_tokens``; with ``force_output``, through
end-of-sequence). The lines must be in time order.

ShareGPT (conversations shared from ChatGPT, as published in ``ShareGPT_V3_unfiltered_cleaned_split.json``
of anon8231489123/ShareGPT_Vicuna_unfiltered and read by vLLM's, SGLang's and others' serving benchmarks)
is a JSON array, or JSONL, of ``{"id": ..., "conversations": [{"from": "human", "value": "..."},
{"from": "gpt", "value": "..."}, ...]}``; "user"/"assistant" are accepted for "from", and
``{"role", "content"}`` turns too. ``load_sharegpt`` keeps each conversation's human turns and the length
of the recorded reply to each; ``sharegpt_prompts`` sends first turns alone, as vLLM's benchmark does.
"""

from __future__ import annotations

import itertools
import json
import math
import random
from bisect import bisect_right
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lossless import validate
from lossless.bench.workload.prompts import WORDS
from lossless.bench.workload.synthetic import Synthetic, exact_text
from lossless.client.prompt import Prompt
from lossless.errors import UsageError

Encoder = tuple[Callable[[str], list[int]], Callable[[list[int]], str]]  # (encode, decode)
TOKENS_PER_WORD = 1.3  # common English words in Llama/GPT tokenizers, as prompts.py counts them
CHECKED = 8  # prompts encoded whole to check that their blocks' tokens add up (_Texts)


@dataclass(frozen=True)
class _Request:
    timestamp: float  # milliseconds into the trace
    input_length: int  # tokens, the chat template's included
    output_length: int
    hash_ids: tuple[int, ...]  # one per block of input tokens; () where the line lists none


def load_trace(
    path: Path,
    speed: float,
    rng: random.Random,
    encoder: Encoder | None = None,
    overhead: int = 0,
    block_tokens: int = 512,
    force_output: bool = False,
) -> list[tuple[float, Prompt]]:
    """(seconds into the run, prompt) for each line of a Mooncake trace, in time order.

    With ``encoder`` each prompt is ``input_length - overhead`` tokens exactly (at least 1) and says so
    in ``input_tokens``; without one, it is that many tokens at about 1.3 tokens a word, and
    ``input_tokens`` is None. ``rng`` draws only the text that is no block's."""
    if not validate.is_number(speed) or speed <= 0:
        raise UsageError(f"trace speed must be a number above 0, got {speed!r}")
    if not validate.is_count(block_tokens, 4) or not validate.is_count(overhead, 0):
        raise UsageError(
            f"trace: block_tokens must be >= 4 and overhead >= 0, got {block_tokens}, {overhead}"
        )
    requests = _read_trace(path, block_tokens)
    texts = _Texts(encoder, block_tokens)
    first, out = requests[0].timestamp, []
    for i, r in enumerate(requests):
        content = max(1, r.input_length - overhead)
        text = texts.text(r.hash_ids, content, i, rng)
        prompt = Prompt(
            f"trace-{i}",
            "trace",
            (("user", text),),
            max_tokens=r.output_length,
            input_tokens=overhead + content if encoder else None,
            output_tokens=r.output_length,
            force_output=force_output,
        )
        out.append(((r.timestamp - first) / 1000 / speed, prompt))
    return out


def replay(spec: Synthetic, rng: random.Random) -> list[tuple[float, Prompt]]:
    """A run's trace (``spec.trace``): token-exact with its tokenizer, less the template's overhead."""
    from lossless.provision.counting import load_token_encoder

    assert spec.trace is not None
    encoder = load_token_encoder(spec.tokenizer)
    return load_trace(Path(spec.trace), 1.0, rng, encoder, spec.overhead, force_output=spec.force_output)


def _read_trace(path: Path, block_tokens: int) -> list[_Request]:
    requests: list[_Request] = []
    for where, line in _lines(path, "trace"):
        r = _request(_json(line, where), where, block_tokens)
        if requests and r.timestamp < requests[-1].timestamp:
            earlier = requests[-1].timestamp
            raise UsageError(
                f"{where}: timestamp {r.timestamp:g} is before the line above's ({earlier:g}); "
                "a trace's lines must be in time order"
            )
        requests.append(r)
    if not requests:
        raise UsageError(f"trace {path} is empty")
    return requests


def _request(row: Any, where: str, block_tokens: int) -> _Request:
    if not isinstance(row, dict):
        raise UsageError(
            f"{where}: each line must be a JSON object like "
            '{"timestamp": 0, "input_length": 600, "output_length": 50, "hash_ids": [0, 1]}'
        )
    stamp: Any = row.get("timestamp")
    if not validate.is_number(stamp):
        raise UsageError(f"{where}: 'timestamp' must be a number (milliseconds), got {stamp!r:.40}")
    lengths: list[int] = []
    for key in ("input_length", "output_length"):
        value: Any = row.get(key)
        if not validate.is_count(value):
            raise UsageError(f"{where}: {key!r} must be a whole number of tokens >= 1, got {value!r:.40}")
        lengths.append(value)
    ids = row.get("hash_ids", [])
    if not isinstance(ids, list) or not all(isinstance(h, int) and not isinstance(h, bool) for h in ids):
        raise UsageError(f"{where}: 'hash_ids' must be a list of integers, got {ids!r:.60}")
    blocks = math.ceil(lengths[0] / block_tokens)
    if len(ids) > blocks:
        raise UsageError(
            f"{where}: {len(ids)} hash ids, but {lengths[0]} input tokens fill only "
            f"{blocks} blocks of {block_tokens}"
        )
    return _Request(float(stamp), lengths[0], lengths[1], tuple(ids))


class _Texts:
    """Prompt texts from hash ids; each block's text is made once.

    A block is words and a closing newline, and every block opens with a word. Byte-level BPE tokenizers
    (GPT-2, Llama 3, Qwen, SmolLM) split text into words, and at such a newline, before they merge bytes
    into tokens, so a joined prompt's tokens are its blocks' tokens end to end: leading hash ids shared
    give identical leading *tokens*, not just text, and a prompt's count is the sum of its pieces' counts
    (each word's count is measured once), so no prompt is encoded whole to build it. The first prompts,
    until ``CHECKED`` of them have joined blocks, are encoded whole to check this; a tokenizer that breaks
    it is caught there, and from then on each prompt is mended by whole-prompt encodes (exact, and slower;
    the shared text prefix stays, shared tokens across a join are then not promised)."""

    def __init__(self, encoder: Encoder | None, block_tokens: int) -> None:
        self.encoder, self.block_tokens = encoder, block_tokens
        self.blocks: dict[int, str] = {}
        self.checks_left, self.additive = CHECKED, True
        if encoder is not None:
            encode = encoder[0]
            self.newline = len(encode("\n"))
            self.lead = {w: len(encode(w)) for w in WORDS}  # a piece's first word
            self.rest = {w: len(encode(" " + w)) for w in WORDS}

    def text(self, hash_ids: tuple[int, ...], n: int, i: int, rng: random.Random) -> str:
        """A prompt of ``n`` tokens: the blocks of ``hash_ids`` (as many as n needs), the last cut short."""
        parts = []
        for h, m in _plan(hash_ids, n, self.block_tokens):
            if h is None:
                parts.append(self._unique(m, i, rng))
            elif m == self.block_tokens:
                parts.append(self._block(h))
            else:  # the same words as the block's own, as far as they go (a prefix of its text)
                parts.append(self._words(random.Random(h), m))
        text = "".join(parts)
        if self.encoder is None:
            return text
        encode, decode = self.encoder
        if self.additive and self.checks_left > 0:  # until CHECKED prompts with a join have passed
            self.checks_left -= len(parts) > 1
            self.additive = len(encode(text)) == n
        return text if self.additive else exact_text(n, text, rng, encode, decode)

    def _block(self, h: int) -> str:
        if h not in self.blocks:
            newline = self.newline if self.encoder else 0
            self.blocks[h] = self._words(random.Random(h), self.block_tokens - newline) + "\n"
        return self.blocks[h]

    def _unique(self, m: int, i: int, rng: random.Random) -> str:
        opening = f"Request {i} ({rng.getrandbits(32):08x})."
        if self.encoder is None:
            return opening + "\n" + self._words(rng, max(1, m - 8))  # ~8 tokens in the opening
        encode, decode = self.encoder
        used = len(encode(opening + "\n"))
        if m <= used:  # too short for the opening and a word: its first tokens, mended
            return exact_text(m, opening, rng, encode, decode)
        return opening + "\n" + self._words(rng, m - used)

    def _words(self, rng: random.Random, m: int) -> str:
        """Words drawn from ``rng`` making ``m`` tokens (about m, without an encoder)."""
        if self.encoder is None:
            return " ".join(rng.choices(WORDS, k=max(1, round(m / TOKENS_PER_WORD))))
        words = rng.choices(WORDS, k=m)  # every word is a token at least: enough
        costs = list(itertools.accumulate([self.lead[words[0]], *(self.rest[w] for w in words[1:])]))
        k = bisect_right(costs, m)  # the words that fit whole
        words, left = words[:k], m - (costs[k - 1] if k else 0)
        while left > 0:  # topped up with words short enough (all but a few tokenizers: one token each)
            cost = self.rest if words else self.lead
            fits = [w for w in WORDS if cost[w] <= left]
            if not fits:
                encode, decode = self.encoder
                return exact_text(m, " ".join(words), rng, encode, decode)
            words.append(rng.choice(fits))
            left -= cost[words[-1]]
        return " ".join(words)


def _plan(hash_ids: tuple[int, ...], n: int, block_tokens: int) -> list[tuple[int | None, int]]:
    """(hash id, or None for text of the request's own; its tokens) for each piece of an n-token prompt."""
    blocks = math.ceil(n / block_tokens)
    ids: list[int | None] = list(hash_ids[:blocks])
    if len(ids) < blocks:
        ids.append(None)  # the tokens past the listed ids: one piece of the request's own
    pieces = [(h, block_tokens) for h in ids[:-1]]
    return [*pieces, (ids[-1], n - block_tokens * len(pieces))]


# --- ShareGPT ----------------------------------------------------------------------------------------

_HUMAN = frozenset({"human", "user"})
_REPLY = frozenset({"gpt", "assistant", "chatgpt", "bard", "bing", "model"})


@dataclass(frozen=True)
class Dialogue:
    id: str  # the entry's "id", else its place in the file (from 0)
    turns: tuple[str, ...]  # the human turns, in order
    reply_words: tuple[int, ...]  # words of the recorded reply after each human turn (0 where none)
    system: str | None = None  # a system turn that opens the conversation


def load_sharegpt(path: Path) -> list[Dialogue]:
    """The conversations of a ShareGPT file that hold a human turn (``read_sharegpt`` counts the rest)."""
    return read_sharegpt(path)[0]


def read_sharegpt(path: Path) -> tuple[list[Dialogue], int]:
    """(the conversations holding a human turn, how many entries were skipped for holding none)."""
    entries = _entries(path)
    if not entries:
        raise UsageError(f"ShareGPT file {path} is empty")
    dialogues = [d for n, (where, entry) in enumerate(entries) if (d := _dialogue(entry, where, n))]
    if not dialogues:
        raise UsageError(
            f"ShareGPT file {path}: none of its {len(entries)} entries holds a conversation with a human "
            'turn ({"conversations": [{"from": "human", "value": "..."}, ...]})'
        )
    return dialogues, len(entries) - len(dialogues)


def sharegpt_prompts(dialogues: list[Dialogue], rng: random.Random) -> Iterator[Prompt]:
    """Each conversation's first human turn alone (the system turn before it), as vLLM's benchmark sends
    them, in file order and round again; ``max_tokens`` from the recorded reply (None where none).
    ``rng`` draws nothing: the order is the file's (the parameter keeps the suites' one signature)."""
    if not dialogues:
        raise UsageError("no ShareGPT conversations to send")

    def cycle() -> Iterator[Prompt]:
        for i in itertools.count():
            d = dialogues[i % len(dialogues)]
            opening = (("system", d.system),) if d.system else ()
            words = d.reply_words[0]
            most = max(1, round(words * TOKENS_PER_WORD)) if words else None
            yield Prompt(f"sharegpt-{i}", "sharegpt", (*opening, ("user", d.turns[0])), most)

    return cycle()


def _entries(path: Path) -> list[tuple[str, Any]]:
    """(where, entry) for each entry of a JSON array or each line of a JSONL file."""
    text = _read(path, "ShareGPT file")
    if not text.lstrip().startswith("["):
        return [(where, _json(line, where)) for where, line in _lines(path, "ShareGPT file", text)]
    try:
        data = json.loads(text)
    except ValueError as exc:  # JSONDecodeError, and an int past Python's 4300 digits
        line = getattr(exc, "lineno", "")
        raise UsageError(f"{path}:{line}: not valid JSON ({getattr(exc, 'msg', exc)})") from None
    except RecursionError:
        raise UsageError(f"{path}: nests too deeply") from None
    return [(f"{path} entry {k}", entry) for k, entry in enumerate(data)]


def _dialogue(entry: Any, where: str, n: int) -> Dialogue | None:
    if not isinstance(entry, dict):
        raise UsageError(f"{where}: each conversation must be a JSON object with a 'conversations' list")
    turns = entry.get("conversations", entry.get("conversation"))
    system, human, replies = None, [], []
    replying = False  # a reply counts for the human turn just before it
    for k, turn in enumerate(turns if isinstance(turns, list) else ()):
        role, text = _turn(turn)
        if role == "system" and k == 0:
            system = text
        elif role in _HUMAN:
            replying = bool(text.strip())  # a blank turn is no turn: its reply goes with it
            if replying:
                human.append(text)
                replies.append(0)
        elif role in _REPLY and replying:
            replies[-1] += len(text.split())
    if not human:
        return None
    ident = entry.get("id")
    ident = str(ident) if isinstance(ident, str | int) and not isinstance(ident, bool) and ident != "" else n
    return Dialogue(str(ident), tuple(human), tuple(replies), system)


def _turn(turn: Any) -> tuple[str, str]:
    """(role, text) of a {"from", "value"} or {"role", "content"} turn; ("", "") for anything else."""
    if not isinstance(turn, dict):
        return "", ""
    role, text = turn.get("from", turn.get("role")), turn.get("value", turn.get("content"))
    if not isinstance(role, str) or not isinstance(text, str):
        return "", ""
    return role.lower(), text


# --- files -------------------------------------------------------------------------------------------


def _read(path: Path, what: str) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"cannot read {what} {path}: {exc.strerror}") from exc
    except UnicodeDecodeError as exc:
        raise UsageError(f"{what} {path} is not UTF-8 text: {exc.reason}") from None


def _lines(path: Path, what: str, text: str | None = None) -> list[tuple[str, str]]:
    """("path:line", line) for each line that is not blank."""
    text = _read(path, what) if text is None else text
    return [(f"{path}:{n}", line) for n, line in enumerate(text.splitlines(), 1) if line.strip()]


def _json(line: str, where: str) -> Any:
    try:
        return json.loads(line)
    except ValueError as exc:  # JSONDecodeError, and an int past Python's 4300 digits
        raise UsageError(f"{where}: not valid JSON ({getattr(exc, 'msg', exc)})") from None
    except RecursionError:
        raise UsageError(f"{where}: nests too deeply") from None
