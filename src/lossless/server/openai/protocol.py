"""OpenAI request bodies -> one validated ``ApiRequest``; every mistake -> ``InvalidRequest`` (a 400).

Policy, where the OpenAI API leaves room:
- ``model`` may be omitted (the loaded model answers); when given it must be the served name or an alias
  (the checkpoint's file name or stem, or the name the engine reports). Anything else is a 400.
- ``n`` > 1 is rejected ("n > 1 is not supported"): one worker serves one sequence at a time, and
  sequential samples would silently multiply latency for a benchmark.
- Fields we do not honour are accepted and named in the ``x-lossless-ignored-params`` header, so a probe
  can tell "ignored" from "honoured" without guessing (the OpenAI API silently ignores some too). The
  header is at most 1 KiB: names made of letters, digits, ``_``, ``-`` and ``.`` (64 at most) are
  listed as they are, as many as fit, and the rest are counted (``,+N more``); no other name is echoed.
- Text (prompt, message contents, stop sequences) must be valid Unicode: a lone UTF-16 surrogate, which
  JSON can spell (``"\ud800"``) but no tokenizer can encode, is a 400.
- A body is refused (400, ``invalid_json``) when it nests deeper than the parser's recursion limit or
  holds more JSON values (counted as commas) than ``max_json_values(context)``: a token-id prompt needs
  one per token and everything else a few thousand at most, while json.loads holds the GIL throughout,
  so a dense 4 MiB array (1.4M values, ~0.2 s) would stall the engine thread and every stream with it.
- ``max_tokens`` beyond the context left after the prompt is clamped (finish_reason "length"); only a
  prompt that leaves no room at all is a 400 (code ``context_length_exceeded``).
- ``top_k`` is an extension (vLLM's): 0 or -1 means off.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Literal

from lossless.engine.model.sampling import SamplingParams
from lossless.errors import UsageError

Api = Literal["chat", "completions"]  # which OpenAI API a request came in on
MAX_TOP_LOGPROBS = 20
MAX_STOP_SEQUENCES = 16
MIN_JSON_VALUES = 2**16  # a body may hold this many JSON values, or 2 per context token if more
IGNORED_HEADER_BYTES = 1024  # x-lossless-ignored-params at most; aiohttp refuses header lines over 8190
_HEADER_NAME = re.compile(r"[A-Za-z0-9_.\-]{1,64}")  # field names listed as they are in that header
_SEED_RANGE = (-(2**63), 2**64 - 1)  # what torch.Generator.manual_seed accepts
_ROLES = {"system", "developer", "user", "assistant", "tool"}

_COMMON = {
    "model",
    "stream",
    "stream_options",
    "temperature",
    "top_p",
    "top_k",
    "seed",
    "stop",
    "n",
    "max_tokens",
    "logprobs",
    "ignore_eos",
}
_STRUCTURED = {"tools", "tool_choice", "response_format", "parallel_tool_calls"}  # tools.py reads them
HONOURED: dict[Api, frozenset[str]] = {
    "chat": frozenset(_COMMON | {"messages", "max_completion_tokens", "top_logprobs"} | _STRUCTURED),
    "completions": frozenset(_COMMON | {"prompt", "echo"}),
}


class InvalidRequest(UsageError):
    """A request the server refuses with an OpenAI-style error body (400 unless ``status`` says else).

    Lives beside the parser because only the server raises it; it is a ``UsageError`` so it stays in
    the one error tree of ``lossless.errors``.
    """

    def __init__(
        self, message: str, *, param: str | None = None, code: str | None = None, status: int = 400
    ) -> None:
        super().__init__(message)
        self.message, self.param, self.code, self.status = message, param, code, status

    def body(self) -> dict[str, Any]:
        kind = "invalid_request_error" if self.status < 500 else "server_error"
        return {"error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}}


@dataclass(frozen=True)
class ApiRequest:
    api: Api
    model: str  # the served name, whatever alias the client used
    params: SamplingParams  # max_tokens not yet clamped to the context
    max_tokens: int | None  # as asked; None -> the rest of the context
    messages: tuple[dict[str, str], ...] = ()  # chat: role/content pairs, content flattened to text
    prompt: str | tuple[int, ...] = ""  # completions: text or token ids
    stream: bool = False
    include_usage: bool = False  # stream_options.include_usage: a final usage-only chunk
    continuous_usage: bool = False  # and continuous_usage_stats (vLLM's): the running usage in every chunk
    echo: bool = False  # completions: the prompt is returned before the completion
    logprobs: int | None = None  # None: no logprobs; else how many alternatives per token
    ignored: tuple[str, ...] = ()  # fields accepted but not honoured
    structured: Any = None  # chat: tools.Structured (tools, tool_choice, response_format), else None
    dialect: Any = None  # a Responses request: what its Response echoes (``dialects/openai_responses.py``)


def max_json_values(max_context: int) -> int:
    """65,536 for a context up to 32k tokens: parsing that many values at their densest (a 0.2 MB array
    of arrays) holds the GIL ~10 ms."""
    return max(MIN_JSON_VALUES, 2 * max_context)


def parse_json(raw: bytes, max_values: int = MIN_JSON_VALUES) -> dict[str, Any]:
    # a comma per value beyond the first in each array or object: bytes.count sees them all in ~1 ms a MiB
    if len(raw) > max_values and raw.count(b",") > max_values:
        raise InvalidRequest(
            f"the request body holds more than {max_values} JSON values", code="invalid_json"
        )
    try:
        body = json.loads(raw)
    except RecursionError as exc:
        raise InvalidRequest("the request body is nested too deeply", code="invalid_json") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InvalidRequest(
            f"the request body is not valid JSON: {_cut(str(exc))}", code="invalid_json"
        ) from exc
    except ValueError as exc:  # Python refuses to read an integer of over 4300 digits
        raise InvalidRequest(
            "the request body holds a number with too many digits", code="invalid_json"
        ) from exc
    if not isinstance(body, dict):
        raise InvalidRequest("the request body must be a JSON object", code="invalid_json")
    return body


def parse(
    api: Api,
    body: dict[str, Any],
    model: str,
    aliases: frozenset[str],
    max_context: int | None = None,
) -> ApiRequest:
    """``max_context``: a token-id prompt longer than this is refused before its ids are checked (a
    4 MiB body holds ~200k of them, and checking them is Python work that slows every stream)."""
    _check_model(body, model, aliases)
    if body.get("n") not in (None, 1):
        if not _is_int(body["n"]) or body["n"] < 1:
            raise InvalidRequest("n must be a positive integer", param="n")
        raise InvalidRequest("n > 1 is not supported", param="n", code="unsupported_parameter")
    stream = _bool(body, "stream", False)
    include_usage, continuous_usage = _stream_options(body)
    logprobs = _chat_logprobs(body) if api == "chat" else _legacy_logprobs(body)
    max_tokens = _max_tokens(api, body)
    params = SamplingParams(
        max_tokens=max_tokens if max_tokens is not None else 0,
        temperature=_number(body, "temperature", 1.0, 0.0, 2.0),
        top_p=_number(body, "top_p", 1.0, 0.0, 1.0, low_open=True),
        top_k=_top_k(body),
        seed=_seed(body),
        stop=_stop(body),
        logprobs=logprobs is not None,
        top_logprobs=logprobs or 0,
        ignore_eos=_bool(body, "ignore_eos", False),
    )
    base = ApiRequest(
        api=api,
        model=model,
        params=params,
        max_tokens=max_tokens,
        stream=stream,
        include_usage=include_usage,
        continuous_usage=continuous_usage,
        logprobs=logprobs,
        ignored=tuple(sorted(k for k in body if k not in HONOURED[api])),
    )
    if api == "chat":
        return replace(base, messages=_messages(body))
    return replace(base, prompt=_prompt(body, max_context), echo=_bool(body, "echo", False))


def ignored_header(names: Sequence[str]) -> str:
    """The ``x-lossless-ignored-params`` value: safe names while they fit, then how many are not shown."""
    shown: list[str] = []
    size, rest = 0, 0
    room = IGNORED_HEADER_BYTES - len(",+1000000 more")
    for name in names:
        if _HEADER_NAME.fullmatch(name) and size + len(name) + 1 <= room:
            shown.append(name)
            size += len(name) + 1
        else:
            rest += 1
    return ",".join([*shown, f"+{rest} more"] if rest else shown)


def context_exceeded(max_context: int, tokens: str, param: str) -> InvalidRequest:
    return InvalidRequest(
        f"This model's maximum context length is {max_context} tokens; the prompt has {tokens} "
        "and leaves no room to generate.",
        param=param,
        code="context_length_exceeded",
    )


def _cut(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _show(value: Any) -> str:
    """A value as an error message may quote it: an array or object by its size only (a deep one would
    overflow ``repr``), anything else cut short (a 4 MiB string must not come back in the error)."""
    if isinstance(value, list):
        return f"an array of {len(value)} items"
    if isinstance(value, dict):
        return f"an object of {len(value)} keys"
    if isinstance(value, str):
        return repr(value[:40]) + ("..." if len(value) > 40 else "")
    return _cut(repr(value), 40)


def _text(value: str, param: str) -> str:
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidRequest(
            f"{param} is not valid Unicode: a lone surrogate at character {exc.start}", param=param
        ) from exc
    return value


def _check_model(body: dict[str, Any], model: str, aliases: frozenset[str]) -> None:
    name = body.get("model")
    if name is None:
        return
    if not isinstance(name, str):
        raise InvalidRequest("model must be a string", param="model")
    if name != model and name not in aliases:
        raise InvalidRequest(
            f"The model {_show(name)} does not exist; this server serves {model!r}.",
            param="model",
            code="model_not_found",
            status=404,  # as OpenAI and vLLM answer: clients raise their NotFoundError on it
        )


def _is_int(x: Any) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def _is_number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _bool(body: dict[str, Any], key: str, default: bool) -> bool:
    value = body.get(key)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise InvalidRequest(f"{key} must be a boolean, got {_show(value)}", param=key)
    return value


def _number(
    body: dict[str, Any], key: str, default: float, low: float, high: float, *, low_open: bool = False
) -> float:
    value = body.get(key)
    if value is None:
        return default
    if not _is_number(value):
        raise InvalidRequest(f"{key} must be a number, got {_show(value)}", param=key)
    if value > high or value < low or (low_open and value == low):
        bracket = "(" if low_open else "["
        raise InvalidRequest(f"{key} must be in {bracket}{low:g}, {high:g}], got {_show(value)}", param=key)
    return float(value)


def _int(body: dict[str, Any], key: str, low: int, high: int | None = None) -> int | None:
    value = body.get(key)
    if value is None:
        return None
    if not _is_int(value):
        raise InvalidRequest(f"{key} must be an integer, got {_show(value)}", param=key)
    if value < low or (high is not None and value > high):
        span = f"between {low} and {high}" if high is not None else f"at least {low}"
        raise InvalidRequest(f"{key} must be {span}, got {_show(value)}", param=key)
    return int(value)


def _top_k(body: dict[str, Any]) -> int:
    top_k = _int(body, "top_k", -1)
    return 0 if top_k is None or top_k == -1 else top_k


def _seed(body: dict[str, Any]) -> int | None:
    return _int(body, "seed", *_SEED_RANGE)


def _max_tokens(api: Api, body: dict[str, Any]) -> int | None:
    # Chat completions need at least one token; legacy completions allow 0 (echo-only scoring).
    low = 1 if api == "chat" else 0
    newer = _int(body, "max_completion_tokens", low) if api == "chat" else None
    older = _int(body, "max_tokens", low)
    if newer is not None:
        return newer
    if older is None and api == "completions":
        return 16  # the legacy API's documented default
    return older


def _stop(body: dict[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) for s in stops):
        raise InvalidRequest("stop must be a string or a list of strings", param="stop")
    if len(stops) > MAX_STOP_SEQUENCES:
        raise InvalidRequest(f"stop takes at most {MAX_STOP_SEQUENCES} sequences", param="stop")
    return tuple(_text(s, "stop") for s in stops if s)


def _stream_options(body: dict[str, Any]) -> tuple[bool, bool]:
    """(include_usage, continuous_usage_stats); the second counts only with the first, as in vLLM."""
    options = body.get("stream_options")
    if options is None:
        return False, False
    if not isinstance(options, dict):
        raise InvalidRequest("stream_options must be an object", param="stream_options")
    usage = _bool(options, "include_usage", False)
    return usage, usage and _bool(options, "continuous_usage_stats", False)


def _chat_logprobs(body: dict[str, Any]) -> int | None:
    wanted = _bool(body, "logprobs", False)
    top = _int(body, "top_logprobs", 0, MAX_TOP_LOGPROBS)
    if top and not wanted:
        raise InvalidRequest("top_logprobs needs logprobs: true", param="top_logprobs")
    return (top or 0) if wanted else None


def _legacy_logprobs(body: dict[str, Any]) -> int | None:
    # The legacy API's logprobs is an integer (alternatives per token), not a switch.
    return _int(body, "logprobs", 0, MAX_TOP_LOGPROBS)


def _messages(body: dict[str, Any]) -> tuple[dict[str, str], ...]:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise InvalidRequest("messages must be a non-empty list", param="messages")
    out = []
    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            raise InvalidRequest(f"messages[{i}] must be an object", param=f"messages[{i}]")
        role = message.get("role")
        if role not in _ROLES:
            allowed = ", ".join(sorted(_ROLES))
            raise InvalidRequest(f"messages[{i}].role must be one of {allowed}", param=f"messages[{i}].role")
        # "developer" is the newer name of "system"; chat templates of open models know only the latter.
        out.append({"role": "system" if role == "developer" else role, "content": _content(message, i)})
    return tuple(out)


def _content(message: dict[str, Any], i: int) -> str:
    content = message.get("content")
    if content is None and message.get("role") == "assistant":
        return ""  # an assistant turn that only called tools
    param = f"messages[{i}].content"
    if isinstance(content, str):
        return _text(content, param)
    if isinstance(content, list):
        parts = []
        for part in content:
            if not (
                isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)
            ):
                raise InvalidRequest(
                    f"messages[{i}].content: only text parts are supported", param=f"messages[{i}].content"
                )
            parts.append(_text(part["text"], param))
        return "".join(parts)
    raise InvalidRequest(
        f"messages[{i}].content must be a string or a list of text parts", param=f"messages[{i}].content"
    )


def _prompt(body: dict[str, Any], max_context: int | None) -> str | tuple[int, ...]:
    prompt = body.get("prompt")
    # A batch of one is common in client libraries ([prompt] or [[ids]]); larger batches are refused.
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]
    if isinstance(prompt, str):
        return _text(prompt, "prompt")
    if (
        isinstance(prompt, list)
        and max_context is not None
        and len(prompt) > max_context
        and _is_int(prompt[0])
    ):
        raise context_exceeded(max_context, str(len(prompt)), "prompt")
    if isinstance(prompt, list) and prompt and all(_is_int(t) and t >= 0 for t in prompt):
        return tuple(prompt)
    if isinstance(prompt, list) and len(prompt) > 1 and all(isinstance(p, str | list) for p in prompt):
        raise InvalidRequest("only one prompt per request is supported", param="prompt")
    raise InvalidRequest("prompt must be a string or a list of token ids", param="prompt")
