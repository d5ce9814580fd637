"""The four APIs end to end: every command that makes requests, run with ``--api`` chat, completions,
responses or messages against a real server (``lossless serve``: SmolLM2, its default numerics and
drafter) over real HTTP, each API's events read as its own. vLLM's side: tests/compat/test_vllm.py."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from lossless.cli import main
from lossless.server.launch import start_embedded
from lossless.server.options import ServeOptions

pytestmark = pytest.mark.slow
MODEL = "smollm2-135m-instruct"


@pytest.fixture(scope="module")
def url(smollm2_path: Path) -> Iterator[str]:
    with start_embedded(ServeOptions(model=str(smollm2_path), compile="off")) as served:
        yield served


def run(*args: str) -> dict[str, Any]:
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code in (0, 1, 3), result.output  # 1, 3: verify's verdicts
    assert "Traceback" not in result.output
    return dict(json.loads(result.stdout))


@pytest.mark.parametrize("api", ["chat", "completions", "responses", "messages"])
def test_bench_times_every_api_from_its_own_events(url: str, api: str, tmp_path: Path) -> None:
    out = tmp_path / "run"
    # greedy, through an endpoints file: at the server's default temperature both answers could end at
    # once (it happened: completions, a first token of end-of-text twice), leaving no per-event timing
    pair = tmp_path / "ours.toml"
    pair.write_text(
        f'[[endpoint]]\nname = "ours"\nbase_url = "{url}"\nmodel = "{MODEL}"\nbody = {{ temperature = 0 }}\n'
    )
    args = ("bench", "--endpoints", str(pair), "--api", api, "--suite", "grounded", "--requests", "2")
    summary = run(*args, "--max-tokens", "24", "--warmup", "0", "--out", str(out))
    (entry,) = summary["endpoints"]
    assert entry["requests"]["ok"] == 2 and summary["config"]["api"] == api
    assert entry["n_out_sources"] == {"usage": 2}  # each API's own usage, in its own field
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    for r in records:
        assert r["api"] == api and r["error"] is None and r["n_in"] > 0 and 0 < r["n_out"] <= 24
        assert r["finish_reason"] in ("stop", "length")
    answered = [r for r in records if r["n_out"] > 1]
    assert answered and entry["ttft_ms"]["n"] >= len(answered) and entry["output_tps"]["n"] >= 1
    for r in answered:
        assert r["text"] and r["event_kinds"].count("c") > 1  # the answer's text events, timed one by one
        if api in ("chat", "completions"):  # ours takes continuous usage stats: counts in every chunk
            assert max(r["event_tokens"]) == r["n_out"] and sum(t > 0 for t in r["event_tokens"]) > 1


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_probe_speaks_each_api(url: str, api: str) -> None:
    found = run("probe", url, "--model", MODEL, "--api", api, "--repeats", "2", "--max-tokens", "24")
    assert found["api"] == api
    verdicts = {c["name"]: c["verdict"] for c in found["checks"]}
    assert verdicts["max_tokens=5"] == "honoured"
    # Messages says stop_sequences; the Responses API has no stop: sent as asked, the server ignores it
    assert verdicts["stop"] == ("honoured" if api == "messages" else "ignored")
    assert verdicts["tool_choice=required"] == "honoured"  # tools as each API's own items
    assert verdicts["tool_choice=function"] == "honoured"


@pytest.mark.parametrize("api", ["responses", "messages"])
def test_tasks_run_tool_loops_in_each_api(url: str, api: str) -> None:
    args = ("tasks", url, "--model", MODEL, "--api", api, "--set", "tools", "--limit", "2")
    found = run(*args, "--tool-choice", "required-first", "--temperature", "0")
    assert found["settings"]["api"] == api
    runs = found["runs"]
    assert len(runs) == 2 and all(r["end"] != "error" for r in runs)
    calls = [c for r in runs for c in r["calls"]]
    assert calls and all(c["error_kind"] is None for c in calls)
    assert sum(c["tool_calls"] for c in calls) >= 2  # every first call named a tool, and its answer went back


def test_verify_and_inspect_in_the_messages_api(url: str) -> None:
    found = run("verify", url, url, "--model", MODEL, "--api", "messages", "--budget", "2x3x8")
    assert found["api"] == "messages" and found["verdict"] in ("equivalent", "inconclusive", "different")
    card = run(
        "inspect",
        url,
        "--model",
        MODEL,
        "--api",
        "responses",
        "--no-precision",
        "--max-rounds",
        "4",
        "--max-tokens",
        "16",
    )
    (one,) = card["cards"]
    assert one["api"] == "responses" and one["budget"]["rounds"] == 4 and one["budget"]["output_tokens"] > 0
    # the identity requests' token counts come from the Responses API's usage
    assert (one["identity"]["verdict"], one["identity"]["family"]) == ("evident", "smollm2")
    assert one["speculative_decoding"]["verdict"] in ("evident", "not evident", "inconclusive")
