"""`lossless tasks` against llama.cpp's OpenAI server (llama-cpp-python) with its tool-calling chat format
(``chatml-function-calling``, the one that takes ChatML models such as SmolLM2): the agent loop runs through
a server we did not write - a tool call, its result sent back as a ``tool`` turn, the model's next answer.

What that server needs, learned here: an assistant turn's ``content`` as a string beside its tool calls
(``null`` is a validation error it answers with a 500), and no stream (with tools its streams carry no
event at all), so the runner sends "" and this test ``--no-stream``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from third_party import LlamaCppServer

from lossless.cli import main
from lossless.tasks.calculator import demo_specs

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def llama_tools(smollm2_path: Path) -> Iterator[LlamaCppServer]:
    with LlamaCppServer(smollm2_path, extra=["--chat_format", "chatml-function-calling"]) as server:
        yield server


def test_the_agent_loop_runs_through_llama_cpp_tool_calls(
    llama_tools: LlamaCppServer, tmp_path: Path
) -> None:
    # the tools set's first task (a lookup), two model calls at most: the call, then the turn after its result
    spec = demo_specs()[0]
    spec["limits"] = {**spec["limits"], "max_steps": 2}
    (tmp_path / "one.jsonl").write_text(json.dumps(spec) + "\n")
    args = ["tasks", llama_tools.url, "--model", "smol", "--set", str(tmp_path / "one.jsonl"), "--json"]
    args += [
        "--tool-choice",
        "auto",
        "--no-stream",
        "--temperature",
        "0",
        "--max-tokens",
        "48",
        "--retries",
        "0",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    (run,) = json.loads(result.stdout)["runs"]
    # a call was made, its result went back as a tool turn, and the server answered that turn
    assert run["end"] != "error" and run["tool_calls"] >= 1 and run["steps"] == 2, run
    assert all(c["error_kind"] is None for c in run["calls"]), run["calls"]


def test_answers_streamed_without_usage_are_counted_by_the_gguf_it_lists(
    llama_tools: LlamaCppServer, smollm2_path: Path
) -> None:
    # llama.cpp streams no usage: the runner counts each answer's text with the tokenizer of the GGUF that
    # /v1/models lists (found once, before any task), so output speed and the token budget still work
    args = ["tasks", llama_tools.url, "--model", "smol", "--set", "arithmetic", "--limit", "2", "--json"]
    args += ["--temperature", "0", "--max-tokens", "24", "--retries", "0"]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    calls = [c for run in doc["runs"] for c in run["calls"]]
    assert calls and all(c["n_out_source"] == f"tokenizer:{smollm2_path}" for c in calls), calls
    assert all(0 < c["n_out"] <= 24 and c["n_in"] is None for c in calls), calls
    assert all(run["usage_missing"] == 1 and run["cost_usd"] is None for run in doc["runs"]), doc["runs"]
    assert doc["endpoints"][0]["output_speed"] is not None
