"""`lossless bench` end to end through the CLI runner against the scripted server."""

from __future__ import annotations

import itertools
import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from scripted_server import ScriptedServer

from lossless.cli import main

FAKE_KEY = "sk-lossless-FAKE-7f3a9c2e1d"


def test_bench_json_out_dir_and_no_key_anywhere(server: ScriptedServer, tmp_path: Path) -> None:
    # an error body that echoes the key back, as some providers do: it must be redacted
    server.script(
        {"steps": [[0.01, "content", 1]] * 5}, **{"Hi!": {"status": 401, "body": f"bad key {FAKE_KEY}"}}
    )
    out = tmp_path / "out"
    args = ["bench", server.url, "--model", "m", "--api-key-env", "FAKE_KEY", "--requests", "12"]
    args += ["--concurrency", "3", "--warmup", "2", "--out", str(out), "--json", "--slo", "ttft=1000,e2e=5s"]
    result = CliRunner().invoke(main, args, env={"FAKE_KEY": FAKE_KEY})
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)  # stdout is the JSON alone; the table went to stderr
    assert "lossless bench" in result.stderr
    (entry,) = summary["endpoints"]
    for metric in ("ttfb_ms", "ttft_ms", "tpot_ms", "output_tps", "e2e_ms"):
        assert {"n", "mean", "p50", "p90", "p95", "p99", "max"} <= set(entry[metric])
    req = entry["requests"]
    assert req["ok"] + req["failed"] == 12 and req["ok"] > 0
    assert req["failed"] == req["errors"].get("http_401", 0)
    assert entry["throughput"]["goodput_requests_per_s"] is not None
    lines = (out / "records.jsonl").read_text().splitlines()
    assert len(lines) == 14 and sum(json.loads(ln)["warmup"] for ln in lines) == 2
    assert json.loads((out / "summary.json").read_text())["endpoints"][0]["name"] == entry["name"]
    assert (out / "summary.csv").read_text().startswith("name,load,class,ok,failed")
    every_output = result.stdout + result.stderr + "".join(p.read_text() for p in out.iterdir())
    assert FAKE_KEY not in every_output and "sk-lossless" not in every_output


def test_take_turns_sends_one_request_at_a_time_over_the_endpoints(tmp_path: Path) -> None:
    with ScriptedServer() as a, ScriptedServer() as b:
        for s in (a, b):
            s.script({"steps": [[0.01, "content", 1]] * 4})
        out = tmp_path / "out"
        args = ["bench", a.url, b.url, "--model", "m", "--requests", "4", "--take-turns", "--out", str(out)]
        result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 8 and [r["request_index"] for r in records] == [0, 0, 1, 1, 2, 2, 3, 3]
    assert records[0]["endpoint"] != records[2]["endpoint"]  # who goes first takes turns
    spans = sorted((r["sent_ns"], r["end_ns"]) for r in records)
    assert all(end <= sent for (_, end), (sent, _) in itertools.pairwise(spans))


def test_endpoints_toml_two_endpoints_compared(server: ScriptedServer, tmp_path: Path) -> None:
    server.script({"steps": [[0.005, "content", 1]] * 6})
    toml = tmp_path / "endpoints.toml"
    toml.write_text(
        f'[[endpoint]]\nname = "a"\nbase_url = "{server.url}"\nmodel = "m"\napi_key_env = "FAKE_KEY"\n'
        f"price = {{ input = 1.0, output = 2.0 }}\n\n"
        f'[[endpoint]]\nname = "b"\nbase_url = "{server.url}"\nmodel = "m"\n'
        'body = { reasoning_effort = "low" }\n'
    )
    result = CliRunner().invoke(
        main, ["bench", "--endpoints", str(toml), "--requests", "6", "--json"], env={"FAKE_KEY": FAKE_KEY}
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert [e["name"] for e in summary["endpoints"]] == ["a", "b"]
    # 7 prompt tokens at $1/M + 6 output tokens at $2/M per request
    assert summary["endpoints"][0]["cost_per_ok_request_usd"] == pytest.approx((7 + 12) / 1e6)
    assert any(c["metric"] == "output_tps" and c["other"] == "b" for c in summary["comparisons"])
    assert "[c=1] b's p50 output speed is" in result.stderr  # the load label is text, not rich markup


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["http://127.0.0.1:9/v1", "--model", "m", "--suite", "nope"], {}, "unknown suite 'nope'"),
        (["http://127.0.0.1:9/v1", "--model", "m", "--slo", "ttft=fast"], {}, "bad --slo item"),
        (["http://127.0.0.1:9/v1", "--model", "m", "--api-key-env", "NOT_SET_X"], {}, "NOT_SET_X is not set"),
        (["http://127.0.0.1:9/v1"], {}, "--model is required"),
        (["ftp://x", "--model", "m"], {}, "not an http(s) URL"),
        (["http://127.0.0.1:9/v1", "--model", "m", "--concurrency", "0,2"], {}, "positive integers"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], env: dict[str, str], message: str) -> None:
    result = CliRunner().invoke(main, ["bench", *args], env=env)
    assert result.exit_code == 2
    assert message in result.stderr and "Traceback" not in result.output
    assert len(result.stderr.strip().splitlines()) == 1


def test_malformed_toml_is_a_usage_error(tmp_path: Path) -> None:
    bad = tmp_path / "e.toml"
    bad.write_text("[[endpoint]\nname = ")
    result = CliRunner().invoke(main, ["bench", "--endpoints", str(bad)])
    assert result.exit_code == 2 and "not valid TOML" in result.stderr


@pytest.mark.slow
def test_no_url_benchmarks_the_embedded_server(smollm2_path: Path, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["bench", "--requests", "2", "--max-tokens", "4", "--json"])
    assert result.exit_code == 0, result.output
    (entry,) = json.loads(result.stdout)["endpoints"]
    assert entry["name"] == "embedded" and entry["requests"]["ok"] == 2


def _tokenizer_json(folder: Path) -> Path:
    """A real byte-level BPE tokenizer.json, trained in a blink on the scripted server's words."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    tok.train_from_iterator(["tok tok tok tok "] * 4, trainer=trainer)
    path = folder / "tokenizer.json"
    tok.save(str(path))
    return path


def test_no_usage_counts_chunks_unless_a_tokenizer_is_found(server: ScriptedServer, tmp_path: Path) -> None:
    server.script({"steps": [[0.005, "content", 2]] * 4, "usage": "none"})
    args = ["bench", server.url, "--model", "m", "--requests", "4", "--json"]
    plain = CliRunner().invoke(main, args)
    assert plain.exit_code == 0, plain.output
    (entry,) = json.loads(plain.stdout)["endpoints"]
    assert entry["n_out_sources"] == {"chunks": 4} and entry["n_out"]["p50"] == 4  # labelled, not tokens
    assert entry["tpot_ms"]["n"] == 4  # time per chunk: the headline metric is never silently blank
    assert "counted in chunks, not tokens" in " ".join(plain.stderr.split())

    path = _tokenizer_json(tmp_path)
    out = tmp_path / "out"
    counted = CliRunner().invoke(main, [*args, "--tokenizer", str(path), "--out", str(out)])
    assert counted.exit_code == 0, counted.output
    (entry,) = json.loads(counted.stdout)["endpoints"]
    source = f"tokenizer:{path}"
    assert entry["n_out_sources"] == {source: 4} and entry["tpot_ms"]["n"] == 4
    from tokenizers import Tokenizer

    expected = len(Tokenizer.from_file(str(path)).encode("tok " * 8, add_special_tokens=False).ids)
    assert entry["n_out"]["p50"] == expected  # the whole text at once, not 4 chunks counted apart
    records = [json.loads(ln) for ln in (out / "records.jsonl").read_text().splitlines()]
    assert {(r["n_out"], r["n_out_source"]) for r in records} == {(expected, source)}


def test_tokenizer_without_the_package_is_one_line(
    server: ScriptedServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # as if the engine extra were not installed
    monkeypatch.delitem(sys.modules, "lossless.engine.model.tokenizer", raising=False)
    result = CliRunner().invoke(main, ["bench", server.url, "--model", "m", "--tokenizer", "x.json"])
    assert result.exit_code == 2 and "pip install 'lossless[engine]'" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1


def test_lengths_suite_is_broken_down_by_class(server: ScriptedServer, tmp_path: Path) -> None:
    server.script({"steps": [[0.002, "content", 1]] * 3})
    out = tmp_path / "out"
    args = ["bench", server.url, "--model", "m", "--suite", "lengths", "--requests", "6", "--out", str(out)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    assert "by prompt class" in result.stdout and "len-10k" in result.stdout
    # no progress bar when stderr is not a terminal: a line when the requests start, one when they end
    said = [line for line in result.stderr.splitlines() if line.startswith("bench: requests")]
    assert said == ["bench: requests: 6 to go", said[1]] and "done in" in said[1], result.stderr
    (entry,) = json.loads((out / "summary.json").read_text())["endpoints"]
    assert {c: v["requests"]["ok"] for c, v in entry["classes"].items()} == {
        "len-100": 2,
        "len-10k": 2,
        "len-1k": 2,
    }
    assert set(entry["classes"]["len-1k"]["ttft_ms"]) >= {"p50", "p90", "p99", "p99_ci95"}
    rows = (out / "summary.csv").read_text().splitlines()
    assert [r.split(",")[2] for r in rows[1:]] == ["all", "len-100", "len-1k", "len-10k"]


def test_tool_calls_stay_uncounted_and_usage_is_kept(server: ScriptedServer) -> None:
    import asyncio

    from lossless.bench.config import BenchConfig
    from lossless.bench.loop import run_bench
    from lossless.client.call import CallOptions
    from lossless.client.endpoints import Endpoint
    from lossless.provision.counting import count_n_out

    server.script({"steps": [[0.0, "content", 2], [0.0, "tool", 1]], "usage": "none"})
    cfg = BenchConfig((Endpoint("s", server.url, "m"),), CallOptions("chat", True, 8, 5.0, 5.0), requests=1)
    (r,) = asyncio.run(run_bench(cfg)).records
    assert r.ok and r.tool_call_chars and r.n_out is None
    assert count_n_out(r, len, "chars") is r  # tool-call text is not kept: no undercount
    no_tools = r.__class__(**{**r.__dict__, "tool_call_chars": 0})
    assert count_n_out(no_tools, len, "chars").n_out == len("tok tok ")
    with_usage = r.__class__(**{**r.__dict__, "n_out": 3, "n_out_source": "usage"})
    assert count_n_out(with_usage, len, "chars") is with_usage


def test_progress_bar_only_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    from lossless.bench.run import _progress

    monkeypatch.delenv("FORCE_COLOR", raising=False)
    monkeypatch.delenv("TTY_COMPATIBLE", raising=False)
    with _progress(3) as on_record:
        assert on_record is None  # pytest's stderr is not a terminal: logs stay clean
    monkeypatch.setenv("TTY_COMPATIBLE", "1")
    monkeypatch.setenv("FORCE_COLOR", "1")
    with _progress(3) as on_record:
        assert on_record is not None


@pytest.mark.slow
def test_gguf_tokenizer_by_name_and_path(smollm2_path: Path) -> None:
    from lossless.provision.counting import load_token_counter

    by_path, by_name = load_token_counter(str(smollm2_path)), load_token_counter("smollm2-135m-instruct")
    text = "Hello world, this is a test of the tokenizer."
    assert 5 < by_path(text) == by_name(text) < len(text)


def test_gateway_timing_headers_reach_the_table_the_csv_and_the_page(
    server: ScriptedServer, tmp_path: Path
) -> None:
    # what a gateway or a provider says it spent, beside what we measured: in every output, not only JSON
    headers = [["openai-processing-ms", "42"], ["x-envoy-upstream-service-time", "40"]]
    server.script({"steps": [[0.002, "content", 1]] * 3, "headers": headers})
    out, page = tmp_path / "out", tmp_path / "page.html"
    args = ["bench", server.url, "--model", "m", "--requests", "4", "--out", str(out), "--html", str(page)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    said = "server timing openai-processing-ms: p50 42 ms, max 42 ms (4 answers)"
    assert said in result.stdout
    assert "server timing x-envoy-upstream-service-time: p50 40 ms" in result.stdout
    head, row = (line.split(",") for line in (out / "summary.csv").read_text().splitlines()[:2])
    assert float(row[head.index("server_ms:openai-processing-ms.p50")]) == 42.0
    assert float(row[head.index("server_ms:x-envoy-upstream-service-time.max")]) == 40.0
    assert said in page.read_text()


def test_stream_both_measures_each_endpoint_both_ways_in_turns(
    server: ScriptedServer, tmp_path: Path
) -> None:
    server.script({"steps": [[0.01, "content", 1]] * 4})
    out = tmp_path / "out"
    args = ["bench", server.url, "--model", "m", "--stream", "both", "--requests", "4", "--out", str(out)]
    result = CliRunner().invoke(main, [*args, "--json"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    names = [e["name"] for e in summary["endpoints"]]
    base = names[0].removesuffix(" stream")
    assert names == [f"{base} stream", f"{base} whole"]
    records = [json.loads(ln) for ln in (out / "records.jsonl").read_text().splitlines()]
    assert {(r["endpoint"], r["stream"]) for r in records} == {(names[0], True), (names[1], False)}
    # whole answers are one event at the body's end; streamed ones one per chunk
    assert {(r["endpoint"], len(r["event_ns"]) > 1) for r in records} == {(names[0], True), (names[1], False)}
    # the same prompts each way, one request at a time, taking turns
    pairs = {}
    for r in records:
        pairs.setdefault(r["request_index"], []).append((r["prompt_id"], r["sent_ns"], r["end_ns"]))
    for (pa, sa, ea), (pb, sb, eb) in pairs.values():
        assert pa == pb and (ea <= sb or eb <= sa)
    ratios = {(c["metric"], c["other"]) for c in summary["comparisons"]}
    assert ("e2e_ms", names[1]) in ratios and ("ttft_ms", names[1]) in ratios
    assert json.loads((out / "summary.json").read_text())["config"]["stream"] == "both"
