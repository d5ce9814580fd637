"""Every command against llama.cpp's own C++ server, ``llama-server`` (built by ``make llama-cpp`` from the
pinned llama-cpp-python sdist's vendored llama.cpp), on the embedded GGUF: the server llama.cpp's users run.

What it does its own way, and what each test leans on: usage in every stream's last chunk and its own
``timings`` object (prompt and decode ms) in every chat and completions answer; Prometheus counters on
``/metrics`` with ``--metrics`` (``llamacpp:*``, the speculative ones with ``_total``); all four APIs;
``echo`` ignored (no teacher forcing: its log-probabilities come with the answers it generates, in
chat's shape even on /completions); a connection closed after each streamed answer though its headers
say keep-alive; and, with ``--spec-type``, n-gram drafting counted on /metrics.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from third_party import LlamaServer, LosslessServer

from lossless.cli import main

pytestmark = pytest.mark.slow


def run(*args: str) -> tuple[int, Any]:
    result = CliRunner().invoke(main, [*args, "--json"])
    assert "Traceback" not in result.stderr, result.stderr
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip() else None


@pytest.mark.parametrize("api", ["chat", "completions", "responses", "messages"])
def test_bench_reads_its_usage_timings_and_metrics_in_every_api(llama_server: LlamaServer, api: str) -> None:
    code, summary = run("bench", llama_server.url, "--model", "smol", "--requests", "6", "--api", api)
    assert code == 0
    (entry,) = summary["endpoints"]
    # 6 of 6: each request after a streamed answer finds its pooled connection closed by the server and
    # goes out on a new one (client/http.py); before that, every second one failed
    assert entry["requests"] == {"ok": 6, "failed": 0, "cancelled": 0, "attempts": 6, "errors": {}}
    assert entry["n_out_sources"] == {"usage": 6}
    # a raw prompt may be answered by an end-of-text at once (no token, so no TTFT): some must not be
    for metric in ("ttft_ms", "tpot_ms", "output_tps"):
        assert entry[metric]["n"] >= 1 and entry[metric]["p50"] > 0, metric
    assert entry["e2e_ms"]["n"] == 6
    assert entry["served_by"]["headers"]["server"] == {"llama.cpp": 6}
    counters = entry["server_metrics"]["counters"]  # its /metrics, folded over the run
    made = entry["n_out"]["mean"] * entry["n_out"]["n"]  # what the answers' usage said, together
    assert counters["llamacpp:tokens_predicted_total"] >= made - 6  # one count apart at most per answer
    if api in ("chat", "completions"):  # its own timings, in the answers of these two
        assert set(entry["server_ms"]) == {"timings:predicted_ms", "timings:prompt_ms"}
        assert entry["server_ms"]["timings:predicted_ms"]["n"] == 6


def test_probe_reads_what_llama_server_honours(llama_server: LlamaServer) -> None:
    code, doc = run("probe", llama_server.url, "--model", "smol", "--repeats", "2", "--max-tokens", "16")
    assert code == 0
    got = {c["name"]: c["verdict"] for c in doc["checks"]}
    honoured = (
        "max_tokens=5",
        "stop",
        "seed",
        "temperature=1 samples",
        "temperature=0 repeatable",
        "logprobs",
        "top_logprobs=3",
        "stream_options.include_usage",
        "stream == non-stream (temperature 0)",
        "response_format=json_schema",
    )
    for name in honoured:
        assert got[name] == "honoured", name
    # n > 1 takes a slot a choice: with 4 slots (the fixture's) it answers 3 choices; with one it refuses
    assert got["n=3"] == "honoured"
    assert got["unknown field lossless_canary_field"] == "ignored"
    # with --jinja it reads tools in the formats its template analysis knows; SmolLM2's template has none
    assert got["tools"] == "unsupported"


def test_verify_a_2_bit_requantization_is_different(
    llama_server: LlamaServer, llama_server_q2k: LlamaServer
) -> None:
    code, doc = run("verify", llama_server.url, llama_server_q2k.url, "--model", "smol")
    assert (code, doc["verdict"]) == (1, "different"), doc["reasons"]
    assert any(r.startswith("log-probabilities: the same tokens are") for r in doc["reasons"]), doc["reasons"]
    assert doc["logprob_distance"]["ci95"][0] > doc["procedure"]["tolerance_nats"]


@pytest.fixture(scope="module")
def ours() -> Iterator[LosslessServer]:
    with LosslessServer() as server:
        yield server


@pytest.mark.parametrize("api", ["completions", "chat"])
def test_verify_our_server_against_llama_server_on_the_same_weights(
    ours: LosslessServer, llama_server: LlamaServer, api: str
) -> None:
    """Two implementations of one GGUF (their kernels, ours) are the same model: the distance sits near
    0.05 nats a token, under the tolerance, and nothing else differs. Each side is the baseline once. In
    chat, llama-server the baseline: no echo, so no teacher forcing (the distance comes from the greedy
    answers' shared tokens) and equivalence waits for every look; its runs against itself are this
    run's A/A half (a test of one URL as both sides took 170 s for nothing more)."""
    pair = (ours, llama_server) if api == "completions" else (llama_server, ours)
    args = ["verify", pair[0].url, pair[1].url, "--model", pair[0].model_id]
    code, doc = run(*args, "--candidate-model", pair[1].model_id, "--api", api)
    assert (code, doc["verdict"]) == (0, "equivalent"), doc["reasons"]
    distance = doc["logprob_distance"]
    assert distance["value"] > 0 and distance["ci95"][1] < doc["procedure"]["tolerance_nats"], distance
    assert api == "completions" or distance["source"] == "greedy", distance
    assert "requantization" not in distance["nearest"], distance  # a figure of the same weights


def inspected(server: LlamaServer) -> dict[str, Any]:
    code, doc = run("inspect", server.url, "--model", "smol", "--no-precision")
    assert code == 0
    (card,) = doc["cards"]
    return card


def test_inspect_a_plain_llama_server(llama_server: LlamaServer) -> None:
    card = inspected(llama_server)
    spec = card["speculative_decoding"]
    assert spec["verdict"] == "not evident", spec["note"]
    assert spec["evidence"]["counters"] == "no drafts counted"  # its counters exist, and stayed at 0
    assert (card["identity"]["verdict"], card["identity"]["family"]) == ("evident", "smollm2")


def test_inspect_reads_llama_server_s_n_gram_drafting(smollm2_path: Path) -> None:
    with LlamaServer(smollm2_path, extra=["--spec-type", "ngram-simple"]) as server:
        card = inspected(server)
    spec = card["speculative_decoding"]
    assert spec["verdict"] == "evident", spec["note"]
    assert spec["counters"]["accepted_tokens"] > 0 and spec["counters"]["drafted_tokens"] > 0


def test_tasks_run_through_llama_server(llama_server: LlamaServer) -> None:
    args = ["tasks", llama_server.url, "--model", "smol", "--set", "arithmetic", "--limit", "2"]
    code, doc = run(*args, "--temperature", "0", "--max-tokens", "24", "--retries", "0")
    assert code == 0
    calls = [c for r in doc["runs"] for c in r["calls"]]
    assert calls and all(c["error_kind"] is None and c["n_out_source"] == "usage" for c in calls), calls
    assert doc["endpoints"][0]["output_speed"] is not None
