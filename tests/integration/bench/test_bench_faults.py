"""bench against real local servers that misbehave as servers we did not write do: it keeps its headline
metric, every record, and strict JSON. (The same behaviours against llama.cpp itself: tests/compat.)"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from scripted_server import ScriptedServer

from lossless.cli import main
from lossless.client.prometheus import parse_counters
from lossless.provision.counting import load_token_counter

NO_USAGE = {"steps": [[0.002, "role", 0], *[[0.002, "content", 1]] * 6], "usage": "none"}


def bench(
    args: list[str], out: Path | None = None, failed: tuple[str, ...] = ()
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """bench's summary and records; ``failed``: endpoints whose every request fails, which bench names
    after writing everything, and exits 2."""
    extra = ["--out", str(out)] if out else []
    result = CliRunner().invoke(main, ["bench", *args, "--json", *extra])
    assert result.exit_code == (2 if failed else 0), result.output
    named = [line for line in result.stderr.splitlines() if line.startswith("error: endpoint ")]
    assert [line.split("'")[1] for line in named] == list(failed), result.stderr
    assert "Traceback" not in result.stderr
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()] if out else []
    return json.loads(result.stdout), records


def test_no_usage_counts_chunks_and_says_so(server: ScriptedServer) -> None:
    server.script(NO_USAGE)
    summary, _ = bench([server.url, "--model", "m", "--requests", "4"])
    (entry,) = summary["endpoints"]
    assert entry["n_out_sources"] == {"chunks": 4}
    assert entry["n_out"]["p50"] == 6  # six content chunks; the role chunk carries no token
    assert entry["output_tps"]["n"] == 4  # the headline metric is there, in chunks per second
    result = CliRunner().invoke(main, ["bench", server.url, "--model", "m", "--requests", "2"])
    table = " ".join(result.stdout.split())  # the table for people, however rich wrapped it
    assert "chunk/s" in table and "counted in chunks, not tokens" in table


def test_no_usage_counts_tokens_with_the_tokenizer_the_endpoint_names(
    server: ScriptedServer, smollm2_path: Path, tmp_path: Path
) -> None:
    """The tokenizer comes from, in turn: --tokenizer, the endpoint file's tokenizer, the model name."""
    server.script(NO_USAGE)
    toml = tmp_path / "endpoints.toml"
    toml.write_text(
        f'[[endpoint]]\nname = "named"\nbase_url = "{server.url}"\nmodel = "m"\n'
        f'tokenizer = "{smollm2_path}"\n'
        f'[[endpoint]]\nname = "by-model"\nbase_url = "{server.url}"\nmodel = "{smollm2_path}"\n'
        f'[[endpoint]]\nname = "unknown"\nbase_url = "{server.url}"\nmodel = "m"\n'
    )
    summary, _ = bench(["--endpoints", str(toml), "--requests", "2"])
    sources = {e["name"]: e["n_out_sources"] for e in summary["endpoints"]}
    assert sources == {
        "named": {f"tokenizer:{smollm2_path}": 2},
        "by-model": {f"tokenizer:{smollm2_path}": 2},
        "unknown": {"chunks": 2},
    }
    # the whole text through SmolLM2's tokenizer, not chunk by chunk
    tokens = load_token_counter(str(smollm2_path))("tok " * 6)
    assert tokens != 6
    assert [e["n_out"]["p50"] for e in summary["endpoints"]] == [tokens, tokens, 6]


def test_a_file_that_is_no_tokenizer_fails_before_any_traffic(server: ScriptedServer, tmp_path: Path) -> None:
    server.script(NO_USAGE)
    bad = tmp_path / "tokenizer.json"
    bad.write_text("{}")
    toml = tmp_path / "endpoints.toml"
    toml.write_text(
        f'[[endpoint]]\nname = "a"\nbase_url = "{server.url}"\nmodel = "m"\ntokenizer = "{bad}"\n'
    )
    result = CliRunner().invoke(main, ["bench", "--endpoints", str(toml), "--requests", "2"])
    assert result.exit_code == 2 and result.stderr.startswith("error: tokenizer")
    assert result.stderr.count("\n") == 1 and not server.log()


METRICS = {
    "json catch-all": '{"detail": "Not Found"}',
    "html page": "<!doctype html>\n<html><body><h1>Welcome</h1></body></html>\n",
    "blank indented line": "# HELP x\n   \n\t\nlossless_spec_steps_total 3\n",
    "nan counter": "lossless_spec_drafted_tokens_total NaN\nlossless_spec_accepted_tokens_total +Inf\n",
}


@pytest.mark.parametrize("name", list(METRICS))
def test_metrics_that_are_not_prometheus_mean_no_server_metrics(
    name: str, server: ScriptedServer, tmp_path: Path
) -> None:
    server.script({"steps": [[0.001, "content", 1]] * 3}, metrics=[METRICS[name]])
    summary, _ = bench([server.url, "--model", "m", "--requests", "3"], tmp_path / "run")
    assert summary["endpoints"][0]["requests"]["ok"] == 3
    assert summary["endpoints"][0]["speculative"] is None
    text = (tmp_path / "run" / "summary.json").read_text()

    def refuse(constant: str) -> float:
        raise AssertionError(f"summary.json holds {constant}, which is not JSON")

    json.loads(text, parse_constant=refuse)


def test_prometheus_parsing_keeps_finite_samples_only() -> None:
    text = (
        "lossless_spec_drafted_tokens_total 10\n"
        'lossless_spec_drafted_tokens_total{x="1"} 5 1700000000\n'
        "lossless_spec_accepted_tokens_total NaN\n  \n"
        "vllm:spec_decode_num_drafts_total -Inf\n"
        "{not a sample}\n"
    )
    got = parse_counters(text)
    assert got == {"lossless_spec_drafted_tokens_total": 15.0}
    assert all(math.isfinite(v) for v in got.values())


@pytest.mark.parametrize("kind", ["number", "object"])
def test_a_malformed_chunk_is_one_failed_record_and_the_other_endpoints_go_on(
    kind: str, server: ScriptedServer, tmp_path: Path
) -> None:
    """One endpoint sends a number for content (or an object for reasoning_content) in every answer;
    the other, another server, is healthy. Both run side by side to the end, every record kept."""
    server.script({"steps": [[0.001, "content", 1]] * 3})
    with ScriptedServer() as odd:
        odd.script({"steps": [[0.001, "content", 1], [0.001, kind, 1], [0.001, "content", 1]]})
        toml = tmp_path / "endpoints.toml"
        toml.write_text(
            f'[[endpoint]]\nname = "healthy"\nbase_url = "{server.url}"\nmodel = "m"\n'
            f'[[endpoint]]\nname = "odd"\nbase_url = "{odd.url}"\nmodel = "m"\n'
        )
        summary, records = bench(["--endpoints", str(toml), "--requests", "5"], tmp_path / "run", ("odd",))
    by_name = {e["name"]: e["requests"] for e in summary["endpoints"]}
    assert by_name["healthy"]["ok"] == 5 and by_name["odd"]["failed"] == 5
    assert by_name["odd"]["errors"] == {"malformed_stream": 5}
    odd_records = [r for r in records if r["endpoint"] == "odd"]
    assert len(records) == 10 and len(odd_records) == 5
    assert all("not a string" in r["error"] for r in odd_records)
    assert all(r["event_kinds"] == "c" for r in odd_records)  # what came before the bad chunk is kept


def test_who_served_it_is_recorded_and_summarized(server: ScriptedServer, tmp_path: Path) -> None:
    server.script(
        {"steps": [[0.001, "content", 1]] * 2, "headers": [["server", "edge-7"], ["set-cookie", "s=1"]]}
    )
    summary, records = bench([server.url, "--model", "m", "--requests", "3"], tmp_path / "run")
    assert all(dict(r["server_headers"]).get("server") == "edge-7" for r in records)
    assert not any("set-cookie" in dict(r["server_headers"]) for r in records)  # never more than asked
    assert summary["endpoints"][0]["served_by"]["headers"] == {"server": {"edge-7": 3}}
