"""A request's prompt -> token ids, checked against the context in the handler, before the job queues.

``tokenizers``' ``encode`` holds the GIL (a 1 MB prompt: ~0.5 s in which no other thread runs, the
event loop included, so a thread alone does not help); its ``encode_batch`` releases it. Long prompts are
therefore tokenized with ``encode_batch`` in a thread. A prompt whose length alone proves it cannot fit
is refused without being tokenized: no token stands for more than ``max_token_bytes`` bytes of text.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace

from lossless.engine.engine import Engine
from lossless.engine.model.sampling import SamplingParams
from lossless.server.openai.protocol import ApiRequest, InvalidRequest, context_exceeded

LONG_PROMPT_CHARS = 8192  # tokenized in a thread beyond this (~2k tokens, ~3 ms); shorter ones inline
# The length bound is exact for byte-level BPE; the margin covers tokenizers that normalize text first.
_BOUND_MARGIN = 2


@dataclass(frozen=True)
class TokenizedPrompt:
    ids: list[int]
    text: str  # for echo; "" when not needed


def max_token_bytes(engine: Engine) -> int:
    """The most UTF-8 bytes one token's text has (81 for SmolLM2: a newline and 80 spaces)."""
    tokenizer = engine.tokenizer
    return max((len(tokenizer.token_bytes(i)) for i in range(tokenizer.vocab_size)), default=1)


async def tokenize(engine: Engine, req: ApiRequest, token_bytes: int) -> TokenizedPrompt:
    if prompt_chars(req) > LONG_PROMPT_CHARS:
        return await asyncio.to_thread(_tokenize, engine, req, token_bytes)
    return _tokenize(engine, req, token_bytes)


def prompt_chars(req: ApiRequest) -> int:
    return sum(len(m["content"]) for m in req.messages) + len(req.prompt)


def _tokenize(engine: Engine, req: ApiRequest, token_bytes: int) -> TokenizedPrompt:
    if req.api == "chat":
        try:
            text = engine.tokenizer.apply_chat_template([dict(m) for m in req.messages])
        except Exception as exc:  # a template may raise anything (jinja's TemplateError, our UsageError)
            message = str(exc) if len(str(exc)) <= 200 else str(exc)[:197] + "..."
            raise InvalidRequest(
                f"messages could not be rendered with the model's chat template: {message}", param="messages"
            ) from exc
        # the template writes its own special tokens: the tokenizer must not add a BOS on top
        return TokenizedPrompt(_encode(engine, text, token_bytes, add_special=False, param="messages"), "")
    if isinstance(req.prompt, str):
        return TokenizedPrompt(
            _encode(engine, req.prompt, token_bytes, add_special=True, param="prompt"), req.prompt
        )
    ids = list(req.prompt)
    if len(ids) > engine.max_context:  # before decoding them for echo, which holds the GIL
        raise context_exceeded(engine.max_context, str(len(ids)), "prompt")
    vocab = engine.args.vocab_size
    if max(ids) >= vocab:
        raise InvalidRequest(f"a token id is outside the vocabulary (0..{vocab - 1})", param="prompt")
    return TokenizedPrompt(ids, engine.decode(ids) if req.echo else "")


def _encode(engine: Engine, text: str, token_bytes: int, *, add_special: bool, param: str) -> list[int]:
    if len(text) > _BOUND_MARGIN * token_bytes * engine.max_context:
        raise context_exceeded(engine.max_context, f"more than {len(text) // token_bytes}", param)
    backend = getattr(engine.tokenizer, "backend", None)
    if backend is None or not hasattr(backend, "encode_batch"):
        return engine.tokenizer.encode(text, add_special=add_special)
    ids: list[int] = backend.encode_batch([text], add_special_tokens=add_special)[0].ids
    return ids


def fit_context(req: ApiRequest, prompt: TokenizedPrompt, max_context: int) -> SamplingParams:
    """The request's sampling parameters with max_tokens clamped to the room the prompt leaves."""
    param = "messages" if req.api == "chat" else "prompt"
    if not prompt.ids:
        raise InvalidRequest("the prompt is empty", param=param)
    room = max_context - len(prompt.ids)
    wants = req.max_tokens
    if room < 0 or (room == 0 and wants != 0):
        raise context_exceeded(max_context, str(len(prompt.ids)), param)
    # Asking for more than the context holds is clamped (finish_reason "length") rather than refused.
    return replace(req.params, max_tokens=room if wants is None else min(wants, room))
