"""--slo attainment, --rate lists and --find-capacity against a scripted server of known capacity."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from scripted_server import ScriptedServer

from lossless.analyze import timing
from lossless.rundir import read_jsonl

CAPACITY = 20.0  # requests/s: one slot, 50 ms a request


def _bench(server: ScriptedServer, out: Path, *args: str) -> dict:
    done = subprocess.run(
        [sys.executable, "-m", "lossless.cli", "bench", server.url, "--model", "m", "--out", str(out), *args],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return dict(json.loads((out / "summary.json").read_text()))


def test_attainment_per_objective_and_a_rate_list(server: ScriptedServer, tmp_path: Path) -> None:
    server.script(
        default={"steps": [[0.0, "content", 1]] * 3}, slow={"head_delay": 0.2, "steps": [[0.0, "content", 1]]}
    )
    prompts = tmp_path / "p.jsonl"
    prompts.write_text('{"prompt": "slow"}\n' + '{"prompt": "fast"}\n' * 3)
    summary = _bench(
        server,
        tmp_path,
        "--suite",
        f"file:{prompts}",
        "--rate",
        "5,10",
        "--requests",
        "8",
        "--slo",
        "ttft=100,e2e=150",
    )
    assert [e["load"] for e in summary["endpoints"]] == ["rate=5", "rate=10"]
    records = list(read_jsonl(tmp_path / "records.jsonl"))
    for entry in summary["endpoints"]:
        mine = [timing(r) for r in records if r.load == entry["load"]]
        expected = {
            "ttft": sum(t.ttft <= 100 for t in mine if t.ttft is not None) / len(mine),
            "e2e": sum(t.e2e <= 150 for t in mine) / len(mine),
        }
        expected["all"] = sum(t.ttft is not None and t.ttft <= 100 and t.e2e <= 150 for t in mine) / len(mine)
        assert entry["slo_attainment"] == pytest.approx(expected)
        assert 0.5 <= entry["slo_attainment"]["all"] <= 0.85  # the slow prompt (1 in 4) misses


def test_find_capacity_within_10_percent_of_the_servers(server: ScriptedServer, tmp_path: Path) -> None:
    server.script(default={"capacity": CAPACITY, "steps": [[0.0, "content", 1]]})
    search = ("--slo", "ttft=150", "--find-capacity", "90", "--capacity-precision", "0.05")
    summary = _bench(server, tmp_path, "--rate", "10", "--burstiness", "50", "--requests", "40", *search)
    found = summary["capacity"]
    assert found["kind"] == "rate" and found["stopped"] == "precision"
    assert abs(found["held"] - CAPACITY) / CAPACITY <= 0.10, found
    assert found["failed"] > found["held"] and (found["failed"] - found["held"]) / found["held"] <= 0.05
    # every level tried is in the summary, its attainment the one the search read
    loads = {e["load"]: e["slo_attainment"]["all"] for e in summary["endpoints"]}
    for load, share in found["tried"]:
        assert loads[f"rate={load:g},b=50"] == pytest.approx(share)
    assert (tmp_path / "records.jsonl").read_text().count("\n") == 40 * len(found["tried"])
