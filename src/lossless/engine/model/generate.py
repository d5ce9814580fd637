"""Generation, gpt-fast style: ``prefill``, ``decode_one_token`` and one loop that turns tokens into text.

The seam for other token sources (the speculative decoder): a *token source* is an iterator of
``Accepted`` batches - the token ids it has committed, in order, each with the unwarped logits it was
drawn from. ``generate_text`` consumes any such iterator and alone (through ``TextAssembler``, which a
batch of sequences drives directly, `batch.decode`) handles detokenization, stop sequences, eos,
max_tokens, the context limit, logprobs and cancellation. It stops pulling as soon as it has enough, so
a source should do its forward passes lazily (inside ``next``), and may commit more tokens in a batch
than are wanted: the surplus is dropped. ``plain_tokens`` below is the one-token-per-step source; a
speculative source yields 1..k+1 tokens a step the same way.

What comes out, ``Delta`` (with ``TokenLogprob`` and ``FinishReason``), is defined here, where it is made.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import torch
from torch import Tensor

from lossless.engine.model.constrain import Constraint
from lossless.engine.model.sampling import SamplingParams, sample, warp
from lossless.engine.model.tokenizer import Tokenizer
from lossless.engine.model.transformer import Transformer

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


@dataclass(frozen=True)
class Accepted:
    token_ids: list[int]  # committed tokens, in order
    logits: Tensor  # [n, V] float32: the unwarped logits each token was drawn from (logprobs; a grammar's
    # forbidden tokens at -inf, so constrained logprobs are under the masked, renormalised distribution)


@torch.inference_mode()
def prefill(model: Transformer, tokens: list[int], start_pos: int = 0) -> Tensor:
    """Run ``tokens`` at positions start_pos.. into the KV cache -> the last position's logits [V]."""
    x = torch.tensor([tokens], dtype=torch.long)  # [1, T]
    pos = torch.arange(start_pos, start_pos + len(tokens))  # [T]
    hidden = model(x, pos, return_hidden=True, prompt=True)  # [1, T, dim]
    # only the last position is sampled from: skip the vocabulary matmul for the others
    return model.output(hidden[0, -1]).float()  # [V]


@torch.inference_mode()
def decode_one_token(model: Transformer, token: int, pos: int) -> Tensor:
    """One step: ``token`` at position ``pos`` -> next-token logits [V]."""
    x = torch.tensor([[token]], dtype=torch.long)  # [1, 1]
    return model(x, torch.tensor([pos]))[0, -1].float()  # [V]


def plain_tokens(
    model: Transformer,
    prompt_ids: list[int],
    params: SamplingParams,
    generator: torch.Generator,
    constraint: Constraint | None = None,
) -> Iterator[Accepted]:
    """The plain token source: one forward pass, one sampled token, forever (the consumer stops it).
    Under a ``constraint`` the tokens it forbids are masked out (-inf) before the warp."""
    logits = prefill(model, prompt_ids)
    pos = len(prompt_ids)
    while True:
        if constraint is not None:
            logits = constraint.mask(logits)
        token = choose(logits, params, generator)
        if constraint is not None:
            constraint.advance(token)
        yield Accepted([token], logits[None])
        logits = decode_one_token(model, token, pos)
        pos += 1


def choose(logits: Tensor, params: SamplingParams, generator: torch.Generator) -> int:
    # logits: [V]; greedy skips the warp and the generator (argmax ties: the lowest id, as warp does)
    if params.greedy:
        return int(logits.argmax())
    return sample(warp(logits, params.temperature, params.top_k, params.top_p), generator)


def generate_text(
    source: Iterator[Accepted],
    tokenizer: Tokenizer,
    params: SamplingParams,
    *,
    budget: int,
    cancel: threading.Event | None = None,
) -> Iterator[Delta]:
    """Tokens from ``source`` -> text deltas; ``budget``: tokens allowed (max_tokens within the context).

    A delta is yielded once it has text to show (or at the end), carrying the tokens since the last one.
    """
    text = TextAssembler(tokenizer, params, budget)
    try:
        while text.finish is None:
            if cancel is not None and cancel.is_set():
                text.finish = "cancelled"
                break
            batch = next(source, None)
            if batch is None:  # a source may end by itself (e.g. its own token limit)
                text.finish = "length"
                break
            if (delta := text.add(batch)) is not None:
                yield delta
    finally:
        close = getattr(source, "close", None)
        if close is not None:
            close()
    yield text.last()


class TextAssembler:
    """One generation's tokens -> its text deltas: detokenization, stop sequences, eos, the token budget
    and logprobs. ``generate_text`` drives one from a token source; a batch (`batch.decode`) drives one
    per sequence, a step at a time. ``finish`` is set once the generation must end."""

    def __init__(self, tokenizer: Tokenizer, params: SamplingParams, budget: int) -> None:
        self.tokenizer, self.params, self.budget = tokenizer, params, budget
        self.text = _StopText(params.stop)
        self.decoder = tokenizer.decoder()
        self.ids: list[int] = []  # tokens since the last delta
        self.logprobs: list[TokenLogprob] = []
        self.n_out, self.start = 0, time.perf_counter()
        self.finish: FinishReason | None = "length" if budget <= 0 else None

    def add(self, batch: Accepted) -> Delta | None:
        """Take a source's committed tokens (past the end: dropped); a delta when there is text to show."""
        params = self.params
        for j, token in enumerate(batch.token_ids):
            if self.finish is not None:
                break
            self.n_out += 1
            self.ids.append(token)
            if params.logprobs:
                logprob = token_logprob(batch.logits[j], token, params.top_logprobs, self.tokenizer)
                self.logprobs.append(logprob)
            eos = token in self.tokenizer.eos_ids and not params.ignore_eos
            if eos or self.text.add(self.decoder.feed([token])):
                self.finish = "stop"
            elif self.n_out >= self.budget:
                self.finish = "length"
        if self.finish is None and self.text.ready():
            delta = Delta(self.text.take(), tuple(self.ids), tuple(self.logprobs))
            self.ids, self.logprobs = [], []
            return delta
        return None

    def last(self) -> Delta:
        """The final delta: what is left of the text, with ``finish`` and the figures."""
        assert self.finish is not None, "the generation has not ended"
        if not self.text.stopped:  # an incomplete character at the very end shows as U+FFFD, as decode does
            self.text.add(self.decoder.flush())
        stats = {"completion_tokens": self.n_out, "decode_s": time.perf_counter() - self.start}
        text = self.text.take(final=True)
        return Delta(text, tuple(self.ids), tuple(self.logprobs), finish_reason=self.finish, stats=stats)


class _StopText:
    """Generated text, released as soon as no stop sequence could still begin inside it."""

    def __init__(self, stops: tuple[str, ...]) -> None:
        self.stops = tuple(s for s in stops if s)
        self.text = ""
        self.sent = 0  # text[:sent] has been released
        self.stopped = False

    def add(self, piece: str) -> bool:
        """Append; True when a stop sequence is now complete (the text is cut before it)."""
        if self.stopped or not piece:
            return self.stopped
        self.text += piece
        # a stop can only begin at or after `sent`: anything that might have begun earlier was held
        hits = [i for i in (self.text.find(s, self.sent) for s in self.stops) if i >= 0]
        if hits:
            self.text, self.stopped = self.text[: min(hits)], True
        return self.stopped

    def _held(self) -> int:
        # the longest suffix of the text that is a proper prefix of some stop sequence
        tail = self.text[self.sent :]
        for n in range(min(len(tail), max((len(s) for s in self.stops), default=0)), 0, -1):
            if any(s.startswith(tail[-n:]) for s in self.stops):
                return n
        return 0

    def ready(self) -> bool:
        return len(self.text) - self._held() > self.sent

    def take(self, final: bool = False) -> str:
        end = len(self.text) if final or self.stopped else len(self.text) - self._held()
        out, self.sent = self.text[self.sent : end], max(self.sent, end)
        return out


def token_logprob(logits: Tensor, token: int, top: int, tokenizer: Tokenizer) -> TokenLogprob:
    """logits: [V] unwarped -> the token's log-probability and the ``top`` most likely alternatives."""
    logp = torch.log_softmax(logits.float(), dim=-1)  # [V]
    alts: tuple[tuple[int, str, float], ...] = ()
    if top > 0:
        values, indices = logp.topk(min(top, logp.shape[-1]))
        alts = tuple(  # a grammar's mask leaves -inf behind: those are no alternatives
            (int(i), tokenizer.token_text(int(i)), float(v))
            for v, i in zip(values, indices, strict=True)
            if v > float("-inf")
        )
    return TokenLogprob(token, tokenizer.token_text(token), float(logp[token]), alts)


@torch.inference_mode()
def score_tokens(
    model: Transformer, ids: list[int], top: int, tokenizer: Tokenizer
) -> list[TokenLogprob | None]:
    """Teacher forcing: log p(ids[i] | ids[:i]) for every i > 0, from one forward pass over ``ids`` in the
    model's own numerics (those every generated token but the first is drawn from), never a prompt twin's."""
    x = torch.tensor([ids], dtype=torch.long)  # [1, T]
    hidden = model(x, torch.arange(len(ids)), return_hidden=True)[0]  # [T, dim]
    out: list[TokenLogprob | None] = [None]
    chunk = 256  # the vocabulary projection of a long prompt, a slice at a time: [chunk, V] at most
    for lo in range(0, len(ids) - 1, chunk):
        logits = model.output(hidden[lo : lo + chunk]).float()  # [c, V]; row r predicts ids[lo + r + 1]
        for r in range(logits.shape[0]):
            if lo + r + 1 < len(ids):
                out.append(token_logprob(logits[r], ids[lo + r + 1], top, tokenizer))
    return out
