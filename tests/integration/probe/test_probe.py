"""probe over real HTTP: a provider-like server with chosen habits, and our own server (tiny checkpoint)."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from provider_server import Habits, provider_server

from lossless.cli import main
from lossless.client.endpoints import Endpoint
from lossless.probe.checks import Settings
from lossless.probe.run import probe_endpoint
from lossless.server.launch import start_embedded
from lossless.server.main import load_model
from lossless.server.options import ServeOptions

FAST = Settings(repeats=4, max_tokens=24)


def verdicts(url: str, model: str) -> dict[str, str]:
    result = asyncio.run(probe_endpoint(Endpoint("x", url, model), FAST))
    return {c.name: c.verdict for c in result.checks}


@pytest.fixture(scope="module")
def provider_url() -> Iterator[str]:
    with provider_server(Habits()) as url:
        yield url


def test_provider_habits_are_each_classified(provider_url: str) -> None:
    got = verdicts(provider_url, "m")
    assert got["reasoning_effort=none"] == "honoured"
    assert got["enable_thinking=false"] == "ignored"
    assert got["chat_template_kwargs.enable_thinking=false"] == "ignored"
    assert got["max_tokens=5"] == "ignored"
    assert got["unknown field lossless_canary_field"] == "ignored"
    assert got["n=3"] == "rejected"
    assert got["stop"] == "honoured"
    assert got["seed"] == "honoured"
    assert got["temperature=1 samples"] == "honoured"
    assert got["temperature=0 repeatable"] == "honoured"
    assert got["logprobs"] == "honoured"
    assert got["top_logprobs=3"] == "honoured"
    assert got["stream_options.include_usage"] == "honoured"
    assert got["stream == non-stream (temperature 0)"] == "honoured"
    assert got["temperature=-1 (invalid)"] == "rejected"
    # it answers every request in text: a forced call or a JSON format never comes back
    for name in ("tool_choice=required", "tool_choice=function", "response_format=json_schema"):
        assert got[name] == "ignored", name
    assert got["tools"] == "unsupported"


def test_the_opposite_habits_flip_the_verdicts() -> None:
    habits = Habits(
        reasoning_effort=False, enable_thinking=True, max_tokens=True, unknown_fields="reject", n="honour"
    )
    with provider_server(habits) as url:
        got = verdicts(url, "m")
    assert got["reasoning_effort=none"] == "ignored"
    assert got["enable_thinking=false"] == "honoured"
    assert got["max_tokens=5"] == "honoured"
    assert got["unknown field lossless_canary_field"] == "rejected"
    assert got["n=3"] == "honoured"


def test_reasoning_evidence_carries_sizes_and_p_values(provider_url: str) -> None:
    result = asyncio.run(probe_endpoint(Endpoint("x", provider_url, "m"), FAST))
    check = next(c for c in result.checks if c.name == "reasoning_effort=none")
    assert check.evidence["measure"] == "usage reasoning_tokens"
    assert check.evidence["on_median"] == 30 and check.evidence["off_median"] == 0
    assert check.evidence["p_value"] < 0.05


def test_our_server_is_probed_for_what_it_really_does(tiny_checkpoint: Path) -> None:
    loaded = load_model(ServeOptions(model=str(tiny_checkpoint)))
    with start_embedded(ServeOptions(), loaded=loaded) as url:
        got = verdicts(url, loaded.name)
    # protocol.py: unknown fields accepted (and named in a header), n > 1 refused, the rest honoured
    assert got["unknown field lossless_canary_field"] == "ignored"
    assert got["n=3"] == "rejected"
    for name in (
        "max_tokens=5",
        "stop",
        "seed",
        "temperature=1 samples",
        "temperature=0 repeatable",
        "logprobs",
        "top_logprobs=3",
        "stream_options.include_usage",
        "usage.prompt_tokens stable",
        "stream == non-stream (temperature 0)",
    ):
        assert got[name] == "honoured", name
    for name in ("temperature=-1 (invalid)", "max_tokens=-1 (invalid)", "top_p=5 (invalid)"):
        assert got[name] == "rejected", name
    # a random tiny model never reasons: no switch can be seen to work
    assert got["reasoning_effort=none"] == "unsupported"


def test_cli_json_on_stdout_table_on_stderr(provider_url: str) -> None:
    result = CliRunner().invoke(main, ["probe", provider_url, "--model", "m", "--json", "--repeats", "3"])
    assert result.exit_code == 0, result.stderr
    doc = json.loads(result.stdout)
    names = {c["name"]: c["verdict"] for c in doc["checks"]}
    assert names["n=3"] == "rejected"
    assert "verdict" in result.stderr and "reasoning_effort=none" in result.stderr


def test_cli_unreachable_endpoint_is_one_line_exit_2() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connection refused
        result = CliRunner().invoke(main, ["probe", f"http://127.0.0.1:{port}/v1", "--model", "m"])
    assert result.exit_code == 2
    assert result.stderr.startswith("error: endpoint") and f"127.0.0.1:{port}" in result.stderr
    assert result.stderr.count("\n") == 1 and result.stdout == ""
