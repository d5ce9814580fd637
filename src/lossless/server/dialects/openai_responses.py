"""OpenAI's Responses API (``POST /v1/responses``) over the chat path: a request -> the chat request
that asks the same (``parse``), a finished generation -> a Response object (``body``); its stream is
openai_responses_stream.py.

Translation: ``instructions`` is a system message before ``input``; ``input`` is a user message, or a
list of messages (text parts only), ``function_call`` items (an assistant turn's tool calls) and
``function_call_output`` items (tool turns); ``max_output_tokens`` is ``max_tokens``; function
``tools``, ``tool_choice`` and ``parallel_tool_calls`` are the chat ones; ``text.format`` is
``response_format``; ``include: ["message.output_text.logprobs"]`` with ``top_logprobs`` asks for
log-probabilities. ``temperature``, ``top_p``, ``seed`` and ``top_k`` (vLLM's extension) are the chat
ones. Policy, where the API leaves room:

- ``max_output_tokens`` may be below 16 (OpenAI's minimum): a benchmark asks for few tokens.
- ``previous_response_id`` and ``conversation`` are refused (400): this server stores no responses,
  so a request that leans on one would be answered without its history. ``store`` is ignored.
- Other fields (``n`` among them: the API has none; ``reasoning``, ``metadata``, ``truncation``, ...)
  are accepted and named in ``x-lossless-ignored-params``, as the chat path does with fields it does
  not honour. ``reasoning`` items in ``input`` are skipped: this server makes none.
- Usage is the chat path's: ``input_tokens`` is its prompt_tokens, ``output_tokens`` its
  completion_tokens, ``cached_tokens`` its prompt tokens found in the KV cache (``--max-batch``); no
  reasoning tokens.
- The Response repeats ``instructions``, ``tools``, ``tool_choice`` and ``text`` as they were sent, so a
  lone UTF-16 surrogate anywhere in them (a key too), which JSON can spell but no UTF-8 answer can hold,
  is a 400, as one in any text the tokenizer reads is on the chat path.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

from lossless.server.dialects import translate
from lossless.server.dialects.pieces import Ending, WholeAnswer
from lossless.server.dialects.translate import object_at, string_at
from lossless.server.openai.bodies import Head
from lossless.server.openai.protocol import ApiRequest, InvalidRequest

HONOURED = frozenset(
    {
        *("model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "top_k", "seed"),
        *("stream", "tools", "tool_choice", "parallel_tool_calls", "text", "include", "top_logprobs"),
    }
)
REFUSED = ("previous_response_id", "conversation")
LOGPROBS = "message.output_text.logprobs"  # the ``include`` value that asks for them
NAMES = {"max_tokens": "max_output_tokens", "messages": "input", "response_format": "text.format"}
_ROLES = {"user", "assistant", "system", "developer"}
_TEXT = frozenset({"input_text", "output_text"})


def parse(body: dict[str, Any], model: str, aliases: frozenset[str]) -> ApiRequest:
    for key in REFUSED:
        if body.get(key) is not None:
            raise InvalidRequest(
                f"{key} is not supported: this server stores no responses; send the whole conversation "
                "in input",
                param=key,
                code="unsupported_parameter",
            )
    chat = translate.copy(body, ("model", "temperature", "top_p", "top_k", "seed", "stream"))
    chat["messages"] = _messages(body)
    if body.get("max_output_tokens") is not None:
        chat["max_tokens"] = body["max_output_tokens"]
    chat.update(_tools(body))
    chat.update(_text_format(body.get("text")))
    if LOGPROBS in translate.items(body, "include", required=False):
        chat["logprobs"] = True
        chat.update(translate.copy(body, ("top_logprobs",)))
    req = translate.chat_request(chat, body, model=model, aliases=aliases, honoured=HONOURED, names=NAMES)
    echo = {
        "instructions": body.get("instructions"),
        "max_output_tokens": req.max_tokens,
        "parallel_tool_calls": chat.get("parallel_tool_calls", True),
        "temperature": req.params.temperature,
        "tool_choice": body.get("tool_choice") or ("auto" if chat.get("tools") else "none"),
        "tools": body.get("tools") or [],
        "top_p": req.params.top_p,
        "text": body.get("text") or {"format": {"type": "text"}},
    }
    for key in ("instructions", "tool_choice", "tools", "text"):  # as sent: parts no other check reads
        _echoable(echo[key], key)
    return replace(req, dialect=echo)


def _echoable(value: Any, param: str) -> None:
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequest(f"{param} is not valid Unicode: it holds a lone surrogate", param=param) from exc


def _messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if body.get("instructions") is not None:
        if not isinstance(body["instructions"], str):
            raise InvalidRequest("instructions must be a string", param="instructions")
        out.append({"role": "system", "content": body["instructions"]})
    given = body.get("input")
    if isinstance(given, str):
        return [*out, {"role": "user", "content": given}]
    for i, item in enumerate(translate.items(body, "input", required=True)):
        param = f"input[{i}]"
        item = object_at(item, param)
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if not isinstance(role, str) or role not in _ROLES:
                raise InvalidRequest(f"{param}.role must be one of {', '.join(sorted(_ROLES))}", param=param)
            out.append({"role": role, "content": translate.text_parts(item.get("content"), param, _TEXT)})
        elif kind == "function_call":
            name, arguments = string_at(item, "name", param), string_at(item, "arguments", param)
            function = {"name": name, "arguments": arguments}
            call = {"id": string_at(item, "call_id", param), "type": "function", "function": function}
            if out and out[-1]["role"] == "assistant":  # a turn's calls, after its text if it had any
                out[-1]["tool_calls"] = [*out[-1].get("tool_calls", []), call]
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            string_at(item, "call_id", param)
            output = translate.text_parts(item.get("output"), f"{param}.output", _TEXT)
            out.append({"role": "tool", "tool_call_id": item["call_id"], "content": output})
        elif kind != "reasoning":
            raise InvalidRequest(f"{param}.type {str(kind)[:40]!r} is not supported", param=f"{param}.type")
    return out


def _tools(body: dict[str, Any]) -> dict[str, Any]:
    """tools (flat function tools -> the chat API's nested ones), tool_choice, parallel_tool_calls."""
    out = translate.copy(body, ("parallel_tool_calls",))
    tools = []
    for i, tool in enumerate(translate.items(body, "tools", required=False)):
        tool = object_at(tool, f"tools[{i}]")
        if tool.get("type") != "function":
            raise InvalidRequest(f"tools[{i}]: only function tools are supported", param="tools")
        function = {"name": tool.get("name")}
        function.update(translate.copy(tool, ("description", "parameters")))
        tools.append({"type": "function", "function": function})
    if tools:
        out["tools"] = tools
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "function":
        out["tool_choice"] = {"type": "function", "function": {"name": choice.get("name")}}
    elif choice is not None and not isinstance(choice, str):
        raise InvalidRequest(
            'tool_choice must be "auto", "none", "required" or {"type": "function", "name": ...}',
            param="tool_choice",
        )
    elif choice is not None:
        out["tool_choice"] = choice
    return out


def _text_format(text: Any) -> dict[str, Any]:
    """``text.format`` (flat) -> the chat API's ``response_format`` (its schema nested in json_schema)."""
    if text is None:
        return {}
    form = object_at(text, "text").get("format")
    if form is None:
        return {}
    form = object_at(form, "text.format")
    if form.get("type") != "json_schema":
        return {"response_format": form}
    spec = translate.copy(form, ("name", "schema", "strict"))
    return {"response_format": {"type": "json_schema", "json_schema": spec}}


# --- the Response object ----------------------------------------------------------------------------


def new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex


def response(req: ApiRequest, head: Head, output: list[dict[str, Any]], end: Ending | None) -> dict[str, Any]:
    """The Response object: in progress while ``end`` is None, else completed or incomplete."""
    status = "in_progress" if end is None else "incomplete" if end.finish == "length" else "completed"
    return {
        "id": head.id,
        "object": "response",
        "created_at": head.created,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if status == "incomplete" else None,
        **req.dialect,
        "model": head.model,
        "output": output,
        "usage": None if end is None else usage(end),
        "system_fingerprint": head.fingerprint,  # not in the API: the chat API's, for the same purpose
    }


def usage(end: Ending) -> dict[str, Any]:
    u = end.usage
    return {
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens, "cache_write_tokens": 0},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    }


def message_item(item_id: str, text: str, logprobs: list[dict[str, Any]], status: str) -> dict[str, Any]:
    part = {"type": "output_text", "text": text, "annotations": [], "logprobs": logprobs}
    return {"id": item_id, "type": "message", "status": status, "role": "assistant", "content": [part]}


def call_item(item_id: str, call_id: str, name: str, arguments: str, status: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "function_call",
        "status": status,
        "call_id": call_id,
        "name": name,
        "arguments": arguments,
    }


def body(req: ApiRequest, head: Head, answer: WholeAnswer) -> dict[str, Any]:
    """A whole answer: a message (unless it only called tools), then a function_call item per call."""
    status = "incomplete" if answer.end.finish == "length" else "completed"
    output = []
    if answer.content or not answer.calls:
        logprobs = answer.logprobs if req.logprobs is not None else []
        output.append(message_item(new_id("msg_"), answer.content, logprobs, status))
    output += [call_item(new_id("fc_"), c.id, c.name, c.arguments, "completed") for c in answer.calls]
    return response(req, head, output, answer.end)
