"""Anthropic's Messages API (``POST /v1/messages``) over the chat path: a request -> the chat request
that asks the same (``parse``), a finished generation -> a Message (``body``), a refusal -> the API's
error body (``error_response``); its stream is anthropic_messages_stream.py.

Translation: ``system`` (a string or text blocks) is a system message; a ``user`` turn's
``tool_result`` blocks are tool turns (before its text, if it has any), an ``assistant`` turn's
``tool_use`` blocks are its tool calls; ``max_tokens``, ``temperature``, ``top_p``, ``top_k`` and
``stream`` are the chat ones, ``stop_sequences`` is ``stop``; ``tools`` (``name``, ``description``,
``input_schema``) are function tools and ``tool_choice`` auto / any / tool / none is the chat API's
auto / required / a named function / none (``disable_parallel_tool_use`` is
``parallel_tool_calls: false``). Policy, where the API leaves room:

- ``max_tokens`` is required, as in the API (400 when missing); ``temperature`` is in [0, 1].
- ``stop_reason``: ``end_turn`` (an end-of-turn token), ``stop_sequence`` (with the sequence),
  ``max_tokens``, ``tool_use`` (the answer holds calls). A ``tool_use`` block's ``id`` is the chat
  call's id with Anthropic's ``toolu_`` prefix.
- ``anthropic-version`` and ``x-api-key`` headers are accepted and their values not read: this server
  checks no key on any route. Other fields (``metadata``, ``thinking``, ``service_tier``, ...) are
  accepted and named in ``x-lossless-ignored-params``, as the chat path does; ``thinking`` blocks in
  the history are skipped. Images and documents are refused (400): the model reads text only.
- Usage is the chat path's: ``input_tokens`` its prompt_tokens, ``output_tokens`` its
  completion_tokens; both cache counts 0 (`--max-batch`'s prefix cache is said in the chat APIs' usage only).
"""

from __future__ import annotations

import json
from typing import Any

from starlette.responses import JSONResponse

from lossless.server.dialects import translate
from lossless.server.dialects.pieces import Ending, WholeAnswer
from lossless.server.dialects.translate import object_at, string_at
from lossless.server.openai.bodies import Head
from lossless.server.openai.protocol import ApiRequest, InvalidRequest

HONOURED = frozenset(
    {
        *("model", "messages", "system", "max_tokens", "temperature", "top_p", "top_k"),
        *("stop_sequences", "stream", "tools", "tool_choice"),
    }
)
NAMES = {"stop": "stop_sequences"}
# the API's error types by HTTP status; anything else >= 500 is an api_error
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    413: "request_too_large",
    429: "rate_limit_error",
    503: "overloaded_error",
}
_TEXT = frozenset({"text"})
STOP_REASONS = {"stop": "end_turn", "length": "max_tokens", "tool_calls": "tool_use"}


def error_body(status: int, message: str) -> dict[str, Any]:
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return {"type": "error", "error": {"type": kind, "message": message}}


def error_response(status: int, message: str, headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse(error_body(status, message), status_code=status, headers=headers)


def parse(body: dict[str, Any], model: str, aliases: frozenset[str]) -> ApiRequest:
    if body.get("max_tokens") is None:
        raise InvalidRequest("max_tokens: Field required", param="max_tokens")
    temperature = body.get("temperature")
    if isinstance(temperature, int | float) and not 0 <= temperature <= 1:
        raise InvalidRequest(f"temperature must be in [0, 1], got {temperature!r}"[:80], param="temperature")
    chat = translate.copy(body, ("model", "max_tokens", "temperature", "top_p", "top_k", "stream"))
    chat["messages"] = _system(body) + _messages(body)
    if body.get("stop_sequences") is not None:
        chat["stop"] = translate.items(body, "stop_sequences", required=False)
    chat.update(_tools(body))
    return translate.chat_request(chat, body, model=model, aliases=aliases, honoured=HONOURED, names=NAMES)


def _system(body: dict[str, Any]) -> list[dict[str, Any]]:
    if body.get("system") is None:
        return []
    return [{"role": "system", "content": translate.text_parts(body["system"], "system", _TEXT)}]


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, message in enumerate(translate.items(body, "messages", required=True)):
        param = f"messages[{i}]"
        role = object_at(message, param).get("role")
        if role not in ("user", "assistant"):
            raise InvalidRequest(f'{param}.role must be "user" or "assistant"', param=f"{param}.role")
        content = message.get("content")
        if isinstance(content, str):
            out.append({"role": role, "content": content})
            continue
        texts, calls = [], []
        for j, block in enumerate(translate.items(message, "content", required=True)):
            where = f"{param}.content[{j}]"
            kind = object_at(block, where).get("type")
            if kind == "text":
                texts.append(string_at(block, "text", where))
            elif kind == "tool_use" and role == "assistant":
                arguments = json.dumps(object_at(block.get("input"), f"{where}.input"), ensure_ascii=False)
                function = {"name": string_at(block, "name", where), "arguments": arguments}
                calls.append({"id": string_at(block, "id", where), "type": "function", "function": function})
            elif kind == "tool_result" and role == "user":
                result = block.get("content", "")
                text = translate.text_parts(result, f"{where}.content", _TEXT)
                call_id = string_at(block, "tool_use_id", where)
                out.append({"role": "tool", "tool_call_id": call_id, "content": text})
            elif kind not in ("thinking", "redacted_thinking"):
                what = f"{role} turn" if kind in ("tool_use", "tool_result") else "this server"
                message = f"{where}: {str(kind)[:40]!r} blocks are not supported in {what}"
                raise InvalidRequest(message, param=where)
        if texts or calls or role == "assistant":
            turn: dict[str, Any] = {"role": role, "content": "".join(texts)}
            out.append(turn | ({"tool_calls": calls} if calls else {}))
    return out


def _tools(body: dict[str, Any]) -> dict[str, Any]:
    """tools -> the chat API's function tools; tool_choice -> the chat API's, with parallel_tool_calls."""
    tools = []
    for i, tool in enumerate(translate.items(body, "tools", required=False)):
        tool = object_at(tool, f"tools[{i}]")
        if tool.get("type") not in (None, "custom"):
            raise InvalidRequest(f"tools[{i}]: only custom (client) tools are supported", param="tools")
        schema = object_at(tool.get("input_schema"), f"tools[{i}].input_schema")
        function = {"name": tool.get("name"), "parameters": schema}
        function.update(translate.copy(tool, ("description",)))
        tools.append({"type": "function", "function": function})
    out: dict[str, Any] = {"tools": tools} if tools else {}
    if body.get("tool_choice") is None:
        return out
    choice = object_at(body["tool_choice"], "tool_choice")
    kind = choice.get("type")
    if kind == "tool":
        out["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
    elif kind in ("auto", "any", "none"):
        out["tool_choice"] = {"auto": "auto", "any": "required", "none": "none"}[kind]
    else:
        raise InvalidRequest('tool_choice.type must be "auto", "any", "tool" or "none"', param="tool_choice")
    if choice.get("disable_parallel_tool_use") is True:
        out["parallel_tool_calls"] = False
    return out


# --- the Message ------------------------------------------------------------------------------------


def tool_use_id(call_id: str) -> str:
    return "toolu_" + call_id.removeprefix("call_")


def message(
    head: Head, content: list[dict[str, Any]], end: Ending | None, input_tokens: int
) -> dict[str, Any]:
    """A Message: as ``message_start`` sends it while ``end`` is None, else whole."""
    reason = None if end is None else STOP_REASONS[end.finish]
    if end is not None and end.stop_sequence is not None:
        reason = "stop_sequence"
    return {
        "id": head.id,
        "type": "message",
        "role": "assistant",
        "model": head.model,
        "content": content,
        "stop_reason": reason,
        "stop_sequence": None if end is None else end.stop_sequence,
        "usage": {
            "input_tokens": input_tokens,
            # the batch's prefix cache is not reported here: input_tokens counts every prompt token, as the
            # stream's message_start must before anything is known (the chat APIs' usage says it)
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 0 if end is None else end.usage.completion_tokens,
        },
        "system_fingerprint": head.fingerprint,  # not in the API: the chat API's, for the same purpose
    }


def body(req: ApiRequest, head: Head, answer: WholeAnswer) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": answer.content}] if answer.content else []
    for call in answer.calls:
        block = {"type": "tool_use", "id": tool_use_id(call.id), "name": call.name}
        content.append({**block, "input": json.loads(call.arguments)})
    return message(head, content, answer.end, answer.end.usage.prompt_tokens)
