"""What one request asks, whichever API carries it: chat turns, a token budget, and for token-exact
workloads the lengths asked for. Workloads make these (``bench.workload``); ``openai.request_body``
turns one into a request body."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Prompt:
    id: str  # stable across endpoints, e.g. "short-3"
    cls: str  # suite label used to group results: "short", "long", "len-1k", "file"
    messages: tuple[tuple[str, str], ...]  # (role, content) chat turns
    max_tokens: int | None = None  # overrides --max-tokens for this prompt
    input_tokens: int | None = None  # token-exact workloads: the prompt tokens the server should count
    output_tokens: int | None = None  # ... and the output tokens asked for
    force_output: bool = False  # ask the server to generate through end-of-sequence (ignore_eos)

    @property
    def text(self) -> str:  # the completions-API prompt
        return "\n\n".join(content for _, content in self.messages)
