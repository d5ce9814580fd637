"""A bench run killed midway (SIGKILL, SIGTERM, SIGINT once and twice), as `lossless bench` in its own
process against the scripted server: every request it sent is recorded whole, SIGTERM and SIGINT leave a
summary marked interrupted, and `lossless report` renders whatever was left."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scripted_server import ScriptedServer

LOSSLESS = str(Path(sys.executable).parent / "lossless")
pytestmark = pytest.mark.slow


def bench_then(
    server: ScriptedServer, out: Path, signals: list[signal.Signals]
) -> subprocess.CompletedProcess[str]:
    """Start a long bench, wait for a few finished requests, send ``signals`` (0.05 s apart), wait."""
    server.script({"steps": [[0.02, "content", 1]] * 10})
    argv = [LOSSLESS, "bench", server.url, "--model", "m", "--requests", "400", "--concurrency", "4"]
    proc = subprocess.Popen(
        [*argv, "--out", str(out)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    records = out / "records.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not records.exists() or records.read_text().count("\n") < 8):
        time.sleep(0.05)
    for sig in signals:
        proc.send_signal(sig)
        time.sleep(0.05)
    stdout, stderr = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def records_of(out: Path) -> list[dict]:
    text = (out / "records.jsonl").read_text()
    assert text.endswith("\n")  # no line cut in half
    return [json.loads(line) for line in text.splitlines()]


def renders(out: Path) -> None:
    done = subprocess.run([LOSSLESS, "report", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and (out / "report.html").stat().st_size > 1000


@pytest.mark.parametrize(
    "signals",
    [[signal.SIGTERM], [signal.SIGINT], [signal.SIGINT, signal.SIGINT]],
    ids=["term", "int", "int-int"],
)
def test_interrupted_runs_keep_every_request_and_a_summary(
    server: ScriptedServer, tmp_path: Path, signals: list[signal.Signals]
) -> None:
    done = bench_then(server, tmp_path, signals)
    assert done.returncode == 130, done.stderr
    assert "Traceback" not in done.stderr
    records = records_of(tmp_path)
    sent = len(server.sent())
    if len(signals) == 1:  # each request the server saw: finished, or cancelled, never lost
        assert len(records) == sent
    else:  # the second Ctrl-C may cut the cancelled ones' records short; never a finished one's
        assert sent - 4 <= len(records) <= sent
    assert 8 <= sent < 400
    assert {r["error_kind"] for r in records} <= {None, "cancelled"}
    if len(signals) == 1:  # a second Ctrl-C may land while the summary is being written: not promised
        summary = json.loads((tmp_path / "summary.json").read_text())
        assert summary["interrupted"] is True
        assert summary["endpoints"][0]["requests"]["ok"] == sum(r["error_kind"] is None for r in records)
    renders(tmp_path)


def test_sigkill_leaves_whole_lines_that_report_renders(server: ScriptedServer, tmp_path: Path) -> None:
    done = bench_then(server, tmp_path, [signal.SIGKILL])
    assert done.returncode == -signal.SIGKILL
    records = records_of(tmp_path)
    assert len(records) >= 8 and not (tmp_path / "summary.json").exists()
    renders(tmp_path)
