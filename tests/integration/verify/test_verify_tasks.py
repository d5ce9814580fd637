"""verify --tasks: a task set as verify's task evidence, and tool-call parity (trigger F1, schema
accuracy) calibrated by the baseline's repeat, against scripted agent models on 127.0.0.1
(tests/support/task_server.py). The servers' draws are seeded (not chosen to pass)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from task_server import Behaviour, task_server, task_specs

from lossless.client.endpoints import Endpoint
from lossless.tasks.sets import load_set
from lossless.verify.budget import Criteria
from lossless.verify.decide import decide
from lossless.verify.taskset import TaskEvidence, f1, run_tasks

N = 60
GOOD = Behaviour(success=0.9, ttft_s=0.005, tpot_s=0.001, tokens=3)


@pytest.fixture(scope="module")
def task_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tasks") / "agent.jsonl"
    path.write_text("".join(json.dumps(spec) + "\n" for spec in task_specs(N, tool_latency_s=0.0)))
    return path


def _evidence(
    task_file: Path, candidate: Behaviour, per_task: dict[str, Behaviour] | None = None
) -> TaskEvidence:
    with (
        task_server(GOOD, seed=0) as (base_url, _),
        task_server(candidate, per_task, seed=1) as (cand_url, _),
    ):
        base, cand = Endpoint("baseline", base_url, "scripted"), Endpoint("candidate", cand_url, "scripted")
        return asyncio.run(run_tasks(base, cand, load_set(str(task_file)), concurrency=16, timeout=30.0))


def _verdict(found: TaskEvidence) -> tuple[str, tuple[str, ...]]:
    assert found.parity is not None
    decision = decide([], [], Criteria(), detectable=None, tasks=None, extra=found.parity.findings())
    return decision.verdict, decision.reasons


def test_an_aa_pair_keeps_parity(task_file: Path) -> None:
    found = _evidence(task_file, GOOD)
    p = found.parity
    assert p is not None and p.tasks == N and p.trigger_f1 == p.trigger_f1_aa == 1.0
    assert p.schema_valid == (1.0, 1.0, 1.0) and p.calls == (N, N, N)
    assert len(found.solved[0]) == len(found.solved[1]) == N and None not in found.solved[0]
    assert _verdict(found)[0] != "different"


def test_a_quarter_of_the_arguments_invalid_is_a_difference(task_file: Path) -> None:
    found = _evidence(
        task_file, Behaviour(success=0.9, ttft_s=0.005, tpot_s=0.001, tokens=3, invalid_args=0.25)
    )
    p = found.parity
    assert p is not None and p.trigger_f1 == 1.0  # it still calls when it should
    share = p.schema_valid[2]
    assert share is not None and 0.55 < share < 0.9 and p.schema_valid[0] == 1.0
    verdict, reasons = _verdict(found)
    assert verdict == "different" and any("valid against their schema" in r for r in reasons), reasons


def test_skipped_tool_calls_lower_the_trigger_f1(task_file: Path) -> None:
    skips = {
        f"t{i}": Behaviour(success=0.9, ttft_s=0.005, tpot_s=0.001, tokens=3, tool_calls=0)
        for i in range(0, N, 3)
    }
    found = _evidence(task_file, GOOD, skips)
    p = found.parity
    assert p is not None and p.disagree == len(skips) and p.disagree_aa == 0
    assert p.trigger_f1 == pytest.approx(2 * (N - len(skips)) / (2 * (N - len(skips)) + len(skips)))
    verdict, reasons = _verdict(found)
    assert verdict == "different" and any("triggers disagree" in r for r in reasons), reasons


def test_f1_of_triggers() -> None:
    assert f1([True, True, False], [True, False, False]) == pytest.approx(2 / 3)
    assert f1([False, False], [False, False]) is None
    assert f1([True], [True]) == 1.0
