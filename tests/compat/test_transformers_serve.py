"""bench, probe and verify against Hugging Face ``transformers serve`` on a folder of the embedded model.

What this server does its own way: usage rides on the last content chunk, streams end without
[DONE], unknown request fields are refused (422), echo and logprobs are silently ignored, and it
samples only when the checkpoint's generation_config says do_sample (else every request is greedy).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from third_party import TransformersServer

from lossless.cli import main

pytestmark = pytest.mark.slow
SMALL = "4x6x16"  # 4 prompts x 6 samples x 16 tokens (and the default 24 tasks): transformers is slow


def run(*args: str) -> tuple[int, Any]:
    result = CliRunner().invoke(main, [*args, "--json"])
    assert "Traceback" not in result.stderr, result.stderr
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip() else None


def test_bench_reads_usage_from_the_last_content_chunk(tf_a: TransformersServer) -> None:
    code, summary = run("bench", tf_a.url, "--model", tf_a.model_id, "--requests", "3", "--max-tokens", "24")
    assert code == 0
    (entry,) = summary["endpoints"]
    assert entry["requests"]["ok"] == 3
    assert entry["n_out_sources"] == {"usage": 3}
    assert entry["output_tps"]["n"] == 3 and entry["ttft_ms"]["p50"] > 0
    assert entry["served_by"]["model"] == {tf_a.model_id: 3}


def test_probe_tells_a_greedy_only_server_from_a_sampling_one(
    tf_a: TransformersServer, tf_greedy: TransformersServer
) -> None:
    verdicts = {}
    for name, server in (("sampling", tf_a), ("greedy", tf_greedy)):
        code, doc = run(
            "probe", server.url, "--model", server.model_id, "--repeats", "2", "--max-tokens", "8"
        )
        assert code == 0
        verdicts[name] = {c["name"]: c["verdict"] for c in doc["checks"]}
    assert verdicts["sampling"]["temperature=1 samples"] == "honoured"
    assert verdicts["greedy"]["temperature=1 samples"] == "ignored"
    assert verdicts["sampling"]["unknown field lossless_canary_field"] == "rejected"  # its 422
    assert verdicts["sampling"]["max_tokens=5"] == "honoured"


def test_verify_same_model_is_equivalent(tf_a: TransformersServer, tf_b: TransformersServer) -> None:
    code, doc = run("verify", tf_a.url, tf_b.url, "--model", tf_a.model_id, "--budget", SMALL)
    assert (doc["verdict"], code) == ("equivalent", 0), doc["reasons"]
    # echo and logprobs are ignored: no scoring, characters instead of tokens, and it said so
    assert doc["capabilities"]["baseline"] == {
        "neutral_sampler": False,
        "token_logprobs": False,
        "scoring_top": None,
    }
    assert doc["greedy"]["candidate_match"] == 1.0


def test_verify_flags_a_server_that_does_not_sample(
    tf_a: TransformersServer, tf_greedy: TransformersServer
) -> None:
    code, doc = run(
        "verify",
        tf_a.url,
        tf_greedy.url,
        "--model",
        tf_a.model_id,
        "--candidate-model",
        tf_greedy.model_id,
        "--budget",
        SMALL,
        "--api",
        "chat",
    )
    assert (doc["verdict"], code) == ("different", 1), doc["reasons"]
    assert any("does not sample" in note for note in doc["notes"]), doc["notes"]
