"""`lossless tasks` against the real embedded model (SmolLM2-135M): the whole path, small."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from lossless.cli.tasks import tasks as tasks_command
from lossless.client.endpoints import Endpoint
from lossless.server.launch import start_embedded
from lossless.server.main import LoadedModel, load_model
from lossless.server.options import ServeOptions
from lossless.tasks.run import run_endpoint
from lossless.tasks.runner import RunnerConfig
from lossless.tasks.sets import load_set
from lossless.tasks.tally import tally_endpoint

pytestmark = pytest.mark.slow
BFCL_HOME = Path(__file__).resolve().parents[3] / ".pytest_cache" / "lossless-home"  # test_tasks_bfcl's


@pytest.fixture(scope="module")
def loaded() -> LoadedModel:
    return load_model(ServeOptions(port=0))


def test_arithmetic_on_the_embedded_model_without_a_url(
    loaded: LoadedModel, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the command serves the model itself, as it does with no URL; loading it once saves the test ~10 s
    monkeypatch.setattr("lossless.server.main.load_model", lambda config: loaded)
    args = [
        "--set",
        "arithmetic",
        "--limit",
        "3",
        "--max-tokens",
        "16",
        "--temperature",
        "0",
        "--price-in",
        "0.1",
        "--price-out",
        "0.4",
        "--json",
    ]
    result = CliRunner().invoke(tasks_command, args)
    assert result.exit_code == 0, result.output + str(result.exception)
    data = json.loads(result.stdout)
    # no URL: the embedded model served plainly and speculatively, each side's runs paired with the other's
    assert [(e["name"], e["runs"]) for e in data["endpoints"]] == [("plain", 3), ("speculative", 3)]
    (pair,) = data["comparisons"]
    assert (pair["baseline"], pair["candidate"], pair["pairs"]) == ("plain", "speculative", 3)
    assert pair["only_baseline"] == pair["only_candidate"] == 0 and pair["line"].startswith("output speed")
    assert len(data["runs"]) == 6
    for run in data["runs"]:
        assert run["end"] == "answer" and run["steps"] == 1 and run["usage_missing"] == 0
        assert 0 < run["completion_tokens"] <= 16 and run["cost_usd"] > 0
        (call,) = run["calls"]
        assert 0 < call["ttft_s"] < call["e2e_s"] and call["speed"] > 0
    # greedy speculative decoding answers as plain decoding does: the same checks pass
    plain, speculative = (
        [r["success"] for r in data["runs"] if r["endpoint"] == side] for side in ("plain", "speculative")
    )
    assert plain == speculative, data["runs"]
    assert all(e["output_speed"] > 0 for e in data["endpoints"]) and "tasks: arithmetic" in result.stderr


def test_the_tools_demo_set_runs_on_the_embedded_model(loaded: LoadedModel) -> None:
    """Whether the model calls the tools or answers in text, each task ends at an answer or a limit, is
    checked, and its time holds its parts: the model's calls and the tools' stated latency, waited out."""
    tasks = load_set("tools")[:3]
    with start_embedded(ServeOptions(port=0), loaded=loaded) as url:
        endpoint = Endpoint("embedded", url, loaded.name)
        runs = asyncio.run(run_endpoint(endpoint, tasks, RunnerConfig(max_tokens=16, temperature=0.0)))
    assert [r.task for r in runs] == [t.id for t in tasks]
    for run in runs:
        assert run.end in ("answer", "step_limit", "token_budget") and run.reason and run.steps >= 1
        assert 0 < run.completion_tokens <= 16 * run.steps and run.model_s > 0
        assert run.tool_s >= 0.1 * bool(run.tool_calls)  # the demo's tools take 0.1 s and 0.2 s a call
        assert run.task_s >= run.model_s + run.tool_s
    s = tally_endpoint(endpoint, runs, samples=1)
    assert s.runs == 3 and s.success_rate.ci95 is not None


def test_forced_bfcl_calls_are_all_well_formed(loaded: LoadedModel, monkeypatch: pytest.MonkeyPatch) -> None:
    """tool_choice required: the server's constrained decoding makes every call parse and validate against
    its function's schema, whether or not it is the right call (BFCL's checker says that)."""
    monkeypatch.setenv("LOSSLESS_HOME", str(BFCL_HOME))
    tasks = load_set("bfcl-simple")[:4]
    with start_embedded(ServeOptions(port=0), loaded=loaded) as url:
        endpoint = Endpoint("embedded", url, loaded.name)
        config = RunnerConfig(temperature=0.0, tool_choice="required")
        runs = asyncio.run(run_endpoint(endpoint, tasks, config))
    for run in runs:
        assert run.end == "answer" and run.tool_calls == 1, run
        assert run.invalid_arguments == run.schema_invalid == 0, run
    # greedy SmolLM2-135M gets some of these right: the checker is BFCL's, the count is measured
    assert tally_endpoint(endpoint, runs, samples=1).success_rate.ci95 is not None
