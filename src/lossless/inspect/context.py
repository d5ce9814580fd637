"""The context limit by behaviour: the longest prompt an endpoint answers, whatever /v1/models declares.

Prompts are one short word repeated (``WORD``); two short requests calibrate the server's count of them
(``usage.prompt_tokens`` = overhead + repeats x tokens per repeat, the overhead being the chat
template's), so a prompt of any chosen length can be built and every answered one is counted exactly.
Each request asks ``max_tokens: 1``: the limit read here is prompt + 1 generated token.

    declared   a declared limit L is confirmed by 2 requests: a prompt just over L refused, one just
               under answered.
    measured   no declaration (or a wrong one): prompts double from ``start`` tokens until one is
               refused (or ``cap`` is answered), then bisection between the longest answered and the
               shortest refused until they are within ``resolution`` of each other.
    refused at N / accepted at N   the search stopped (request or time budget, an unclear answer)
               with only one bound near: an N-token prompt refused, or answered.
    not measured   nothing to tell from: the short prompts were not answered, or carry no usage.

A refusal is a 4xx whose message names the context or the length (``CONTEXT_WORDS``). A 5xx, a
time-out, a reset, 401/403/404/429 or 413 (a size limit on the body, not on tokens) is "cannot tell":
never read as a limit, it ends the search with the bounds found so far. Long prompts cost the server a
full prefill each (on a CPU, minutes for 8k tokens of a 135M model; seconds on an accelerator), so the
search is bounded in requests and time and refusals, which servers give before any prefill, are cheap.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any, Literal

from lossless.client.wire import Reply, Wire, chat

WORD = "the "  # one token a repeat in every tokenizer family tried; calibrated, never assumed
CALIBRATION = (32, 96)  # repeats of the two calibrating prompts
# what a context refusal says: vLLM/OpenAI "maximum context length", llama.cpp "exceeds the available
# context size", TGI "tokens + max_new_tokens must be <= N", ours "context_length_exceeded"
CONTEXT_WORDS = re.compile(r"context|too long|too many|length|exceed|must be <=|n_ctx|token", re.I)
NOT_LENGTH = frozenset({401, 403, 404, 408, 413, 429})  # 4xx that never mean "this prompt is too long"
MIN_STEP = 16  # tokens: the bisection's finest step

Kind = Literal["accepted", "refused", "unclear"]


@dataclass(frozen=True)
class ContextLimit:
    status: str  # "declared", "measured", "refused at N", "accepted at N", "not measured"
    limit: int | None  # tokens, prompt + the one generated: the declared one confirmed, or accepted + 1
    accepted: int | None  # the longest prompt answered, by its usage.prompt_tokens
    refused: int | None  # the shortest prompt refused for its length (tokens, by the calibration)
    requests: int  # sent
    note: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def outcome(reply: Reply) -> tuple[Kind, int | None, str]:
    """One answer -> accepted (with its prompt tokens), refused for its length, or unclear (with why)."""
    if reply.ok:
        tokens = reply.usage_int("prompt_tokens")
        return ("accepted", tokens, "") if tokens else ("unclear", None, "no usage.prompt_tokens")
    error = (reply.error or "")[:160]
    if 400 <= reply.status < 500 and reply.status not in NOT_LENGTH and CONTEXT_WORDS.search(error):
        return "refused", None, error
    what = f"HTTP {reply.status}" if reply.status else "no answer (time-out or connection)"
    return "unclear", None, f"{what}: {error}" if error else what


class _Prober:
    """Sends prompts of a chosen length, within a request and time budget."""

    def __init__(self, w: Wire, max_requests: int, budget_s: float, clock: Callable[[], float]) -> None:
        self.w, self.max_requests, self.budget_s, self.clock = w, max_requests, budget_s, clock
        self.start = clock()
        self.used = 0
        self.overhead, self.per = 0.0, 1.0
        self.floor = 0  # the longer calibrating prompt's tokens: answered before any search

    def spent(self) -> str:
        if self.used >= self.max_requests:
            return f"stopped after {self.used} requests (the budget)"
        if self.clock() - self.start >= self.budget_s:
            return f"stopped after {self.clock() - self.start:.0f} s (the budget: {self.budget_s:g} s)"
        return ""

    def repeats(self, tokens: int) -> int:
        return max(1, round((tokens - self.overhead) / self.per))

    async def send(self, tokens: int) -> tuple[Kind, int, str]:
        """A prompt of about ``tokens`` -> its outcome and its tokens: counted when answered, else
        estimated from the calibration."""
        n = self.repeats(tokens)
        self.used += 1
        kind, counted, why = outcome(await self.w.post(chat(WORD * n, max_tokens=1)))
        return kind, counted or round(self.overhead + n * self.per), why

    async def calibrate(self) -> str:
        """The count of the word and of the template around it; "" when done, else why not."""
        counts = []
        for n in CALIBRATION:
            self.used += 1
            kind, tokens, why = outcome(await self.w.post(chat(WORD * n, max_tokens=1)))
            if kind != "accepted" or tokens is None:
                return f"a {n}-word prompt: {why or 'refused'}"
            counts.append(tokens)
        (n1, n2), (t1, t2) = CALIBRATION, counts
        if t2 <= t1:
            return f"{n1} and {n2} words were counted {t1} and {t2} prompt tokens: not a count of the text"
        self.per = (t2 - t1) / (n2 - n1)
        self.overhead = t1 - n1 * self.per
        self.floor = t2
        return ""


@dataclass
class _Bounds:
    lo: int  # the longest prompt answered
    hi: int | None = None  # the shortest refused
    why: str = ""  # why the search stopped early


async def measure(
    w: Wire,
    declared: int | None,
    *,
    start: int = 1024,
    cap: int = 131072,
    resolution: float = 0.02,
    max_requests: int = 24,
    budget_s: float = 180.0,
    clock: Callable[[], float] = time.monotonic,
) -> ContextLimit:
    """The longest prompt ``w``'s endpoint answers: ``declared`` confirmed, or searched for (module
    docstring). ``resolution``: the bisection stops when the bounds are within this share of the
    refused one (and ``MIN_STEP`` tokens). No new request starts past ``max_requests`` or ``budget_s``;
    each may take the wire's time-out. An endpoint never reached raises ``EndpointError`` (the wire's)."""
    p = _Prober(w, max_requests, budget_s, clock)
    why = await p.calibrate()
    if why:
        return ContextLimit("not measured", None, None, None, p.used, f"cannot tell: {why}")
    b = _Bounds(p.floor)
    said = ""
    if declared is not None:
        confirmed, said = await _confirm(p, declared, b)
        if confirmed is not None or b.why:
            return confirmed or _result(p, b, resolution, said)
    await _double(p, b, start, cap)
    await _bisect(p, b, resolution)
    return _result(p, b, resolution, said)


async def _confirm(p: _Prober, declared: int, b: _Bounds) -> tuple[ContextLimit | None, str]:
    """Just over ``declared`` refused and just under answered: confirmed. Otherwise ``b`` holds what
    was learnt and the search goes on (or ``b.why`` says why it cannot). Over first: a refusal comes
    before any prefill, so it is cheap, and an upper bound stays known if the long prompt under the
    limit then times out."""
    margin = max(MIN_STEP // 2, declared // 128)
    kind, over, why = await p.send(declared + margin)
    if kind == "unclear":
        b.why = f"a {over:,}-token prompt: {why}"
        return None, ""
    if kind == "accepted":
        b.lo = max(b.lo, over)
        return None, f"declared {declared:,}, but a {over:,}-token prompt was answered"
    b.hi = over
    kind, under, why = await p.send(declared - 1 - margin)
    if kind == "accepted":
        note = f"a {under:,}-token prompt answered, a {over:,}-token one refused"
        return ContextLimit("declared", declared, under, over, p.used, note), ""
    if kind == "refused":
        b.hi = under
        return None, f"declared {declared:,}, but a {under:,}-token prompt was refused"
    b.why = f"a {under:,}-token prompt: {why}"
    return None, f"declared {declared:,}"


async def _double(p: _Prober, b: _Bounds, start: int, cap: int) -> None:
    for size in _sizes(start, cap):
        if b.hi is not None or b.why:
            return
        if size <= b.lo:
            continue
        b.why = p.spent()
        if b.why:
            return
        kind, tokens, why = await p.send(size)
        if kind == "accepted":
            b.lo = max(b.lo, tokens)
        elif kind == "refused":
            b.hi = tokens
        else:
            b.why = f"a {tokens:,}-token prompt: {why}"


def _sizes(start: int, cap: int) -> list[int]:
    sizes = [start]
    while sizes[-1] * 2 < cap:
        sizes.append(sizes[-1] * 2)
    return [*sizes, cap] if cap > start else [cap]


def _close(b: _Bounds, resolution: float) -> bool:
    return b.hi is not None and b.hi - b.lo <= max(MIN_STEP, resolution * b.hi)


async def _bisect(p: _Prober, b: _Bounds, resolution: float) -> None:
    while b.hi is not None and not b.why and not _close(b, resolution):
        b.why = p.spent()
        if b.why:
            return
        kind, tokens, why = await p.send((b.lo + b.hi) // 2)
        if kind == "accepted" and tokens >= b.hi:
            # answered, and longer than the refused prompt's estimate: the estimate was off
            b.lo, b.hi, b.why = tokens, None, "a refused prompt's length was misestimated"
        elif kind == "accepted":
            b.lo = tokens
        elif kind == "refused":
            b.hi = max(b.lo + 1, min(b.hi, tokens))
        else:
            b.why = f"a {tokens:,}-token prompt: {why}"


def _result(p: _Prober, b: _Bounds, resolution: float, said: str) -> ContextLimit:
    notes = [n for n in (said, b.why) if n]
    if b.hi is not None and _close(b, resolution):
        notes.insert(0, f"a {b.lo:,}-token prompt answered, a {b.hi:,}-token one refused")
        return ContextLimit("measured", b.lo + 1, b.lo, b.hi, p.used, "; ".join(notes))
    if b.hi is not None:
        notes.insert(0, f"between {b.lo + 1:,} and {b.hi:,} tokens")
        return ContextLimit(f"refused at {b.hi:,}", None, b.lo, b.hi, p.used, "; ".join(notes))
    if b.lo > p.floor:
        notes.insert(0, f"a {b.lo:,}-token prompt answered, none refused")
        return ContextLimit(f"accepted at {b.lo:,}", None, b.lo, None, p.used, "; ".join(notes))
    return ContextLimit("not measured", None, None, None, p.used, "cannot tell: " + "; ".join(notes))
