"""One answer as it arrives: the one accumulator every call folds its events into.

bench's call (a timing record), an agent's turn (tool calls whole) and probe's and verify's replies
(every choice, its log-probabilities) read answers alike: each SSE event, or the one body of an answer
that was not streamed, goes through ``Answer.add``, which decodes it with ``openai.Chunk`` and keeps

    per event     the time its network read returned, its kind (content, reasoning, tool call, usage,
                  empty: ``records.CONTENT`` ...) and the server's running completion_tokens
    per choice    by ``index``: text, reasoning, finish_reason, logprobs
    of the first  tool calls assembled from their deltas (by their own ``index``)
    of the whole  usage, the model and system_fingerprint the server named, whether [DONE] came

So a cut stream, an error event or a malformed chunk means the same to every command: ``read`` raises
``StreamError`` or ``MalformedStream``; a reader that would rather keep going (probe, verify: one bad
event is evidence, not the end) passes ``lenient`` and finds the first problem in ``problem``.
"""

from __future__ import annotations

import asyncio
import json
import math
from dataclasses import dataclass
from typing import Any

from lossless.client.native import reader
from lossless.client.openai import Chunk
from lossless.records import TOKEN_KINDS

MAX_ERROR_CHARS = 300


class MalformedStream(ValueError):
    """An event or body that is not an answer of the API asked (not JSON, a field of the wrong type)."""


class StreamError(Exception):
    """The server sent an error event in the middle of a stream."""


@dataclass(frozen=True)
class ToolCall:
    id: str
    name: str
    arguments: str  # as the server sent it: JSON text, valid or not

    def as_message(self) -> dict[str, Any]:
        """The item of an assistant message's ``tool_calls``."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": self.arguments},
        }


class Answer:
    """What has arrived of one answer so far."""

    def __init__(
        self, api: str | None, first_token: asyncio.Event | None = None, *, lenient: bool = False
    ) -> None:
        # "chat" or "completions"; None: told by each choice's shape (a "text" field); "responses" or
        # "messages": each event is first turned into a chat chunk by ``native``'s reader
        self.native = reader(api)
        self.api = "chat" if self.native is not None else api
        self.on_first_token = first_token  # set when the first token arrives (bench --failover-after)
        self.lenient = lenient
        self.event_ns: list[int] = []
        self.kinds: list[str] = []
        self.tokens: list[int] = []  # cumulative completion_tokens per event when the server says, else -1
        self.texts: dict[int, list[str]] = {}
        self.reasonings: dict[int, list[str]] = {}
        self.finishes: dict[int, str | None] = {}
        self.logprobs: dict[int, list[Any]] = {}
        self.calls: dict[
            int, dict[str, str]
        ] = {}  # the first choice's tool calls: index -> id, name, arguments
        self.tool_chars = 0  # characters of tool-call names and arguments
        self.usage: dict[str, Any] | None = None
        self.model: str | None = None  # the first the answer names
        self.fingerprint: str | None = None
        self.timings: dict[str, float] = {}  # the answer's own timing object (llama.cpp's "timings")
        self.events = 0  # events with a JSON object (error events too)
        self.problem: str | None = None  # lenient: the first malformed or error event
        self.done = False  # [DONE] came
        self.first_token = False
        self.end_ns: int | None = None  # when the answer's last read returned

    # --- reading ---------------------------------------------------------------------------------

    def read(self, t: int, payloads: list[bytes]) -> bool:
        """Fold in the events one network read completed (``sse.read_events``' callback); True once
        [DONE] came, and what follows it is not read."""
        for payload in payloads:
            if payload == b"[DONE]":
                self.done = True
                return True
            try:
                self.event(payload, t)
            except (MalformedStream, StreamError) as exc:
                if not self.lenient:
                    raise
                self.problem = self.problem or str(exc)
            if self.native is not None and self.native.done:  # the API's own last event
                self.done = True
                return True
        return self.done

    def event(self, payload: bytes, t: int) -> None:
        try:
            obj = json.loads(payload)
        except (ValueError, RecursionError) as exc:
            raise MalformedStream(f"event is not JSON: {payload[:80]!r}") from exc
        if not isinstance(obj, dict):
            raise MalformedStream(f"event is not a JSON object: {payload[:80]!r}")
        self.events += 1
        if self.native is not None:
            obj = self._native(obj, payload, stream=True)
        if "error" in obj:
            if self.lenient and isinstance(obj.get("choices"), list):  # fold what it carries too
                self._add_or_raise(obj, t, stream=True, payload=payload)
            raise StreamError(f"error event: {json.dumps(obj['error'])[:MAX_ERROR_CHARS]}")
        self._add_or_raise(obj, t, stream=True, payload=payload)

    def whole(self, body: bytes, t: int) -> None:
        """A non-streamed answer: its one body, read at ``t`` (its first byte is its last)."""
        try:
            obj = json.loads(body)
        except (ValueError, RecursionError) as exc:
            raise MalformedStream(f"response is not a completion object ({exc}): {body[:80]!r}") from exc
        try:
            self.fold(obj, t, body)
        except ValueError as exc:
            raise MalformedStream(f"response is not a completion object ({exc}): {body[:80]!r}") from exc
        self.done = True
        self.end_ns = t

    def fold(self, obj: Any, t: int, raw: bytes) -> None:
        """A whole answer, ``raw`` decoded from JSON into ``obj``, in this answer's API (a chat chunk first
        where the API is Responses or Messages); a shape no API sends raises ValueError (MalformedStream)."""
        if self.native is not None and isinstance(obj, dict):
            obj = self._native(obj, raw, stream=False)
        self.add(obj, t, stream=False)

    def _native(self, obj: dict[str, Any], payload: bytes, stream: bool) -> dict[str, Any]:
        assert self.native is not None
        try:
            return self.native.chunk(obj, stream)
        except (ValueError, TypeError, AttributeError) as exc:  # a field of a shape the API never sends
            raise MalformedStream(f"unexpected event shape ({exc}): {payload[:80]!r}") from exc

    def _add_or_raise(self, obj: dict[str, Any], t: int, stream: bool, payload: bytes) -> None:
        try:
            self.add(obj, t, stream)
        except ValueError as exc:
            raise MalformedStream(f"unexpected chunk shape ({exc}): {payload[:80]!r}") from exc

    def add(self, obj: Any, t: int, stream: bool) -> None:
        """One decoded event (or whole body); a field of the wrong type raises ValueError."""
        choices = obj.get("choices") if isinstance(obj, dict) else None
        first = choices[0] if isinstance(choices, list) and choices else None
        chunk = Chunk(obj, self.api or _api_of(first), stream)  # checks the shape of the first choice
        self.event_ns.append(t)
        self.kinds.append(chunk.kind)
        self.tokens.append(chunk.completion_tokens if chunk.completion_tokens is not None else -1)
        if chunk.usage is not None:
            self.usage = chunk.usage
        self.model = self.model or chunk.model
        self.fingerprint = self.fingerprint or chunk.fingerprint
        self.timings = _timings(obj) or self.timings
        self.tool_chars += chunk.tool_chars
        if first is not None:
            self._choice(_index(first), chunk.content, chunk.reasoning, chunk.finish_reason, first)
            message = first.get("delta" if stream else "message")
            if isinstance(message, dict) and message.get("tool_calls"):  # Chunk checked it is a list
                self._fold_calls(message["tool_calls"])
            for raw in choices[1:]:  # type: ignore[index]  # several choices in one event: n > 1, whole
                more = Chunk({"choices": [raw]}, self.api or _api_of(raw), stream)
                self._choice(_index(raw), more.content, more.reasoning, more.finish_reason, raw)
        if chunk.kind in TOKEN_KINDS and not self.first_token:
            self.first_token = True
            if self.on_first_token is not None:
                self.on_first_token.set()

    def _choice(self, i: int, text: str, reasoning: str, finish: str | None, raw: dict[str, Any]) -> None:
        self.texts.setdefault(i, []).append(text)
        self.reasonings.setdefault(i, []).append(reasoning)
        if finish is not None or i not in self.finishes:
            self.finishes[i] = finish
        if raw.get("logprobs") is not None:
            self.logprobs.setdefault(i, []).append(raw["logprobs"])

    def _fold_calls(self, items: list[Any]) -> None:
        for position, item in enumerate(items):
            if not isinstance(item, dict):
                raise ValueError("a tool_calls item is not an object")
            index = item.get("index", position)
            if not isinstance(index, int):
                raise ValueError("a tool call's index is not an integer")
            call = self.calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
            call["id"] = call["id"] or str(item.get("id") or "")
            fn = item.get("function") or {}
            if not isinstance(fn, dict):
                raise ValueError("a tool call's function is not an object")
            call["name"] += fn.get("name") or ""
            call["arguments"] += fn.get("arguments") or ""

    # --- what came ---------------------------------------------------------------------------------

    @property
    def indices(self) -> list[int]:
        return sorted(self.texts)

    def text(self, i: int | None = None) -> str:
        """Choice ``i``'s answer text (default: the first choice's)."""
        return "".join(self.texts.get(self._first() if i is None else i, ()))

    def reasoning(self, i: int | None = None) -> str:
        return "".join(self.reasonings.get(self._first() if i is None else i, ()))

    def finish_reason(self, i: int | None = None) -> str | None:
        return self.finishes.get(self._first() if i is None else i)

    def finished(self) -> bool:
        """[DONE] came, or a choice said why it stopped: the answer was not cut short."""
        return self.done or any(f is not None for f in self.finishes.values())

    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(
            ToolCall(c["id"] or f"call_{i}", c["name"], c["arguments"]) for i, c in sorted(self.calls.items())
        )

    def _first(self) -> int:
        return min(self.texts) if self.texts else 0


def _index(choice: Any) -> int:
    index = choice.get("index", 0) if isinstance(choice, dict) else 0
    if isinstance(index, int) and not isinstance(index, bool):
        return index
    try:
        return int(index)
    except (TypeError, ValueError):
        raise ValueError(f"a choice's index is {index!r}, not an integer") from None


def _api_of(choice: Any) -> str:
    """A choice's API, told by its shape: a legacy completion's choice carries ``text``."""
    return "completions" if isinstance(choice, dict) and "text" in choice else "chat"


def _timings(obj: dict[str, Any]) -> dict[str, float]:
    """The numbers of a body's "timings" object (llama.cpp's server: its own prompt and decode time, in
    the last chunk of a stream), or none."""
    raw = obj.get("timings")
    if not isinstance(raw, dict):
        return {}
    return {
        str(k): float(v)
        for k, v in raw.items()
        if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)
    }
