"""`lossless inspect` against llama.cpp's OpenAI server (llama-cpp-python) on the embedded GGUF: plain,
and with its prompt-lookup drafter (``--draft_model`` -> ``LlamaPromptLookupDecoding``).

That server streams no usage (tokens are counted with the GGUF its /v1/models lists, as bench counts
them), has no /metrics, and streams token by token even when it speculates: an accepted draft shows as
tokens with next to no time between them, not as one chunk."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from third_party import LlamaCppServer

from lossless.cli.inspect import inspect

pytestmark = pytest.mark.slow
LIMIT_S = 180.0
# 4 drafted tokens, not the server's default 10: its lookup matches single tokens too, so nearly every
# step verifies a full draft, and with 10 the prompt-lookup card took 205 s on 2 busy cores (4 rounds)
PROMPT_LOOKUP = ("--draft_model", "prompt-lookup-decoding", "--draft_model_num_pred_tokens", "4")


def inspected(server: LlamaCppServer) -> tuple[dict[str, Any], float]:
    start = time.monotonic()
    result = CliRunner().invoke(inspect, [server.url, "--model", "smol", "--json", "--no-precision"])
    wall = time.monotonic() - start
    assert result.exit_code == 0, result.stderr
    (card,) = json.loads(result.stdout)["cards"]
    return card, wall


@pytest.mark.parametrize(
    ("extra", "verdict", "drafter"),
    [((), "not evident", None), (PROMPT_LOOKUP, "evident", "n-gram (prompt lookup)")],
    ids=["plain", "prompt-lookup"],
)
def test_inspect_tells_how_llama_cpp_decodes(
    smollm2_path: Path, extra: tuple[str, ...], verdict: str, drafter: str | None
) -> None:
    # one thread (the helper's default): llama.cpp's threads spin while they wait for each other, and with
    # two on 2 cores shared with other work one request took ~10 s instead of ~1.5 s
    with LlamaCppServer(smollm2_path, extra=extra) as server:
        card, wall = inspected(server)
    spec = card["speculative_decoding"]
    print(f"\nllama.cpp {extra or 'plain'}: {wall:.0f} s, {card['budget']}, {spec['note']}")
    assert spec["verdict"] == verdict, spec["note"]
    assert spec["drafter"] == drafter
    assert spec["evidence"]["counters"] == "no /metrics"
    assert wall < LIMIT_S
    who = card["identity"]
    assert (who["verdict"], who["family"]) == ("evident", "smollm2")
    assert who["context_limit"] is None  # its /v1/models declares none
    assert list(who["headers"]["server"]) == ["uvicorn"]
