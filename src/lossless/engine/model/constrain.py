"""Constrained decoding: a grammar masks the target's distribution, token by token.

The grammar library is **llguidance** (MIT, guidance-ai; a backend of vLLM and SGLang, and llama.cpp's
optional one), chosen by measurement on SmolLM2's 49,152-token vocabulary against xgrammar 0.2.9 and
outlines-core 0.2.14 (benchmarks/grammar_libraries.py; a 2-core CPU shared with other work, so the
spread is wide):

| | vocabulary view | compile a 3-field JSON schema | advance + mask per token (median / max) |
|---|---|---|---|
| llguidance 1.9.1 | 180-420 ms | 0.8-1.1 ms (lazy: no per-schema table) | 0.04-0.06 / 0.3-2.3 ms |
| xgrammar 0.2.9 | 20-30 ms | 7-13 ms (1 thread) | 0.005-0.011 / 0.15-0.3 ms |
| outlines-core 0.2.14 | 150-340 ms | 30-56 ms (a DFA index over the vocabulary) | 0.001 / 1.2-1.5 ms |

All are far below a decode step (~30 ms) and the vocabulary view is built once per server, so speed does
not decide. What does:
- llguidance reads our tokenizer as the ``tokenizers`` JSON it is and knows its control tokens: inside a
  JSON string it refuses ``<|im_start|>`` and company, and after the object it allows only the end of
  turn. Handed the same token bytes, xgrammar allowed 15 of the 17 control tokens inside a string (it
  takes their text for plain bytes): the output could hold tokens that detokenize to nothing.
  outlines-core has no notion of them at all (the benchmark leaves them out of its vocabulary);
- ``LLMatcher.rollback(n)`` undoes the last n tokens: what speculative verification needs (outlines-core
  has no rollback; xgrammar has one);
- its Lark front end embeds a JSON schema in surrounding text (``%json{...}``): the tool-call tags;
- it has no Python dependencies, where xgrammar brings triton, transformers and pydantic into the
  environment (with triton installed, every test run here ended in nanobind leak reports).

Exactness: a ``Constraint`` gives the set of tokens the grammar allows next; the decoders set every
other token's logit to -inf *before* the warp, so the target distribution p is renormalised over the
allowed tokens, and speculative decoding judges drafts against that p (a draft token outside the
mask has p = 0 and is rejected with probability 1). The grammar advances over emitted tokens only.
"""

from __future__ import annotations

import json
import threading
import weakref
from typing import Any

import torch
from torch import Tensor

from lossless.engine.model.tokenizer import Tokenizer
from lossless.errors import UsageError

# Tokenizer -> its llguidance.LLTokenizer, built once (~0.2 s for 49k tokens); gone with the tokenizer
_TOKENIZERS: weakref.WeakKeyDictionary[Tokenizer, Any] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def warm(tokenizer: Tokenizer) -> None:
    """Build the grammar library's view of ``tokenizer`` now, so that no request pays for it."""
    _ll_tokenizer(tokenizer)


def _ll_tokenizer(tokenizer: Tokenizer) -> Any:
    import llguidance

    with _LOCK:
        ll = _TOKENIZERS.get(tokenizer)
        if ll is None:
            # the end of a constrained output: the chat end-of-turn token when there is one
            eos = max(tokenizer.eos_ids) if tokenizer.eos_ids else None
            ll = llguidance.LLTokenizer(
                tokenizer.backend.to_str(), n_vocab=tokenizer.vocab_size, eos_token=eos
            )
            _TOKENIZERS[tokenizer] = ll
        return ll


# One spelling of JSON, the one json.dumps writes: with flexible whitespace a small model can pad with
# blanks until max_tokens and never close the object.
JSON_STYLE = {"whitespace_flexible": False, "item_separator": ", ", "key_separator": ": "}


def json_schema_grammar(schema: dict[str, Any]) -> str:
    """A JSON schema -> an llguidance grammar (its serialised form, passed around as a string)."""
    import llguidance

    return str(llguidance.LLMatcher.grammar_from_json_schema(schema, overrides=JSON_STYLE))  # type: ignore[arg-type]


def lark_grammar(lark: str) -> str:
    """A Lark grammar (llguidance's dialect: ``%json{...}`` embeds a JSON schema) -> a grammar."""
    import llguidance

    return str(llguidance.LLMatcher.grammar_from_lark(lark))


def tagged_json_grammar(before: str, schema: dict[str, Any], after: str) -> str:
    """Text ``before``, a JSON value valid against ``schema`` (written as `JSON_STYLE` says), ``after``."""
    styled = {**schema, "x-guidance": JSON_STYLE}
    return lark_grammar(f"start: {json.dumps(before)} %json {json.dumps(styled)} {json.dumps(after)}")


def grammar_error(grammar: str) -> str | None:
    """Why a grammar cannot be used (an unsupported schema keyword, say), or None when it can."""
    import llguidance

    message = llguidance.LLMatcher.validate_grammar(grammar)
    return message or None


class Constraint:
    """One request's grammar state: what may come next, advanced over emitted tokens, rolled back."""

    def __init__(self, grammar: str, tokenizer: Tokenizer, vocab_size: int) -> None:
        import llguidance

        self._matcher = llguidance.LLMatcher(_ll_tokenizer(tokenizer), grammar)
        if self._matcher.is_error():
            raise UsageError(f"the grammar does not compile: {self._matcher.get_error()}")
        self.vocab_size = vocab_size  # the model's logits (may exceed the tokenizer's)
        self._eos = sorted(i for i in tokenizer.eos_ids if i < vocab_size)
        self._words = (vocab_size + 31) // 32
        self._bits = torch.arange(32, dtype=torch.int32)

    def allowed(self) -> Tensor:
        """[V] bool: the tokens the grammar allows next."""
        words = torch.frombuffer(bytearray(self._matcher.compute_bitmask()), dtype=torch.int32)
        bits = (words[: self._words, None] >> self._bits) & 1  # [W, 32]
        allowed = bits.reshape(-1)[: self.vocab_size].bool()
        if len(allowed) < self.vocab_size:  # logits past the tokenizer's vocabulary: never allowed
            allowed = torch.cat([allowed, allowed.new_zeros(self.vocab_size - len(allowed))])
        if not allowed.any():  # a grammar in error allows nothing: end the output rather than sample NaNs
            allowed[self._eos] = True
        return allowed

    def mask(self, logits: Tensor) -> Tensor:
        """logits: [V] -> the same with every token the grammar forbids at -inf (a new tensor)."""
        return logits.masked_fill(~self.allowed(), float("-inf"))

    def advance(self, token: int) -> bool:
        """Consume one token; False (and nothing consumed) when the grammar forbids it."""
        return bool(self._matcher.try_consume_tokens([token]) == 1)

    def rollback(self, n: int) -> None:
        if n > 0 and not self._matcher.rollback(n):
            raise RuntimeError(f"the grammar could not roll back {n} tokens: {self._matcher.get_error()}")

    def reset(self) -> None:
        """Back to the grammar's start (a new output under the same grammar, without compiling it again)."""
        if not self._matcher.reset():
            raise RuntimeError(f"the grammar could not be reset: {self._matcher.get_error()}")

    def done(self) -> bool:
        return bool(self._matcher.is_stopped())


def masked_rows(constraint: Constraint, logits: Tensor, tokens: list[int]) -> tuple[Tensor, int]:
    """A chain's verification: logits [k+1, V] over [pending, x_1..x_k] -> the rows masked by the
    grammar state before each x_i (and after all of them), and m, the draft tokens consumed.

    Row i needs the state after x_1..x_i, so the grammar walks the draft. It stops at the first
    token it forbids: that token has p = 0 and is rejected for sure, so the rows after it are never
    read (they keep the last mask; any value would do). The caller rolls back what is not emitted.
    """
    rows = [constraint.mask(logits[0])]
    consumed = 0
    for i, token in enumerate(tokens):
        if not constraint.advance(token):
            rows.extend(rows[-1] for _ in range(len(tokens) - i))
            break
        consumed += 1
        rows.append(constraint.mask(logits[i + 1]))
    return torch.stack(rows), consumed
