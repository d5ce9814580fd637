"""A Messages API stream (``POST /v1/messages`` with ``stream: true``): pieces (``pieces.py``) -> the API's
``event: <type>`` / ``data: {...}`` pairs, as Anthropic sends them:

    message_start (the Message with no content yet, its usage the input tokens),
    per block:  content_block_start (text, or a tool_use with empty input), ping after the first,
                content_block_delta (text_delta, or input_json_delta with partial_json as the call's
                arguments are generated), content_block_stop
    message_delta (stop_reason, stop_sequence, usage.output_tokens), message_stop

A generation that fails ends with an ``error`` event in the API's error shape.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from lossless.server.dialects.anthropic_messages import STOP_REASONS, error_body, message, tool_use_id
from lossless.server.dialects.pieces import Ending, Piece
from lossless.server.jobs import Failed
from lossless.server.openai.bodies import Head
from lossless.server.openai.protocol import ApiRequest


def event(kind: str, data: dict[str, Any]) -> bytes:
    text = json.dumps({"type": kind, **data}, ensure_ascii=False, separators=(",", ":"))
    return f"event: {kind}\ndata: {text}\n\n".encode()


class _Writer:
    """The content blocks so far; every method returns the events to send."""

    def __init__(self) -> None:
        self.blocks = 0  # blocks started so far
        self.open: str | None = None  # the open block's type: text or tool_use
        self.pinged = False

    def start(self, block: dict[str, Any]) -> list[bytes]:
        out = self.stop()
        out.append(event("content_block_start", {"index": self.blocks, "content_block": block}))
        self.open, self.blocks = block["type"], self.blocks + 1
        if not self.pinged:
            out.append(event("ping", {}))
            self.pinged = True
        return out

    def delta(self, delta: dict[str, Any]) -> bytes:
        return event("content_block_delta", {"index": self.blocks - 1, "delta": delta})

    def stop(self) -> list[bytes]:
        if self.open is None:
            return []
        self.open = None
        return [event("content_block_stop", {"index": self.blocks - 1})]

    def text(self, text: str) -> list[bytes]:
        out = [] if self.open == "text" else self.start({"type": "text", "text": ""})
        return [*out, self.delta({"type": "text_delta", "text": text})]

    def call(self, delta: dict[str, Any]) -> list[bytes]:
        function = delta.get("function", {})
        out = []
        if "id" in delta:  # a call begins
            block = {"type": "tool_use", "id": tool_use_id(delta["id"]), "name": function["name"]}
            out += self.start({**block, "input": {}})
        if function.get("arguments") and self.open == "tool_use":
            out.append(self.delta({"type": "input_json_delta", "partial_json": function["arguments"]}))
        return out

    def finish(self, end: Ending) -> list[bytes]:
        out = self.stop()
        if not self.pinged:
            out.append(event("ping", {}))
        reason = "stop_sequence" if end.stop_sequence is not None else STOP_REASONS[end.finish]
        delta = {"stop_reason": reason, "stop_sequence": end.stop_sequence}
        usage = {"output_tokens": end.usage.completion_tokens}
        out.append(event("message_delta", {"delta": delta, "usage": usage}))
        return [*out, event("message_stop", {})]


async def events(
    req: ApiRequest, head: Head, prompt_tokens: int, pieces: AsyncIterator[Piece | Failed]
) -> AsyncIterator[bytes]:
    writer = _Writer()
    yield event("message_start", {"message": message(head, [], None, prompt_tokens)})
    async for piece in pieces:
        if isinstance(piece, Failed):
            yield event("error", error_body(piece.status, piece.message))
            return
        sent = writer.text(piece.text) if piece.text else []
        for delta in piece.calls:
            sent += writer.call(delta)
        if piece.end is not None:
            sent += writer.finish(piece.end)
        for one in sent:
            yield one
