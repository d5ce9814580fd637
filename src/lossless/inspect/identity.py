"""Which tokenizer family is behind an endpoint, from ``usage.prompt_tokens`` alone.

Tokenizer families cut the same text into different numbers of tokens: digits one at a time or three at
a time, a run of spaces as one token or many, a Chinese or Thai character whole or as UTF-8 bytes, an
emoji as four byte tokens... A few crafted strings (``PROBES``) give each family a vector of counts, and
the nearest vector in a table of reference counts names the family.

An endpoint never reports the count of a string alone: ``prompt_tokens`` also holds what its chat
template adds (role markers, BOS, a default system prompt), which is unknown and differs between
servers. So each string is measured *differentially*: it is sent as the user message
``PREFIX + text + SUFFIX`` of a chat request with ``max_tokens: 1``, the baseline message
``PREFIX + BASELINE + SUFFIX`` is sent the same way, and the baseline's count is subtracted; the
template adds the same tokens to both, so it cancels. The fixed prefix and suffix are what make it
cancel exactly: the template's text always meets the same word at either edge of the message ("Say",
"ok": a word starts and ends a token in every family here), so whatever the template does at the edges
(a space or newline before the message, trimming it, an end-of-turn marker after it) happens alike to
every message, and never to a probe string. The reference counts are taken the same way from each
tokenizer alone, without BOS or special tokens:
``count(probe_message(text)) - count(probe_message(BASELINE))``. The baseline is sent first and last: a
server whose count of one message changes between requests cannot be read this way, and the verdict
says so.

Matching (``identify``): references whose counts are all equal form one group ("llama-spm / phi-3": these
strings cannot tell them apart); the distance from the measured counts to a group is the sum over the
strings of the absolute differences, in tokens.
    evident       a group matches exactly (distance 0).
    inconclusive  no exact match, but the nearest group is within NEAR tokens and the runner-up at least
                  twice as far: named as a best guess (a variant of that family, or a server that changes
                  the text or counts differently). Also every "cannot tell": no usage in the answers, a
                  count that does not repeat, no string counted.
    not evident   no group is near, or two are equally near: the tokenizer is none of the references
                  (the nearest is still reported, with its distance).
A tokenizer missing from the table therefore reads as `not evident`, not as a wrong name, unless its
counts fall within NEAR of one that is there; ``references`` adds any tokenizer the user names.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from lossless.client.wire import Reply, Wire, chat, post_all
from lossless.errors import UsageError

Verdict = Literal["evident", "not evident", "inconclusive"]
Counts = Mapping[str, int]  # probe name -> tokens its message has beyond the baseline message

PREFIX, SUFFIX = "Say: ", " ok"
BASELINE = ""
# name -> text. Each string is there because some families split it differently from the others.
PROBES: dict[str, str] = {
    # one token per digit (SentencePiece Llama, Qwen, SmolLM2), groups of three (Llama 3), BPE's merges
    "digits": "1234567890",
    "hex": "0x7fffffff 0xDEADBEEF",  # letters and digits in one word
    "code": "def f(x):\n    return x * 2",  # a newline, then a four-space indent
    "braces": "    if (a != b) { return -1; }",
    "json": '{"key": [1, 2, 3]}',
    "spaces": "a" + " " * 16 + "b",  # mostly one token; one per space in GPT-2's and Baichuan's
    "contractions": "I'm sure they'll say we've won",
    # plain words that close vocabularies merge differently (StarCoder's and Refact's differ only there)
    "words": "raising pipes, empirical logistic powers in monospace",
    "chinese": "机器学习是人工智能的一个分支",
    "japanese": "こんにちは世界",
    # combining marks: Qwen3.5's pre-tokenizer keeps them with their letter, Qwen2's splits them off
    "thai": "ขอบคุณมากครับ วันนี้อากาศดีมาก",
    "greek": "Καλημέρα κόσμε",
    # accents as separate combining characters (NFD), not the precomposed letters of ordinary text
    "decomposed": "nai\u0308ve cafe\u0301 de\u0301ja\u0300 vu cre\u0300me bru\u0302le\u0301e",
    "emoji": "🦙🚀🎉",  # byte fallback: four tokens each where the vocabulary lacks them
}
NEAR = 3  # tokens: the farthest a best guess may be from its reference
TABLE = Path(__file__).with_name("tokenizers.json")


def probe_message(text: str) -> str:
    return PREFIX + text + SUFFIX


def fingerprint(count: Callable[[str], int]) -> dict[str, int]:
    """A tokenizer's reference counts: tokens of each probe's message beyond the baseline message."""
    base = count(probe_message(BASELINE))
    return {name: count(probe_message(text)) - base for name, text in PROBES.items()}


def counter(spec: str) -> Callable[[str], int]:
    """A function counting a text's tokens (no BOS, no special tokens) with the tokenizer ``spec`` names:
    a GGUF file (by llama.cpp, which made the bundled table and reads every vocabulary type, when
    llama-cpp-python is installed), else whatever ``provision.counting`` loads (a tokenizer.json, a
    folder holding one, a byte-level BPE GGUF, an embedded model's name)."""
    path = Path(spec)
    if path.suffix == ".gguf" and path.is_file():
        try:
            import llama_cpp
        except (ModuleNotFoundError, OSError):  # OSError: installed without the library it loads
            pass
        else:
            try:
                vocab = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
            except (ValueError, RuntimeError) as exc:
                raise UsageError(f"tokenizer {spec!r}: llama.cpp cannot read it ({exc})") from None
            return lambda text: len(vocab.tokenize(text.encode(), add_bos=False, special=False))
    from lossless.provision.counting import load_token_counter

    return load_token_counter(spec)


def reference_name(spec: str) -> str:
    path = Path(spec)
    if path.name == "tokenizer.json":  # every Hugging Face tokenizer has that name: its folder's tells
        return path.parent.name
    return path.stem if path.suffix == ".gguf" else path.name


@functools.cache
def _table() -> dict[str, Any]:
    table: dict[str, Any] = json.loads(TABLE.read_text(encoding="utf-8"))
    return table


def bundled() -> dict[str, dict[str, int]]:
    """The reference counts shipped in tokenizers.json: family -> probe name -> count."""
    return {name: dict(family["counts"]) for name, family in _table()["families"].items()}


def references(named: Sequence[str] = ()) -> dict[str, dict[str, int]]:
    """The bundled references and one for each tokenizer the user names (see ``counter``); a named one
    takes the place of a bundled one of the same name."""
    refs = bundled()
    for spec in named:
        refs[reference_name(spec)] = fingerprint(counter(spec))
    return refs


@dataclass(frozen=True)
class Identity:
    verdict: Verdict
    family: str | None  # the family named: matched (evident) or best guess (inconclusive); else None
    nearest: str | None = None  # the nearest reference group, whatever the verdict
    distance: int | None = None  # tokens between the measured counts and ``nearest``
    runner_up: str | None = None  # the next group
    runner_up_distance: int | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    note: str = ""  # one line for people: why this verdict


def identify(counts: Counts, refs: Mapping[str, Counts] | None = None) -> Identity:
    """The reference family nearest to ``counts`` (the bundled ones when ``refs`` is None), judged by
    the rule in the module docstring. Probes missing from ``counts`` are left out of every distance."""
    refs = bundled() if refs is None else refs
    names = [p for p in PROBES if p in counts]
    if not names or not refs:
        return Identity("inconclusive", None, note="cannot tell: no string was counted")
    groups: dict[tuple[int, ...], list[str]] = {}
    for name in sorted(refs):
        groups.setdefault(tuple(refs[name][p] for p in names), []).append(name)
    ranked = sorted(
        (sum(abs(counts[p] - c) for p, c in zip(names, vector, strict=True)), " / ".join(families), vector)
        for vector, families in groups.items()
    )
    best, nearest, vector = ranked[0]
    second, runner = (ranked[1][0], ranked[1][1]) if len(ranked) > 1 else (None, None)
    evidence = {
        "counts": {p: counts[p] for p in names},
        "nearest_counts": dict(zip(names, vector, strict=True)),
        "differs_on": [p for p, c in zip(names, vector, strict=True) if counts[p] != c],
        "strings": len(names),
        "references": len(refs),
    }
    verdict, family, note = _rule(nearest, best, runner, second)
    return Identity(verdict, family, nearest, best, runner, second, evidence, note)


def _rule(nearest: str, best: int, runner: str | None, second: int | None) -> tuple[Verdict, str | None, str]:
    if best == 0:
        shared = " share every count: these strings cannot tell them apart" if " / " in nearest else ""
        return "evident", nearest, nearest + shared if shared else ""
    then = f"; next {runner} at {second}" if runner is not None else ""
    if best <= NEAR and (second is None or second >= 2 * best):
        note = f"nearest {nearest}, {best} token(s) off{then}: a variant, or a server that changes the text"
        return "inconclusive", nearest, note
    return "not evident", None, f"no reference matches: nearest {nearest} at {best} token(s){then}"


# --- measuring an endpoint ----------------------------------------------------------------------------

MESSAGES = ("baseline", *PROBES, "baseline again")  # the order requests are made and answers kept in


@dataclass(frozen=True)
class Measured:
    counts: dict[str, int] | None  # probe name -> prompt_tokens beyond the baseline's; None: cannot tell
    prompt_tokens: dict[str, int | None]  # each message's usage.prompt_tokens as answered (MESSAGES)
    models: tuple[str, ...] = ()  # the distinct ``model`` the answers declare
    fingerprints: tuple[str, ...] = ()  # the distinct ``system_fingerprint`` they carry
    note: str = ""  # why counts is None, or which strings went uncounted


async def measure(w: Wire, concurrency: int = 4) -> Measured:
    """Send the baseline message, every probe's and the baseline again, each as a one-token chat
    request, and read their prompt-token counts. A request that fails is data (see ``measured``);
    an endpoint that never answers raises ``EndpointError`` from the wire."""
    texts = (BASELINE, *PROBES.values(), BASELINE)
    # nothing but max_tokens: the fewer fields, the fewer servers that refuse one (no temperature for
    # some reasoning models); the answer itself is never read
    bodies = [chat(probe_message(t), max_tokens=1) for t in texts]
    return measured(await post_all(w, bodies, concurrency))


def measured(replies: Sequence[Reply]) -> Measured:
    """The answers to ``MESSAGES``, in order -> the differential counts, or why there are none."""
    tokens = {
        n: r.usage_int("prompt_tokens") if r.ok else None for n, r in zip(MESSAGES, replies, strict=True)
    }
    out = functools.partial(
        Measured,
        prompt_tokens=tokens,
        models=_distinct(r.body.get("model") for r in replies),
        fingerprints=_distinct(r.body.get("system_fingerprint") for r in replies),
    )
    first, last = tokens["baseline"], tokens["baseline again"]
    if bad := next((r for r in (replies[0], replies[-1]) if not r.ok), None):
        return out(None, note=f"the baseline message was not answered ({_failure(bad)})")
    if first is None or last is None:
        return out(None, note="the server sends no usage.prompt_tokens: its tokenizer cannot be told")
    if first != last:
        note = f"one message was counted {first} then {last} prompt tokens: the counts are not the text's"
        return out(None, note=note)
    counts = {p: t - first for p in PROBES if (t := tokens[p]) is not None}
    missed = [p for p in PROBES if tokens[p] is None]
    note = f"not counted: {', '.join(missed)}" if missed else ""
    return out(counts or None, note=note if counts else "no probe string was counted")


def judge(m: Measured, refs: Mapping[str, Counts] | None = None) -> Identity:
    """``identify`` on a measurement, with what the server declares in the evidence; a measurement
    without counts is `inconclusive` and says why, plainly."""
    declared = {"declared_model": list(m.models), "system_fingerprint": list(m.fingerprints)}
    if m.counts is None:
        evidence = {**declared, "prompt_tokens": m.prompt_tokens}
        return Identity("inconclusive", None, evidence=evidence, note=f"cannot tell: {m.note}")
    found = identify(m.counts, refs)
    note = "; ".join(n for n in (found.note, m.note) if n)
    return replace(found, evidence={**found.evidence, **declared}, note=note)


def _failure(reply: Reply) -> str:
    if reply.status == 200:
        return f"an unusable answer: {reply.error}"
    return f"HTTP {reply.status}: {reply.error}" if reply.status else f"no answer: {reply.error}"


def _distinct(values: Iterable[Any]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(v[:200] for v in values if isinstance(v, str) and v))
