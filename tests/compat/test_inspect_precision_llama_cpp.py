"""Precision (claim 2 of `lossless inspect`) against llama.cpp's server (llama-cpp-python), whose echoed
log-probabilities sit one token off, so each token is read from the alternatives its position lists
(``per-position``): a Q2_K copy of the embedded GGUF as the candidate, llama.cpp on the same GGUF and on
another Q2_K server as references -> placed at Q2_K.

Two of the texts only: that server's echo costs ~0.2 s a token on 2 busy cores (it sorts the whole
vocabulary at every position in Python; four texts took 144 s), and the 2-bit copy is far from the
4-bit file (0.46 nats/token over four texts, CI 0.37-0.55)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from third_party import LlamaCppServer

from lossless.client.endpoints import Endpoint
from lossless.inspect import precision

pytestmark = pytest.mark.slow
TEXTS = tuple(precision.TEXTS[i] for i in (4, 6))  # the two shortest: 81 tokens


def test_a_q2_k_copy_is_placed_at_q2_k(
    llama_a: LlamaCppServer, llama_q2k: LlamaCppServer, q2k_path: Path
) -> None:
    with LlamaCppServer(q2k_path) as other_q2k:
        refs = {"Q4_1": llama_a, "Q2_K": other_q2k}
        scored = {
            n: asyncio.run(precision.score(Endpoint(n, s.url, "smol"), texts=TEXTS))[0]
            for n, s in refs.items()
        }
    first, second = asyncio.run(precision.score(Endpoint("cand", llama_q2k.url, "smol"), 2, TEXTS))
    got = precision.judge(first, second, scored)
    print(f"\nllama.cpp Q2_K: {got.as_dict()}")  # docs/results/2026-12-02-inspect.md's figures
    assert got.method == "per-position" and got.texts == len(TEXTS)
    assert got.verdict == "evident" and got.nearest == "Q2_K", got.note
    assert got.bit_identical is True
