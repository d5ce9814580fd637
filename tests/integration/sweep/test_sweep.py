"""lossless sweep: configurations x loads, each stopped where it saturates, one page with the Pareto
front. Scripted servers of known capacity stand for configurations given as URLs; the embedded engine
is swept as lossless serve starts it (slow); a server that does not start is a configuration kept with
its reason."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from scripted_server import ScriptedServer

from lossless.cli import main
from lossless.sweep.servers import argv

LOADS = ["--rate", "10,20,40,80,160", "--burstiness", "20", "--requests", "40", "--model", "m"]


def sweep_two(out: Path) -> dict:
    """Two configurations given as running servers: one slot of 30 and one of 60 requests a second."""
    with ScriptedServer() as slow, ScriptedServer() as fast:
        slow.script({"capacity": 30.0, "steps": [[0.002, "content", 1]] * 8})
        fast.script({"capacity": 60.0, "steps": [[0.002, "content", 1]] * 8})
        result = CliRunner().invoke(main, ["sweep", slow.url, fast.url, *LOADS, "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    return dict(json.loads(result.stdout))


def test_each_configuration_stops_where_it_saturates(tmp_path: Path) -> None:
    found = sweep_two(tmp_path)
    slow, fast = found["configs"]
    loads = [[e["load"] for e in c["summary"]["endpoints"]] for c in (slow, fast)]
    assert loads[0] == ["rate=10,b=20", "rate=20,b=20", "rate=40,b=20"]  # 30/s: 40 is past it
    assert loads[1] == ["rate=10,b=20", "rate=20,b=20", "rate=40,b=20", "rate=80,b=20"]  # 60/s: 80 is
    assert "stopped at rate=40" in slow["stopped"] and "stopped at rate=80" in fast["stopped"]
    # the faster server at 80 offered serves more than any other point: on the front
    assert {"config": fast["name"], "load": "rate=80,b=20"} in found["pareto"]["speed_vs_throughput"]
    assert (tmp_path / "sweep.html").is_file() and (tmp_path / "sweep.json").is_file()
    for c in (slow, fast):  # each configuration's bench run folder, whole
        folder = tmp_path / c["name"]
        assert {"records.jsonl", "summary.json", "report.html"} <= {p.name for p in folder.iterdir()}


def test_a_server_that_does_not_start_is_kept_with_its_reason(tmp_path: Path) -> None:
    command = f"{sys.executable} -c 'import sys; sys.exit(\"no such model\")' {{port}}"
    args = ["sweep", "--command", command, "--config", "-x", "--rate", "1,2", "--out", str(tmp_path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    assert "no configuration was measured" in result.output and "no such model" in result.output
    (config,) = json.loads((tmp_path / "sweep.json").read_text())["configs"]
    assert config["summary"] is None and "exited (1) before it answered" in config["error"]


def test_a_configuration_is_a_list_of_flags() -> None:
    assert argv(None, "--speculative ngram --dtype bfloat16", 8123)[-6:] == [
        "--port",
        "8123",
        "--speculative",
        "ngram",
        "--dtype",
        "bfloat16",
    ]
    assert argv("srv -m 'my model.gguf' --port {port} {flags} -v", "-np 4", 9) == [
        "srv",
        "-m",
        "my model.gguf",
        "--port",
        "9",
        "-np",
        "4",
        "-v",
    ]
    assert argv("srv --port {port}", "-np 4", 9) == ["srv", "--port", "9", "-np", "4"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--rate", "1"], "two or more"),
        (["--rate", "4,2"], "increasing"),
        (["--command", "srv", "--rate", "1,2"], "{port}"),
        (["http://x/v1", "--config", "-a", "--rate", "1,2"], "not both"),
    ],
)
def test_bad_sweeps_are_one_line(args: list[str], said: str, tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["sweep", *args, "--out", str(tmp_path)])
    assert result.exit_code == 2 and said in result.output and "Traceback" not in result.output
    assert not (tmp_path / "sweep.json").exists()


@pytest.mark.slow
def test_the_embedded_engine_three_configurations_seven_loads(tmp_path: Path, smollm2_path: Path) -> None:
    """Each configuration started as lossless serve starts it and swept over seven loads, from 1 to 64
    requests a second: a CPU engine cannot serve 64 of them a second (8 tokens each is 512 tokens/s), so
    every configuration stops where its own capacity lies, whatever the machine."""
    configs = [
        "--speculative none --compile off",
        "--speculative ngram --compile off",
        "--dtype float32 --speculative none --compile off",
    ]
    args = [
        "sweep",
        *(f"--config={c}" for c in configs),
        "--rate",
        "1,2,4,8,16,32,64",
        "--requests",
        "8",
        "--max-tokens",
        "8",
        "--out",
        str(tmp_path),
        "--json",
    ]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert found["kind"] == "embedded" and len(found["configs"]) == 3
    for c in found["configs"]:
        entries = c["summary"]["endpoints"]
        assert c["error"] is None and entries[0]["requests"]["ok"] >= 1  # a time-out is data, not an error
        assert c["stopped"] is not None and entries[-1]["saturation"]["saturated"], c["name"]
        assert all(not e["saturation"]["saturated"] for e in entries[:-1])
        assert (tmp_path / c["name"] / "server.log").is_file()
    assert found["pareto"]["speed_vs_throughput"] and (tmp_path / "sweep.html").is_file()
