"""The translated APIs' view of a job (Responses, Messages): its events as ``pieces()`` for a stream, or
as one ``WholeAnswer`` for a whole body, both read for tool calls as the chat path reads them; the API
modules beside this one shape them into each API's events and bodies.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from lossless.engine.engine import Delta
from lossless.engine.model.tokenizer import Tokenizer
from lossless.server.jobs import EngineJob, Failed, Finished
from lossless.server.openai import bodies, tool_calls, tool_stream
from lossless.server.openai.bodies import Usage
from lossless.server.openai.protocol import ApiRequest
from lossless.server.openai.replies import JobOutput, finished_usage, reported_finish


@dataclass(frozen=True)
class Ending:
    """How a generation ended, in the terms the chat API reports it."""

    finish: str  # stop | length | tool_calls
    stop_sequence: str | None  # the stop sequence that ended it; None: end of turn, a call or the length
    usage: Usage  # the counts the chat API reports for the same request


@dataclass(frozen=True)
class Piece:
    """One step of a stream: what to show now, read for tool calls as a chat stream is."""

    text: str = ""  # content
    calls: tuple[dict[str, Any], ...] = ()  # tool-call deltas in the chat format (``openai/tool_stream.py``)
    logprobs: tuple[dict[str, Any], ...] = ()  # the chat format's entries for this piece, when asked
    tokens: int = 0  # completion tokens so far
    end: Ending | None = None  # set on the last piece only


async def pieces(req: ApiRequest, job: EngineJob, tokenizer: Tokenizer) -> AsyncIterator[Piece | Failed]:
    """A started job's events -> pieces, ending with a piece that has ``end`` set, or a ``Failed``."""
    got = JobOutput(req, "")
    if req.structured is not None and req.structured.calls:
        got.calls = tool_stream.CallStream(req.structured.parallel)
    while True:
        event = await job.events.get()
        got.add(event)
        if isinstance(event, Failed):
            yield event
            return
        if isinstance(event, Finished):
            text = got.calls.flush() if got.calls is not None else ""
            called = got.calls is not None and got.calls.calls > 0
            yield Piece(text, tokens=event.completion_tokens, end=ending(got, job, tokenizer, called))
            return
        if isinstance(event, Delta):
            text, found = got.calls.feed(event.text) if got.calls is not None else (event.text, [])
            logprobs = bodies.chat_logprobs(event.logprobs) if req.logprobs is not None else []
            if text or found or logprobs:
                yield Piece(text, tuple(found), tuple(logprobs), got.tokens)


@dataclass(frozen=True)
class WholeAnswer:
    """A whole answer, read for tool calls as the chat path reads it."""

    content: str  # the text outside the calls
    calls: list[tool_calls.GeneratedCall]
    logprobs: list[dict[str, Any]]  # the chat format's, when asked
    end: Ending


def whole_answer(got: JobOutput, job: EngineJob, tokenizer: Tokenizer) -> WholeAnswer:
    content, calls = "".join(got.text), list[tool_calls.GeneratedCall]()
    if got.req.structured is not None:
        content, calls = tool_calls.read_answer(content, got.req.structured)
    return WholeAnswer(content, calls, got.chat_logprobs, ending(got, job, tokenizer, bool(calls)))


def ending(got: JobOutput, job: EngineJob, tokenizer: Tokenizer, called: bool) -> Ending:
    """``got`` finished; ``called``: the answer holds tool calls."""
    assert got.finished is not None
    finish = reported_finish(got.finished)
    if finish == "stop" and called:
        finish = "tool_calls"
    ids = [i for d in got.deltas for i in d.token_ids]
    stop = stop_sequence(got.req, "".join(got.text), ids, tokenizer) if finish == "stop" else None
    return Ending(finish, stop, finished_usage(job, got.finished))


def stop_sequence(req: ApiRequest, text: str, ids: list[int], tokenizer: Tokenizer) -> str | None:
    """Which of the request's stop sequences ended a generation that stopped on one (its text, cut
    before it, is ``text``); None when it ended on an end-of-turn token. The engine reports only that
    it stopped, so the generated tokens are decoded again to find the sequence after the text."""
    stops = req.params.stop
    if not stops or not ids or (ids[-1] in tokenizer.eos_ids and not req.params.ignore_eos):
        return None
    if len(stops) == 1:
        return stops[0]
    decoded = tokenizer.decode(ids)
    return next((s for s in stops if decoded.startswith(s, len(text))), None)
