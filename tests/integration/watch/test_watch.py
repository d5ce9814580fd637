"""``lossless watch`` and ``history`` against a scripted server over real HTTP: a latency shift halfway
through a watch is flagged; killing a watch (SIGKILL, SIGINT, SIGTERM) loses no finished run; two watches
append to one database at once and leave it whole; cron mode appends one run per call and records an
unreachable endpoint."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from scripted_server import ScriptedServer

from lossless.bench.options import BenchOptions
from lossless.cli import main
from lossless.watch import run as stage
from lossless.watch.schedule import Schedule

LOSSLESS = str(Path(sys.executable).parent / "lossless")
FAST = {"head_delay": 0.02, "steps": [[0.005, "content", 1]] * 3}
SLOW = {**FAST, "head_delay": 0.2}


def _runs(db: Path) -> list[tuple[int, str, str | None]]:
    """(number, run id, error) of the runs stored so far: none while the database is being made."""
    if not db.exists():
        return []
    connection = sqlite3.connect(db, timeout=30)
    try:
        return connection.execute("SELECT id, run_id, error FROM runs ORDER BY id").fetchall()
    except sqlite3.OperationalError:  # the schema is not there yet
        return []
    finally:
        connection.close()


def _intact(db: Path) -> None:
    connection = sqlite3.connect(db, timeout=30)
    try:
        assert connection.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    finally:
        connection.close()


def _history(db: Path, *args: str) -> Result:
    done = CliRunner().invoke(main, ["history", "--db", str(db), *args])
    assert done.exit_code == 0, done.output
    return done


def _watch(server: ScriptedServer, db: Path, *args: str) -> subprocess.Popen[str]:
    argv = [LOSSLESS, "watch", server.url, "--model", "m", "--requests", "3", "--db", str(db), *args]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _slow_last(server: ScriptedServer, tmp_path: Path) -> str:
    """A suite of three prompts whose third waits 0.8 s for its first token: once a run has recorded two
    requests, it is surely in the middle of its third (the test has 0.8 s to act)."""
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(f'{{"prompt": "p{i}"}}\n' for i in range(3)))
    server.script(FAST, p2={**FAST, "head_delay": 0.8})
    return f"file:{prompts}"


def _until(condition: object, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():  # type: ignore[operator]
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def _in_progress(db: Path) -> bool:
    """A run is under way and has recorded two requests (of ``_slow_last``'s three)."""
    return any(p.read_text().count("\n") >= 2 for p in db.parent.glob("*.runs/*.partial/records.jsonl"))


def test_a_latency_shift_is_flagged(server: ScriptedServer, tmp_path: Path) -> None:
    """8 runs with a 20 ms first token, then the server slows to 200 ms for 4 more, in one watch."""
    server.script(FAST)
    db = tmp_path / "h.sqlite"
    bench = BenchOptions(urls=(server.url,), model="m", requests=3)
    options = stage.WatchOptions(bench, Schedule(every=0.05, runs=12), db)
    lines: list[str] = []

    def on_run(outcome: stage.Outcome) -> None:
        assert outcome.run is not None and outcome.run.error is None
        lines.append(f"{outcome.run.number} {outcome.run.results[0].values['ttft_p50_ms']:.0f}")
        if outcome.index == 7:
            server.script(SLOW)  # before the 9th run starts: the schedule waits for on_run

    outcomes = stage.run(options, on_run)
    assert len(outcomes) == 12 and [r[0] for r in _runs(db)] == list(range(1, 13)), lines
    data = json.loads(_history(db, "--json").stdout)
    (series,) = data["series"]
    ttft = {f["run"] for f in series["flags"] if f["key"] == "ttft_p50_ms"}
    assert {9, 10, 11} <= ttft <= {9, 10, 11, 12}, lines
    assert all(f["worse"] for f in series["flags"] if f["key"] in ("ttft_p50_ms", "e2e_p50_ms"))
    changes = {c["key"]: c for c in series["change_points"]}
    for key in ("ttft_p50_ms", "e2e_p50_ms"):
        assert changes[key]["run"] == 9 and changes[key]["change"]["p"] < 0.05 and changes[key]["worse"]
        assert changes[key]["change"]["after"] > 5 * changes[key]["change"]["before"]
    table = _history(db, "--last", "0").stdout  # stdout: the table, the change points, the rules
    assert "TTFT p50 high (worse)" in table and "change point:" in table and "Pettitt's test" in table
    page = tmp_path / "trend.html"
    _history(db, "--html", str(page))
    html = page.read_text()
    assert html.count("<svg") == 4 and "<script" not in html and "outside band" in html
    assert "change (p=0.0" in html and "Pettitt" in html and "1.4826 x MAD" in html
    compared = json.loads(_history(db, "--compare", "1", "#12", "--json").stdout)
    ttft_p50 = next(c for c in compared["comparisons"] if (c["metric"], c["stat"]) == ("ttft_ms", "p50"))
    assert ttft_p50["ratio"] > 3  # run 12 against run 1, from their records
    for number, run_id, _ in _runs(db):  # every run's files are in its folder
        folder = tmp_path / "h.sqlite.runs" / run_id
        assert {p.name for p in folder.iterdir()} == {"records.jsonl", "summary.json", "summary.csv"}, number


def test_sigkill_mid_run_keeps_every_finished_run(server: ScriptedServer, tmp_path: Path) -> None:
    db = tmp_path / "h.sqlite"
    proc = _watch(server, db, "--every", "0.05s", "--runs", "50", "--suite", _slow_last(server, tmp_path))
    try:
        _until(lambda: len(_runs(db)) >= 2, "two runs")
        _until(lambda: _in_progress(db), "a run under way")
        proc.kill()
        proc.wait(30)
    finally:
        proc.kill()
        proc.communicate(timeout=30)
    _intact(db)
    runs = _runs(db)
    assert len(runs) >= 2 and all(error is None for _, _, error in runs)
    folders = sorted(p.name for p in (tmp_path / "h.sqlite.runs").iterdir())
    assert [f for f in folders if not f.endswith(".partial")] == sorted(r[1] for r in runs)
    assert len([f for f in folders if f.endswith(".partial")]) == 1  # the run killed: files, no row
    for _, run_id, _ in runs:
        summary = json.loads((tmp_path / "h.sqlite.runs" / run_id / "summary.json").read_text())
        assert summary["endpoints"][0]["requests"]["ok"] == 3 and not summary["interrupted"]
    done = _history(db)
    assert done.stdout.count("127.0.0.1") == len(runs) and "cut short or killed" in done.stdout


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_mid_run_keeps_finished_runs_and_drops_that_one(
    server: ScriptedServer, tmp_path: Path, sig: signal.Signals
) -> None:
    db = tmp_path / "h.sqlite"
    proc = _watch(server, db, "--every", "0.05s", "--runs", "50", "--suite", _slow_last(server, tmp_path))
    try:
        _until(lambda: len(_runs(db)) >= 1, "a run")
        _until(lambda: _in_progress(db), "a run under way")
        before = len(_runs(db))
        proc.send_signal(sig)
        _, stderr = proc.communicate(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode == 130, stderr
    assert "interrupted; not added to the history" in stderr and "Traceback" not in stderr
    _intact(db)
    assert len(_runs(db)) == before
    (partial,) = (tmp_path / "h.sqlite.runs").glob("*.partial")
    assert json.loads((partial / "summary.json").read_text())["interrupted"] is True
    assert partial.name.removesuffix(".partial") not in {r[1] for r in _runs(db)}


def test_sigterm_between_runs_ends_the_watch(server: ScriptedServer, tmp_path: Path) -> None:
    server.script(FAST)
    db = tmp_path / "h.sqlite"
    proc = _watch(server, db, "--every", "1m", "--runs", "3")
    try:
        _until(lambda: len(_runs(db)) == 1, "the first run")
        time.sleep(0.2)  # into the wait for the second
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=30)  # well before the next run is due
    finally:
        proc.kill()
    assert proc.returncode == 130 and "interrupted" in stderr and "Traceback" not in stderr
    assert len(_runs(db)) == 1 and not list((tmp_path / "h.sqlite.runs").glob("*.partial"))


def test_two_watches_share_one_database(server: ScriptedServer, tmp_path: Path) -> None:
    server.script({"steps": [[0.0, "content", 1]] * 2})
    db = tmp_path / "shared.sqlite"
    procs = [_watch(server, db, "--every", "0.05s", "--runs", "8", "--requests", "2") for _ in range(2)]
    results = [p.communicate(timeout=120) for p in procs]
    for p, (stdout, stderr) in zip(procs, results, strict=True):
        assert p.returncode == 0, stderr
        assert stdout.strip() == str(db) and stderr.count("(#") == 8
    _intact(db)
    runs = _runs(db)
    assert len(runs) == 16 and len({r[1] for r in runs}) == 16
    connection = sqlite3.connect(db)
    assert connection.execute("SELECT count(*) FROM results").fetchone() == (16,)
    connection.close()
    assert all((tmp_path / "shared.sqlite.runs" / r[1] / "summary.json").exists() for r in runs)


def test_cron_mode_and_an_unreachable_endpoint(server: ScriptedServer, tmp_path: Path) -> None:
    server.script(FAST)
    db = tmp_path / "cron.sqlite"
    for _ in range(2):  # no --every: one run per call
        done = CliRunner().invoke(
            main, ["watch", server.url, "--model", "m", "--requests", "2", "--db", str(db)]
        )
        assert done.exit_code == 0, done.output
        assert done.stdout == f"{db}\n" and "watch: one run" in done.stderr
    done = CliRunner().invoke(main, ["watch", "http://127.0.0.1:9/v1", "--model", "m", "--db", str(db)])
    assert done.exit_code == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines()[-1].startswith("error: 1 of 1 runs measured nothing: endpoint")
    assert [r[2] is None for r in _runs(db)] == [True, True, False]
    # a scheduled watch whose first run reaches nothing stops there (a typo, likelier than an outage)
    done = CliRunner().invoke(
        main,
        ["watch", "http://127.0.0.1:9/v1", "--model", "m", "--db", str(db), "--every", "1h", "--runs", "3"],
    )
    assert done.exit_code == 2 and "error: 1 of 1 runs measured nothing" in done.stderr
    assert len(_runs(db)) == 4
    table = _history(db).stdout
    assert "measured nothing: endpoint" in table and table.count("127.0.0.1:") >= 2
