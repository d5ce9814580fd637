"""A Responses API stream (``POST /v1/responses`` with ``stream: true``): pieces (``pieces.py``) -> the
API's server-sent events, each an ``event:`` line naming its type and a ``data:`` object holding
``type`` and ``sequence_number``, as OpenAI sends them:

    response.created, response.in_progress,
    per message:  response.output_item.added, response.content_part.added,
                  response.output_text.delta (one per piece of text), response.output_text.done,
                  response.content_part.done, response.output_item.done
    per call:     response.output_item.added (a function_call), response.function_call_arguments.delta
                  (as the arguments are generated), response.function_call_arguments.done,
                  response.output_item.done
    then response.completed (or response.incomplete, cut by max_output_tokens) with the whole
    Response and its usage; a generation that fails ends with response.failed. No ``[DONE]``.

A call's arguments are the generated text itself, as in a chat stream (``openai/tool_stream.py``), so
the final Response holds them as streamed; the answer without a stream holds ``json.dumps`` of the same
value.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from lossless.server.dialects.openai_responses import call_item, message_item, new_id, response
from lossless.server.dialects.pieces import Ending, Piece
from lossless.server.jobs import Failed
from lossless.server.openai.bodies import Head
from lossless.server.openai.protocol import ApiRequest


def event(kind: str, sequence: int, fields: dict[str, Any]) -> bytes:
    body = {"type": kind, "sequence_number": sequence, **fields}
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    return f"event: {kind}\ndata: {data}\n\n".encode()


class _Writer:
    """The items written so far and the one open now; every method returns the events to send."""

    def __init__(self, req: ApiRequest, head: Head) -> None:
        self.req, self.head = req, head
        self.sequence = 0
        self.output: list[dict[str, Any]] = []  # items, the open one last
        self.open: dict[str, Any] | None = None  # the item being written
        self.text: list[str] = []  # the open message's text
        self.logprobs: list[dict[str, Any]] = []  # and its log-probabilities
        self.waiting: list[dict[str, Any]] = []  # those of text held back: they go with the next delta
        self.arguments: list[str] = []  # the open call's arguments

    def send(self, kind: str, **fields: Any) -> bytes:
        self.sequence += 1
        return event(kind, self.sequence - 1, fields)

    def where(self) -> dict[str, Any]:
        assert self.open is not None
        return {"item_id": self.open["id"], "output_index": len(self.output) - 1}

    def in_text(self, kind: str, **fields: Any) -> bytes:
        """An event about the open message's only part."""
        return self.send(kind, **self.where(), content_index=0, **fields)

    def start(self, item: dict[str, Any]) -> list[bytes]:
        out = self.close("completed")
        self.open = item
        self.output.append(item)
        out.append(self.send("response.output_item.added", output_index=len(self.output) - 1, item=item))
        return out

    def text_piece(self, text: str, logprobs: list[dict[str, Any]]) -> list[bytes]:
        out = []
        if self.open is None or self.open["type"] != "message":
            out += self.start(message_item(new_id("msg_"), "", [], "in_progress") | {"content": []})
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            out.append(self.in_text("response.content_part.added", part=part))
        self.text.append(text)
        self.logprobs += logprobs
        self.waiting += logprobs
        if text:
            out.append(self.in_text("response.output_text.delta", delta=text, logprobs=self.waiting))
            self.waiting = []
        return out

    def call_piece(self, delta: dict[str, Any]) -> list[bytes]:
        out = []
        function = delta.get("function", {})
        if "id" in delta:  # a call begins
            out += self.start(call_item(new_id("fc_"), delta["id"], function["name"], "", "in_progress"))
        arguments = function.get("arguments", "")
        if arguments and self.open is not None and self.open["type"] == "function_call":
            self.arguments.append(arguments)
            out.append(self.send("response.function_call_arguments.delta", **self.where(), delta=arguments))
        return out

    def close(self, status: str) -> list[bytes]:
        """Ends the open item, if any, with ``status``."""
        item, out = self.open, list[bytes]()
        if item is None:
            return out
        where = self.where()
        if item["type"] == "message":
            text = "".join(self.text)
            done = message_item(item["id"], text, self.logprobs, status)
            out.append(self.in_text("response.output_text.done", text=text, logprobs=self.logprobs))
            out.append(self.in_text("response.content_part.done", part=done["content"][0]))
        else:
            arguments = "".join(self.arguments)
            done = call_item(item["id"], item["call_id"], item["name"], arguments, "completed")
            out.append(self.send("response.function_call_arguments.done", **where, arguments=arguments))
        self.output[-1] = done
        out.append(self.send("response.output_item.done", output_index=where["output_index"], item=done))
        self.open, self.text, self.logprobs, self.waiting, self.arguments = None, [], [], [], []
        return out

    def finish(self, end: Ending) -> list[bytes]:
        out = [] if self.output else self.text_piece("", [])  # an empty answer is an empty message
        out += self.close("incomplete" if end.finish == "length" else "completed")
        done = response(self.req, self.head, self.output, end)
        kind = "response.incomplete" if done["status"] == "incomplete" else "response.completed"
        return [*out, self.send(kind, response=done)]

    def fail(self, failed: Failed) -> bytes:
        body = response(self.req, self.head, self.output, None)
        error = {"code": "server_error", "message": failed.message}
        return self.send("response.failed", response={**body, "status": "failed", "error": error})


async def events(
    req: ApiRequest, head: Head, prompt_tokens: int, pieces: AsyncIterator[Piece | Failed]
) -> AsyncIterator[bytes]:
    """``prompt_tokens`` is unused: a Response carries its usage only once it is done."""
    writer = _Writer(req, head)
    started = response(req, head, [], None)
    yield writer.send("response.created", response=started)
    yield writer.send("response.in_progress", response=started)
    async for piece in pieces:
        if isinstance(piece, Failed):
            yield writer.fail(piece)
            return
        sent = writer.text_piece(piece.text, list(piece.logprobs)) if piece.text or piece.logprobs else []
        for delta in piece.calls:
            sent += writer.call_piece(delta)
        if piece.end is not None:
            sent += writer.finish(piece.end)
        for one in sent:
            yield one
