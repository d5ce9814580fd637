"""Responses and Messages answers, event by event, in the shape of a Chat Completions chunk.

``answer.Answer`` folds chat chunks; an endpoint asked in the Responses API or Anthropic's Messages API
answers in typed events instead. A reader here turns each event (or a whole non-streamed answer) into
exactly one chat-shaped chunk, so every event keeps its own arrival time and kind, and one accumulator
serves all four APIs:

    Responses                              Messages                          chat chunk
    response.output_text.delta             content_block_delta text_delta    delta.content
    response.reasoning(_summary)_text.delta  thinking_delta                  delta.reasoning_content
    output_item.added (function_call),     content_block_start (tool_use),   delta.tool_calls
      function_call_arguments.delta          input_json_delta
    response.completed / .incomplete       message_delta (stop_reason)       finish_reason + usage
    response.failed, error                 error                             an error event
    anything else (created, part added...) message_start, ping, *_stop      an empty chunk

Usage in chat's names: ``prompt_tokens`` is every input token (Messages counts cache reads and writes
apart from ``input_tokens``: they are added), ``completion_tokens`` the output tokens, cached and reasoning
tokens under chat's ``*_details``. Stop reasons in chat's words: ``length`` for max_output_tokens /
max_tokens, ``tool_calls`` for a function call or ``tool_use``, else ``stop``. ``done`` is set by the
event that ends the answer (neither API sends [DONE]).
"""

from __future__ import annotations

import json
from typing import Any

MESSAGES_STOPS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
RESPONSES_INCOMPLETE = {"max_output_tokens": "length", "content_filter": "content_filter"}


class Reader:
    """One answer's reader: ``chunk(obj, stream)`` -> a chat chunk; ``done`` once the last event came."""

    def __init__(self) -> None:
        self.done = False
        self.tools: dict[Any, int] = {}  # the API's id of a tool call (item, block) -> chat's tool index

    def chunk(self, obj: dict[str, Any], stream: bool) -> dict[str, Any]:
        raise NotImplementedError

    def _tool(self, key: Any, **fields: Any) -> dict[str, Any]:
        index = self.tools.setdefault(key, len(self.tools))
        return _delta({"tool_calls": [{"index": index, **fields}]})


def reader(api: str | None) -> Reader | None:
    return {"responses": ResponsesReader, "messages": MessagesReader}.get(api or "", lambda: None)()


class ResponsesReader(Reader):
    def chunk(self, obj: dict[str, Any], stream: bool) -> dict[str, Any]:
        if not stream:
            self.done = True
            return self._whole(obj)
        kind = obj.get("type")
        if kind == "error":
            self.done = True
            return {"error": {k: v for k, v in obj.items() if k in ("code", "message", "param")}}
        if kind is None and "error" in obj:  # an error in chat's shape, from a server that mixes them
            return {"error": obj["error"]}
        if kind == "response.output_text.delta":
            lp = obj.get("logprobs")
            return _delta({"content": obj.get("delta")}, {"content": lp} if lp else None)
        if kind in ("response.reasoning_text.delta", "response.reasoning_summary_text.delta"):
            return _delta({"reasoning_content": obj.get("delta")})
        if kind == "response.output_item.added" and _get(obj, "item", "type") == "function_call":
            item = obj["item"]
            fn = {"name": item.get("name"), "arguments": item.get("arguments") or ""}
            return self._tool(obj.get("output_index"), id=item.get("call_id"), function=fn)
        if kind == "response.function_call_arguments.delta":
            return self._tool(obj.get("output_index"), function={"arguments": obj.get("delta")})
        response = obj.get("response")
        if kind in ("response.completed", "response.incomplete", "response.failed") and isinstance(
            response, dict
        ):
            self.done = True
            if kind == "response.failed":
                return {"error": response.get("error") or {"message": "response.failed"}}
            return self._end(response)
        if isinstance(response, dict):  # created, in_progress, queued: who serves it
            return {"model": response.get("model"), "choices": []}
        return {"choices": []}

    def _end(self, response: dict[str, Any]) -> dict[str, Any]:
        usage = responses_usage(response.get("usage"))
        out = {"model": response.get("model"), "choices": [_finish(self._stop(response))]}
        return out | ({"usage": usage} if usage is not None else {})

    def _stop(self, response: dict[str, Any]) -> str:
        if response.get("status") == "incomplete":
            reason = _get(response, "incomplete_details", "reason")
            return RESPONSES_INCOMPLETE.get(reason, str(reason or "incomplete"))
        calls = any(_get(item, "type") == "function_call" for item in response.get("output") or ())
        return "tool_calls" if calls else "stop"

    def _whole(self, body: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(body.get("output"), list):
            raise ValueError("a response without an 'output' list")
        text: list[str] = []
        reasoning: list[str] = []
        calls: list[dict[str, Any]] = []
        logprobs: list[Any] = []
        for item in body["output"]:
            kind = _get(item, "type")
            if kind == "message":
                for part in item.get("content") or ():
                    if _get(part, "type") == "output_text":
                        text.append(part.get("text") or "")
                        logprobs.extend(part.get("logprobs") or ())
            elif kind == "reasoning":
                for part in (item.get("content") or []) + (item.get("summary") or []):
                    reasoning.append(_get(part, "text") or "")
            elif kind == "function_call":
                fn = {"name": item.get("name"), "arguments": item.get("arguments")}
                calls.append({"id": item.get("call_id"), "type": "function", "function": fn})
        message: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
        message |= {"reasoning_content": "".join(reasoning)} if reasoning else {}
        message |= {"tool_calls": calls} if calls else {}
        choice = {"index": 0, "message": message, "finish_reason": self._stop(body)}
        choice |= {"logprobs": {"content": logprobs}} if logprobs else {}
        usage = responses_usage(body.get("usage"))
        return {"model": body.get("model"), "choices": [choice]} | ({"usage": usage} if usage else {})


class MessagesReader(Reader):
    def __init__(self) -> None:
        super().__init__()
        self.usage: dict[str, Any] = {}  # Anthropic's, merged over message_start and message_delta

    def chunk(self, obj: dict[str, Any], stream: bool) -> dict[str, Any]:
        if not stream:
            self.done = True
            return self._whole(obj)
        kind = obj.get("type")
        if kind == "error" or (kind is None and "error" in obj):
            self.done = True
            return {"error": obj.get("error") or {"message": "error event"}}
        if kind == "message_start" and isinstance(obj.get("message"), dict):
            self.usage = dict(obj["message"].get("usage") or {})
            return {"model": obj["message"].get("model"), "choices": []}
        if kind == "content_block_start":
            block = obj.get("content_block") or {}
            if _get(block, "type") == "tool_use":
                return self._tool(
                    obj.get("index"),
                    id=block.get("id"),
                    function={"name": block.get("name"), "arguments": ""},
                )
            if _get(block, "type") == "text" and block.get("text"):
                return _delta({"content": block["text"]})
            return {"choices": []}
        if kind == "content_block_delta":
            delta = obj.get("delta") or {}
            step = _get(delta, "type")
            if step == "text_delta":
                return _delta({"content": delta.get("text")})
            if step == "thinking_delta":
                return _delta({"reasoning_content": delta.get("thinking")})
            if step == "input_json_delta":
                return self._tool(obj.get("index"), function={"arguments": delta.get("partial_json")})
            return {"choices": []}
        if kind == "message_delta":
            self.usage |= obj.get("usage") or {}
            stop = _get(obj.get("delta"), "stop_reason")
            choices = [_finish(MESSAGES_STOPS.get(stop, str(stop)))] if stop else []
            return {"choices": choices, "usage": messages_usage(self.usage)}
        if kind == "message_stop":
            self.done = True
        return {"choices": []}

    def _whole(self, body: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(body.get("content"), list):
            raise ValueError("a message without a 'content' list")
        text, reasoning, calls = [], [], []
        for block in body["content"]:
            kind = _get(block, "type")
            if kind == "text":
                text.append(block.get("text") or "")
            elif kind == "thinking":
                reasoning.append(block.get("thinking") or "")
            elif kind == "tool_use":
                fn = {"name": block.get("name"), "arguments": _json(block.get("input"))}
                calls.append({"id": block.get("id"), "type": "function", "function": fn})
        message: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
        message |= {"reasoning_content": "".join(reasoning)} if reasoning else {}
        message |= {"tool_calls": calls} if calls else {}
        stop = body.get("stop_reason")
        finish = MESSAGES_STOPS.get(stop, stop) if isinstance(stop, str) else None
        choice = {"index": 0, "message": message, "finish_reason": finish}
        out = {"model": body.get("model"), "choices": [choice]}
        usage = body.get("usage")
        return out | ({"usage": messages_usage(usage)} if isinstance(usage, dict) else {})


def responses_usage(usage: Any) -> dict[str, Any] | None:
    """A Responses usage object in chat's names."""
    if not isinstance(usage, dict):
        return None
    out: dict[str, Any] = {
        "prompt_tokens": usage.get("input_tokens"),
        "completion_tokens": usage.get("output_tokens"),
        "total_tokens": usage.get("total_tokens"),
    }
    cached = _get(usage.get("input_tokens_details"), "cached_tokens")
    reasoning = _get(usage.get("output_tokens_details"), "reasoning_tokens")
    out |= {"prompt_tokens_details": {"cached_tokens": cached}} if cached is not None else {}
    return out | (
        {"completion_tokens_details": {"reasoning_tokens": reasoning}} if reasoning is not None else {}
    )


def messages_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """A Messages usage object in chat's names: cache reads and writes are input tokens too."""
    counts = [
        usage.get(k) for k in ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")
    ]
    ints = [c for c in counts if isinstance(c, int) and not isinstance(c, bool)]
    prompt = sum(ints) if ints else None
    out: dict[str, Any] = {"prompt_tokens": prompt, "completion_tokens": usage.get("output_tokens")}
    if isinstance(prompt, int) and isinstance(usage.get("output_tokens"), int):
        out["total_tokens"] = prompt + usage["output_tokens"]
    cached = usage.get("cache_read_input_tokens")
    return out | ({"prompt_tokens_details": {"cached_tokens": cached}} if cached is not None else {})


def _delta(delta: dict[str, Any], logprobs: Any = None) -> dict[str, Any]:
    choice: dict[str, Any] = {"index": 0, "delta": delta}
    return {"choices": [choice | ({"logprobs": logprobs} if logprobs is not None else {})]}


def _finish(reason: str) -> dict[str, Any]:
    return {"index": 0, "delta": {}, "finish_reason": reason}


def _get(obj: Any, *keys: str) -> Any:
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def _json(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value if value is not None else {})
