"""`lossless bench` end to end through the CLI runner against the scripted server."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from lossless.cli import main

sys.path.insert(0, str(Path(__file__).parents[1] / "support"))
from scripted_server import ScriptedServer

FAKE_KEY = "sk-lossless-FAKE-7f3a9c2e1d"


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as s:
        yield s


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
    assert (out / "summary.csv").read_text().startswith("name,load,ok,failed")
    every_output = result.stdout + result.stderr + "".join(p.read_text() for p in out.iterdir())
    assert FAKE_KEY not in every_output and "sk-lossless" not in every_output


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
