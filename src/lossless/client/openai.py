"""The OpenAI wire format: request bodies for both APIs, and what one response chunk carries."""

from __future__ import annotations

from typing import Any

from lossless.endpoints import Endpoint
from lossless.records import CONTENT, EMPTY, REASONING, TOOL, USAGE
from lossless.workload.prompts import Prompt

PATHS = {"chat": "/chat/completions", "completions": "/completions"}


def request_body(
    endpoint: Endpoint, prompt: Prompt, api: str, stream: bool, max_tokens: int
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": endpoint.model, "max_tokens": prompt.max_tokens or max_tokens}
    if api == "chat":
        body["messages"] = [{"role": role, "content": content} for role, content in prompt.messages]
    else:
        body["prompt"] = prompt.text
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}  # the only exact N_out while streaming
    body.update(endpoint.body)
    return body


class Chunk:
    """What one chunk (or a whole non-streamed response) says, already reduced to the fields we keep."""

    __slots__ = ("completion_tokens", "content", "finish_reason", "kind", "reasoning", "tool_chars", "usage")

    def __init__(self, obj: Any, api: str, stream: bool) -> None:
        self.content = self.reasoning = ""
        self.tool_chars = 0
        self.finish_reason: str | None = None
        usage = obj.get("usage") if isinstance(obj, dict) else None
        self.usage: dict[str, Any] | None = usage if isinstance(usage, dict) else None
        self.completion_tokens = _int(self.usage.get("completion_tokens")) if self.usage else None
        choices = obj.get("choices") if isinstance(obj, dict) else None
        if not isinstance(choices, list):
            raise ValueError("chunk has no 'choices' list")
        if choices:
            self._choice(choices[0], api, stream)
        if self.content:
            self.kind = CONTENT
        elif self.reasoning:
            self.kind = REASONING
        elif self.tool_chars:
            self.kind = TOOL
        elif self.usage is not None and not choices:
            self.kind = USAGE
        else:
            self.kind = EMPTY

    def _choice(self, choice: Any, api: str, stream: bool) -> None:
        if not isinstance(choice, dict):
            raise ValueError("choice is not an object")
        self.finish_reason = choice.get("finish_reason")
        if api == "completions":
            self.content = choice.get("text") or ""
            return
        delta = choice.get("delta" if stream else "message")
        if not isinstance(delta, dict):
            return
        self.content = delta.get("content") or ""
        # DeepSeek/vLLM say reasoning_content, OpenRouter and newer vLLM say reasoning
        self.reasoning = delta.get("reasoning_content") or delta.get("reasoning") or ""
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                fn = call.get("function") if isinstance(call, dict) else None
                if isinstance(fn, dict):
                    self.tool_chars += len(fn.get("name") or "") + len(fn.get("arguments") or "")


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def reasoning_tokens(usage: dict[str, Any] | None) -> int | None:
    details = usage.get("completion_tokens_details") if usage else None
    return _int(details.get("reasoning_tokens")) if isinstance(details, dict) else None
