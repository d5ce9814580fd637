"""Which grammar library constrains our decoding? (A benchmark, not a test; the choice is explained in
src/lossless/engine/model/constrain.py.)

    pip install llguidance xgrammar outlines-core   # into a throw-away environment: xgrammar pulls
    python benchmarks/grammar_libraries.py          # triton, transformers and pydantic with it

On SmolLM2's own tokenizer (49,152 tokens, read through lossless's Tokenizer, each token's bytes), for
each library found: the time to build its view of the vocabulary, to compile a small JSON schema, and
to advance and compute the next-token mask while stepping through a valid answer (median and max over
its tokens), then whether the mask keeps the control tokens (``<|im_start|>`` and company) out of a JSON
string and what it allows once the object is closed. A library that is not installed is skipped.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from typing import Any

SCHEMA = {
    "type": "object",
    "properties": {
        "city": {"type": "string"},
        "unit": {"type": "string", "enum": ["c", "f"]},
        "days": {"type": "integer"},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
ANSWER = '{"city": "Paris", "unit": "c", "days": 3}'
IN_STRING = '{"city": "Pa'


def bits(words: Any, vocab: int) -> list[bool]:
    flat = [int(w) & 0xFFFFFFFF for w in words.reshape(-1).tolist()]
    return [bool((flat[i // 32] >> (i % 32)) & 1) for i in range(vocab)]


def run_llguidance(tok: Any, vocab: list[bytes]) -> dict[str, Any]:
    import llguidance
    import llguidance.torch as lt

    start = time.perf_counter()
    info = llguidance.LLTokenizer(tok.backend.to_str(), n_vocab=len(vocab), eos_token=max(tok.eos_ids))
    built = time.perf_counter() - start
    start = time.perf_counter()
    matcher = llguidance.LLMatcher(info, llguidance.LLMatcher.grammar_from_json_schema(SCHEMA))
    compiled = time.perf_counter() - start
    mask = lt.allocate_token_bitmask(1, len(vocab))

    def step(token: int | None) -> Any:
        if token is not None:
            assert matcher.consume_token(token), matcher.get_error()
        lt.fill_next_token_bitmask(matcher, mask, 0)
        return lambda: mask

    return {"build_s": built, "compile_s": compiled, "step": step, "reset": matcher.reset}


def run_xgrammar(tok: Any, vocab: list[bytes]) -> dict[str, Any]:
    import xgrammar as xgr

    start = time.perf_counter()
    info = xgr.TokenizerInfo(
        vocab, vocab_type=xgr.VocabType.RAW, vocab_size=len(vocab), stop_token_ids=sorted(tok.eos_ids)
    )
    built = time.perf_counter() - start
    start = time.perf_counter()
    matcher = xgr.GrammarMatcher(
        xgr.GrammarCompiler(info, max_threads=1).compile_json_schema(json.dumps(SCHEMA))
    )
    compiled = time.perf_counter() - start
    mask = xgr.allocate_token_bitmask(1, len(vocab))

    def step(token: int | None) -> Any:
        if token is not None:
            assert matcher.accept_token(token)
        matcher.fill_next_token_bitmask(mask)
        return lambda: mask

    return {"build_s": built, "compile_s": compiled, "step": step, "reset": matcher.reset}


def run_outlines_core(tok: Any, vocab: list[bytes]) -> dict[str, Any]:
    import torch
    from outlines_core import Index, Vocabulary
    from outlines_core.json_schema import build_regex_from_schema

    start = time.perf_counter()
    by_bytes: dict[bytes, list[int]] = {}
    for i, b in enumerate(vocab):
        if b and i not in tok.special_ids:  # it has no notion of control tokens: leave them out
            by_bytes.setdefault(b, []).append(i)
    info = Vocabulary(max(tok.eos_ids), by_bytes)
    built = time.perf_counter() - start
    start = time.perf_counter()
    index = Index(build_regex_from_schema(json.dumps(SCHEMA)), info)
    compiled = time.perf_counter() - start
    state = [index.get_initial_state()]

    def step(token: int | None) -> Any:
        if token is not None:
            state[0] = index.get_next_state(state[0], token)
        ids = index.get_allowed_tokens(state[0]) or []
        return lambda: as_words(ids)  # its list of ids -> a bitmask, outside the timing

    def as_words(ids: list[int]) -> Any:
        allowed = torch.zeros((len(vocab) + 31) // 32 * 32, dtype=torch.int64)
        allowed[ids] = 1
        return (allowed.reshape(-1, 32) << torch.arange(32)).sum(-1)

    def reset() -> None:
        state[0] = index.get_initial_state()

    return {"build_s": built, "compile_s": compiled, "step": step, "reset": reset}


LIBRARIES: dict[str, Callable[[Any, list[bytes]], dict[str, Any]]] = {
    "llguidance": run_llguidance,
    "xgrammar": run_xgrammar,
    "outlines-core": run_outlines_core,
}


def main() -> None:
    from lossless.engine.engine import Engine
    from lossless.models import resolve

    tok = Engine.load(resolve()).tokenizer
    vocab = [tok.token_bytes(i) for i in range(tok.vocab_size)]
    answer, in_string = (tok.encode(t, add_special=False) for t in (ANSWER, IN_STRING))
    control = sorted(tok.special_ids)
    print(f"{tok.vocab_size} tokens; answer: {len(answer)} tokens")
    for name, run in LIBRARIES.items():
        try:
            lib = run(tok, vocab)
        except ImportError:
            print(f"{name}: not installed")
            continue
        times = []
        for token in [None, *answer]:
            start = time.perf_counter()
            end_mask = lib["step"](token)  # the library's own work

            times.append(time.perf_counter() - start)
        at_end = [i for i, ok in enumerate(bits(end_mask(), len(vocab))) if ok]
        lib["reset"]()
        for token in in_string:
            mask = lib["step"](token)
        inside = bits(mask(), len(vocab))
        print(
            f"{name}: vocabulary {lib['build_s'] * 1e3:.0f} ms, schema {lib['compile_s'] * 1e3:.1f} ms, "
            f"mask median {statistics.median(times) * 1e3:.3f} ms max {max(times) * 1e3:.3f} ms; "
            f"control tokens allowed inside a string: {sum(inside[i] for i in control)}/{len(control)}; "
            f"allowed after the object: {at_end[:5]}"
        )


if __name__ == "__main__":
    main()
