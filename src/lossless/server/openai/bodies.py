"""OpenAI response bodies and SSE chunks, built from the engine's deltas. Pure functions of their inputs.

Two log-probability formats: the chat format (``choices[].logprobs.content[]`` of token, logprob, bytes,
top_logprobs) and the legacy completions format (parallel lists ``tokens``, ``token_logprobs``,
``top_logprobs``, ``text_offset``, where ``text_offset`` counts characters into the returned text,
echoed prompt included).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from lossless.engine.engine import TokenLogprob

DONE = b"data: [DONE]\n\n"


def sse(body: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode() + b"\n\n"


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int = 0  # of the prompt's, found in the KV cache (`serve --max-batch`: `batch.decode`)

    def body(self) -> dict[str, Any]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.prompt_tokens + self.completion_tokens,
            "prompt_tokens_details": {"cached_tokens": self.cached_tokens},
        }


@dataclass(frozen=True)
class Head:
    """What every body of one response shares."""

    id: str
    model: str
    created: int
    fingerprint: str  # system_fingerprint: what serves (version, weights' dtype, drafter), see `http.app`

    def fields(self, kind: str) -> dict[str, Any]:
        """The fields a body of ``object`` type ``kind`` starts with, in OpenAI's order."""
        return {
            "id": self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": self.fingerprint,
        }


# --- chat -------------------------------------------------------------------------------------------


def chat_logprobs(tokens: Sequence[TokenLogprob]) -> list[dict[str, Any]]:
    def entry(text: str, logprob: float) -> dict[str, Any]:
        return {"token": text, "logprob": logprob, "bytes": list(text.encode("utf-8"))}

    return [
        {**entry(t.token, t.logprob), "top_logprobs": [entry(text, lp) for _, text, lp in t.top]}
        for t in tokens
    ]


def chat_completion(
    head: Head, text: str, finish_reason: str | None, usage: Usage, logprobs: list[dict[str, Any]] | None
) -> dict[str, Any]:
    return {
        **head.fields("chat.completion"),
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None if logprobs is None else {"content": logprobs},
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage.body(),
    }


def chat_chunk(
    head: Head,
    delta: dict[str, str],
    *,
    finish_reason: str | None = None,
    logprobs: list[dict[str, Any]] | None = None,
    with_usage: bool = False,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        **head.fields("chat.completion.chunk"),
        "choices": [
            {
                "index": 0,
                "delta": delta,
                "logprobs": None if logprobs is None else {"content": logprobs},
                "finish_reason": finish_reason,
            }
        ],
    }
    if with_usage:
        body["usage"] = None  # OpenAI: null on every chunk but the last when include_usage is set
    return body


def usage_chunk(head: Head, usage: Usage, *, chat: bool) -> dict[str, Any]:
    return {
        **head.fields("chat.completion.chunk" if chat else "text_completion"),
        "choices": [],
        "usage": usage.body(),
    }


# --- legacy completions -----------------------------------------------------------------------------


@dataclass
class LegacyLogprobs:
    """Accumulates the legacy format; ``text_offset`` continues across calls (prompt, then completion)."""

    offset: int = 0
    tokens: list[str] = field(default_factory=list)
    token_logprobs: list[float | None] = field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = field(default_factory=list)
    text_offset: list[int] = field(default_factory=list)

    def add(self, text: str, logprob: float | None, top: dict[str, float] | None) -> None:
        self.tokens.append(text)
        self.token_logprobs.append(logprob)
        self.top_logprobs.append(top)
        self.text_offset.append(self.offset)
        self.offset += len(text)

    def add_generated(self, tokens: Sequence[TokenLogprob]) -> None:
        for t in tokens:
            self.add(t.token, t.logprob, _top_dict(t))

    def add_prompt(self, first_text: str, scored: Sequence[TokenLogprob | None]) -> None:
        """``scored[0]`` is None: nothing predicts the first token, so its text comes from the caller."""
        for i, t in enumerate(scored):
            if t is None:
                self.add(first_text if i == 0 else "", None, None)
            else:
                self.add(t.token, t.logprob, _top_dict(t))

    def body(self) -> dict[str, Any]:
        return {
            "tokens": self.tokens,
            "token_logprobs": self.token_logprobs,
            "top_logprobs": self.top_logprobs,
            "text_offset": self.text_offset,
        }

    def since(self, start: int) -> dict[str, Any]:
        """The entries added after the first ``start`` ones: one streamed chunk's share."""
        return {k: v[start:] for k, v in self.body().items()}


def _top_dict(t: TokenLogprob) -> dict[str, float]:
    top: dict[str, float] = {}
    for _, text, lp in t.top:
        # Two token ids can decode to the same text; keep the likelier, as the dict holds one.
        top[text] = max(lp, top.get(text, -float("inf")))
    return top


def first_token_text(prompt: str, scored: Sequence[TokenLogprob | None]) -> str:
    """The first prompt token's text, which ``score`` does not report: what the others leave over."""
    rest = "".join(t.token for t in scored[1:] if t is not None)
    return prompt[: len(prompt) - len(rest)] if prompt.endswith(rest) else ""


def completion(
    head: Head, text: str, finish_reason: str | None, usage: Usage, logprobs: LegacyLogprobs | None
) -> dict[str, Any]:
    return {
        **head.fields("text_completion"),
        "choices": [
            {
                "index": 0,
                "text": text,
                "logprobs": None if logprobs is None else logprobs.body(),
                "finish_reason": finish_reason,
            }
        ],
        "usage": usage.body(),
    }


def completion_chunk(
    head: Head,
    text: str,
    *,
    finish_reason: str | None = None,
    logprobs: dict[str, Any] | None = None,
    with_usage: bool = False,
) -> dict[str, Any]:
    body: dict[str, Any] = {
        **head.fields("text_completion"),
        "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}],
    }
    if with_usage:
        body["usage"] = None
    return body
