"""What the newer APIs' translators share: a chat request built from another API's body, parsed by the
chat path itself (``openai/protocol.py``, ``openai/tool_calls.py``), so that the same fields mean the
same sampling, tools and limits, and its refusals spoken in the other API's names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from lossless.server.openai import protocol, tool_calls
from lossless.server.openai.protocol import ApiRequest, InvalidRequest


def chat_request(
    chat: dict[str, Any],
    body: dict[str, Any],
    *,
    model: str,
    aliases: frozenset[str],
    honoured: frozenset[str],
    names: Mapping[str, str],
) -> ApiRequest:
    """The chat request ``chat`` (translated from ``body``) as the chat path parses it; the fields of
    ``body`` outside ``honoured`` are listed as ignored. ``names``: a chat field -> the name the other
    API gives it, for refusals (``max_tokens must be at least 1`` -> ``max_output_tokens must be ...``)."""
    try:
        req = tool_calls.apply(protocol.parse("chat", chat, model, aliases), chat)
    except InvalidRequest as exc:
        raise renamed_refusal(exc, names) from exc
    return replace(req, ignored=tuple(sorted(k for k in body if k not in honoured)))


def renamed_refusal(exc: InvalidRequest, names: Mapping[str, str]) -> InvalidRequest:
    param = exc.param or ""
    for old, new in names.items():
        if param == old or param.startswith((old + "[", old + ".")):
            message = exc.message.replace(old, new, 1) if exc.message.startswith(old) else exc.message
            return InvalidRequest(message, param=new + param[len(old) :], code=exc.code, status=exc.status)
    return exc


def copy(body: dict[str, Any], keys: tuple[str, ...]) -> dict[str, Any]:
    """The fields of ``body`` among ``keys`` that are set (an explicit null means the default)."""
    return {k: body[k] for k in keys if body.get(k) is not None}


def text_parts(value: Any, param: str, kinds: frozenset[str]) -> str:
    """A string, or a list of ``{"type": <one of kinds>, "text": str}`` parts, as one string."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for i, part in enumerate(value):
            kind = part.get("type") if isinstance(part, dict) else None
            if not isinstance(kind, str) or kind not in kinds or not isinstance(part.get("text"), str):
                what = f"{kind!r} parts are not supported" if isinstance(kind, str) else "not a text part"
                raise InvalidRequest(
                    f"{param}[{i}]: {what[:80]}; only {' and '.join(sorted(kinds))} parts are", param=param
                )
            texts.append(part["text"])
        return "".join(texts)
    raise InvalidRequest(f"{param} must be a string or a list of text parts", param=param)


def items(body: dict[str, Any], key: str, *, required: bool) -> list[Any]:
    """``body[key]`` as a list (empty when absent and not required)."""
    value = body.get(key)
    if value is None and not required:
        return []
    if not isinstance(value, list) or (required and not value):
        raise InvalidRequest(f"{key} must be a {'non-empty ' if required else ''}list", param=key)
    return value


def object_at(value: Any, param: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise InvalidRequest(f"{param} must be an object", param=param)
    return value


def string_at(item: dict[str, Any], key: str, param: str) -> str:
    value = item.get(key)
    if not isinstance(value, str):
        raise InvalidRequest(f"{param}.{key} must be a string", param=f"{param}.{key}")
    return value
