"""The four APIs an endpoint may speak, and how a request in our one shape becomes each API's own.

Every command builds its requests as a Chat Completions body (messages, tools, max_tokens, sampling) or,
for the legacy API, a Completions body (prompt). ``native_body`` rewrites a chat body for the Responses
API (``/responses``) or Anthropic's Messages API (``/messages``): each field where that API has one of its
own (``max_output_tokens``, ``system``, ``stop_sequences``, tools and tool results as the API's items or
blocks); a field it has no name for goes through as asked, so the server says whether it takes it (probe
reads that answer). Their answers come back through ``native.py``. The key travels as each API's clients
send it: ``Authorization: Bearer`` for OpenAI's, ``x-api-key`` with ``anthropic-version`` for Messages.
"""

from __future__ import annotations

import json
from typing import Any

from lossless.client.api_names import NATIVE, PATHS
from lossless.client.endpoints import Endpoint, api_key
from lossless.client.http import Session

ANTHROPIC_VERSION = "2023-06-01"  # the Messages API's one stable version header
MESSAGES_MAX_TOKENS = 4096  # Messages requires max_tokens: what a chat body that names none gets


def session(endpoint: Endpoint, api: str, connect_timeout: float) -> Session:
    """The endpoint's session, its key in the header ``api``'s clients use; the endpoint's own headers win."""
    headers = dict(endpoint.headers)
    if api == "messages":
        headers = {"anthropic-version": ANTHROPIC_VERSION, **headers}
        return Session(endpoint.base_url, headers, api_key(endpoint), connect_timeout, key_header="x-api-key")
    return Session(endpoint.base_url, headers, api_key(endpoint), connect_timeout)


def path_of(api: str, path: str) -> str:
    """Where a request a command addressed to ``path`` goes when the run speaks ``api``."""
    return PATHS[api] if api in NATIVE and path == PATHS["chat"] else path


def native_body(api: str, body: dict[str, Any]) -> dict[str, Any]:
    """A chat body in ``api``'s own words (a body for chat or completions, or one with no messages, as is)."""
    if api not in NATIVE or "messages" not in body:
        return body
    return _responses(body) if api == "responses" else _messages(body)


# --- OpenAI Responses -------------------------------------------------------------------------------------


def _responses(body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in body.items():
        if key == "messages":
            out["input"] = [item for m in value for item in _response_items(m)]
        elif key in ("max_tokens", "max_completion_tokens"):
            out["max_output_tokens"] = value
        elif key == "tools":
            out["tools"] = [_response_tool(t) for t in value]
        elif key == "tool_choice" and isinstance(value, dict):
            out["tool_choice"] = {"type": "function", "name": _function(value).get("name")}
        elif key == "response_format" and isinstance(value, dict):
            out["text"] = {"format": _response_format(value)}
        elif key == "logprobs":
            if value:
                out["include"] = ["message.output_text.logprobs"]
        elif key == "stream_options":
            continue  # usage always ends a Responses stream (response.completed)
        else:
            out[key] = value
    return out


def _response_items(message: dict[str, Any]) -> list[dict[str, Any]]:
    role, content = message.get("role"), message.get("content")
    if role == "tool":
        output = content if isinstance(content, str) else json.dumps(content)
        return [{"type": "function_call_output", "call_id": message.get("tool_call_id"), "output": output}]
    items: list[dict[str, Any]] = []
    if content or not message.get("tool_calls"):
        items.append({"role": role, "content": content if content is not None else ""})
    for call in message.get("tool_calls") or ():
        fn = _function(call)
        items.append(
            {
                "type": "function_call",
                "call_id": call.get("id"),
                "name": fn.get("name"),
                "arguments": fn.get("arguments", ""),
            }
        )
    return items


def _response_tool(tool: dict[str, Any]) -> dict[str, Any]:
    fn = _function(tool)
    return {
        "type": "function",
        **{k: v for k, v in fn.items() if k in ("name", "description", "parameters", "strict")},
    }


def _response_format(fmt: dict[str, Any]) -> dict[str, Any]:
    if fmt.get("type") == "json_schema" and isinstance(fmt.get("json_schema"), dict):
        return {"type": "json_schema", **fmt["json_schema"]}
    return fmt


# --- Anthropic Messages -----------------------------------------------------------------------------------


def _messages(body: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"max_tokens": MESSAGES_MAX_TOKENS}
    for key, value in body.items():
        if key == "messages":
            system = [m.get("content") for m in value if m.get("role") in ("system", "developer")]
            if system:
                out["system"] = "\n\n".join(str(s) for s in system)
            out["messages"] = _anthropic_turns(
                [m for m in value if m.get("role") not in ("system", "developer")]
            )
        elif key in ("max_tokens", "max_completion_tokens"):
            out["max_tokens"] = value
        elif key == "stop":
            out["stop_sequences"] = [value] if isinstance(value, str) else value
        elif key == "tools":
            out["tools"] = [_anthropic_tool(t) for t in value]
        elif key == "tool_choice":
            out["tool_choice"] = _anthropic_choice(value)
        elif key == "stream_options":
            continue  # usage comes in message_start and message_delta
        else:
            out[key] = value
    return out


def _anthropic_turns(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Chat messages -> Messages turns: tool calls as ``tool_use`` blocks, tool answers as ``tool_result``
    blocks of a user turn (consecutive ones in one turn, as the API alternates user and assistant)."""
    turns: list[dict[str, Any]] = []
    for m in messages:
        role, content = m.get("role"), m.get("content")
        if role == "tool":
            block = {
                "type": "tool_result",
                "tool_use_id": m.get("tool_call_id"),
                "content": content if isinstance(content, str) else json.dumps(content),
            }
            if turns and turns[-1]["role"] == "user" and isinstance(turns[-1]["content"], list):
                turns[-1]["content"].append(block)
            else:
                turns.append({"role": "user", "content": [block]})
        elif role == "assistant" and m.get("tool_calls"):
            blocks: list[dict[str, Any]] = [{"type": "text", "text": content}] if content else []
            for call in m["tool_calls"]:
                fn = _function(call)
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call.get("id"),
                        "name": fn.get("name"),
                        "input": _arguments(fn.get("arguments")),
                    }
                )
            turns.append({"role": "assistant", "content": blocks})
        else:
            turns.append({"role": role, "content": content if content is not None else ""})
    return turns


def _anthropic_tool(tool: dict[str, Any]) -> dict[str, Any]:
    fn = _function(tool)
    out = {"name": fn.get("name"), "input_schema": fn.get("parameters") or {"type": "object"}}
    return out | ({"description": fn["description"]} if fn.get("description") else {})


def _anthropic_choice(choice: Any) -> Any:
    if isinstance(choice, dict):
        return {"type": "tool", "name": _function(choice).get("name")}
    return {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}.get(
        choice, choice
    )


def _function(obj: Any) -> dict[str, Any]:
    fn = obj.get("function") if isinstance(obj, dict) else None
    return fn if isinstance(fn, dict) else {}


def _arguments(text: Any) -> Any:
    """A chat tool call's arguments (JSON text) as the object Messages wants; text that is not JSON stays
    text (the server judges it)."""
    if not isinstance(text, str):
        return text if text is not None else {}
    try:
        return json.loads(text) if text.strip() else {}
    except ValueError:
        return text
