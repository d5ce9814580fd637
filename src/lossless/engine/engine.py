"""The engine's face to the server: load a checkpoint, turn requests into streams of text deltas.

STUB: the interface is fixed here so the server can be written against it; the implementation is
being filled in (loading, tokenizer, generation).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from lossless.engine.sampling import SamplingParams

FinishReason = Literal["stop", "length", "cancelled"]


@dataclass(frozen=True)
class TokenLogprob:
    token_id: int
    token: str  # the token's own text (decoded alone)
    logprob: float  # natural log under the *unwarped* model distribution (temperature 1, no top-k/p)
    top: tuple[tuple[int, str, float], ...] = ()  # (token_id, text, logprob) of the most likely tokens


@dataclass(frozen=True)
class Delta:
    text: str  # new text since the previous delta; stop sequences are cut, partial UTF-8 held back
    token_ids: tuple[int, ...] = ()  # the generated tokens this delta accounts for (may be several)
    logprobs: tuple[TokenLogprob, ...] = ()  # one per token in token_ids when params.logprobs
    finish_reason: FinishReason | None = None  # set on the last delta only
    stats: Mapping[str, Any] = field(default_factory=dict)  # last delta: e.g. speculative figures


class Engine:
    """One loaded model. Not thread-safe: the server calls it from a single worker thread."""

    name: str  # model name reported by /v1/models
    max_context: int  # prompt + generated tokens at most

    @classmethod
    def load(cls, path: Path, *, dtype: str = "float32", max_context: int | None = None) -> Engine:
        raise NotImplementedError

    def encode(self, text: str) -> list[int]:
        raise NotImplementedError

    def chat_prompt(self, messages: list[dict[str, Any]]) -> list[int]:
        """Apply the checkpoint's chat template (with the generation prompt) and tokenize."""
        raise NotImplementedError

    def generate(
        self, prompt_ids: list[int], params: SamplingParams, cancel: threading.Event | None = None
    ) -> Iterator[Delta]:
        """Yield deltas as tokens are accepted; the last one carries finish_reason. Checks ``cancel``
        between tokens and stops with finish_reason "cancelled" when it is set."""
        raise NotImplementedError

    def score(self, prompt_ids: list[int], top_logprobs: int = 0) -> list[TokenLogprob | None]:
        """Teacher-forced log-probabilities of each prompt token given its prefix (None for the first)."""
        raise NotImplementedError
