"""The OpenAI wire format: bench's request bodies (in any of the four APIs, by way of ``apis``), and what
one chat or completions chunk carries (``native`` turns the other two APIs' events into such chunks)."""

from __future__ import annotations

import json
from typing import Any

from lossless.client.api_names import NATIVE
from lossless.client.apis import native_body
from lossless.client.endpoints import Endpoint
from lossless.client.prompt import Prompt
from lossless.records import CONTENT, EMPTY, REASONING, TOOL, USAGE


def request_body(
    endpoint: Endpoint, prompt: Prompt, api: str, stream: bool, max_tokens: int
) -> dict[str, Any]:
    body: dict[str, Any] = {"model": endpoint.model, "max_tokens": prompt.max_tokens or max_tokens}
    if api != "completions":
        body["messages"] = [{"role": role, "content": content} for role, content in prompt.messages]
    else:
        body["prompt"] = prompt.text
    if prompt.force_output:  # vLLM, SGLang, llama.cpp and lossless serve generate to max_tokens
        body["ignore_eos"] = True
    if stream:
        body["stream"] = True
        body["stream_options"] = stream_options(api, endpoint.running_usage)
    if api in NATIVE:
        body = native_body(api, body)
    body.update(endpoint.body)  # the endpoint's own fields as written, in the API it speaks
    return body


def stream_options(api: str, running: bool) -> dict[str, bool]:
    """``stream_options``: usage at the end (the only exact N_out while streaming), and in every chunk
    where the endpoint takes vLLM's ``continuous_usage_stats`` (chat and completions only)."""
    if running and api in ("chat", "completions"):
        return {"include_usage": True, "continuous_usage_stats": True}
    return {"include_usage": True}


class Chunk:
    """What one chunk (or a whole non-streamed response) says, already reduced to the fields we keep.

    A field of the wrong type (a number for ``content``, an object for ``reasoning_content``) raises
    ``ValueError``: the request is then one malformed answer, recorded as such, never a crash."""

    __slots__ = (
        "completion_tokens",
        "content",
        "fingerprint",
        "finish_reason",
        "kind",
        "model",
        "reasoning",
        "tool_chars",
        "usage",
    )

    def __init__(self, obj: Any, api: str, stream: bool) -> None:
        if not isinstance(obj, dict):
            raise ValueError("chunk is not a JSON object")
        self.content = self.reasoning = ""
        self.tool_chars = 0
        self.finish_reason: str | None = None
        # who served it: the response's own words, kept per request (servers behind one URL may differ)
        self.model = _label(obj.get("model"))
        self.fingerprint = _label(obj.get("system_fingerprint"))
        usage = obj.get("usage")
        self.usage: dict[str, Any] | None = usage if isinstance(usage, dict) else None
        self.completion_tokens = _int(self.usage.get("completion_tokens")) if self.usage else None
        choices = obj.get("choices")
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
        self.finish_reason = _text(choice, "finish_reason")
        if api == "completions":
            self.content = _text(choice, "text") or ""
            return
        delta = choice.get("delta" if stream else "message")
        if delta is None:
            return
        if not isinstance(delta, dict):
            raise ValueError("delta is not an object")
        self.content = _text(delta, "content") or ""
        # DeepSeek/vLLM say reasoning_content, OpenRouter and newer vLLM say reasoning
        self.reasoning = _text(delta, "reasoning_content") or _text(delta, "reasoning") or ""
        calls = delta.get("tool_calls")
        if calls is not None and not isinstance(calls, list):
            raise ValueError("tool_calls is not a list")
        for call in calls or ():
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                self.tool_chars += len(_text(fn, "name") or "") + len(_text(fn, "arguments") or "")


def error_of(body: str) -> tuple[str, str]:
    """An error body's (code, message), in one line: OpenAI's ``{"error": {"message", "code"}}`` and the
    shapes servers vary it into (a bare string, ``detail``, ``msg``); ("", the text) when not JSON."""
    try:
        found = json.loads(body)
    except (ValueError, RecursionError):
        return "", " ".join(body.split())
    err = found.get("error", found) if isinstance(found, dict) else found
    if isinstance(err, dict):
        message = err.get("message") or err.get("detail") or err.get("msg") or json.dumps(err)
        return str(err.get("code") or err.get("type") or ""), " ".join(str(message).split())
    return "", " ".join(str(err).split())


def _text(obj: dict[str, Any], key: str) -> str | None:
    """A string field, or None when absent or null; any other type is a malformed answer."""
    value = obj.get(key)
    if value is None or isinstance(value, str):
        return value
    raise ValueError(f"{key!r} is a {type(value).__name__}, not a string")


def _label(value: Any) -> str | None:
    # informative only: a number is kept as text, anything stranger is not kept (and fails nothing)
    if isinstance(value, str | int | float) and not isinstance(value, bool):
        return str(value)[:200]
    return None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def reasoning_tokens(usage: dict[str, Any] | None) -> int | None:
    details = usage.get("completion_tokens_details") if usage else None
    return _int(details.get("reasoning_tokens")) if isinstance(details, dict) else None


def cached_tokens(usage: dict[str, Any] | None) -> int | None:
    """Prompt tokens the server served from its prefix cache, in whichever shape it reports them:
    OpenAI's (and vLLM's) ``prompt_tokens_details.cached_tokens``, DeepSeek's ``prompt_cache_hit_tokens``,
    Anthropic-style ``cache_read_input_tokens``. None: the server does not say."""
    if not usage:
        return None
    details = usage.get("prompt_tokens_details")
    if isinstance(details, dict) and _int(details.get("cached_tokens")) is not None:
        return _int(details.get("cached_tokens"))
    for key in ("prompt_cache_hit_tokens", "cache_read_input_tokens"):
        if _int(usage.get(key)) is not None:
            return _int(usage.get(key))
    return None
