"""`lossless serve` as a user runs it: one line on stderr with the URL once ready, nothing on stdout,
loopback by default, a clean exit on Ctrl-C."""

from __future__ import annotations

import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx


def test_serve_announces_its_url_on_stderr_and_stops_on_ctrl_c(tiny_checkpoint: Path) -> None:
    cmd = [sys.executable, "-m", "lossless.cli", "serve", "--model", str(tiny_checkpoint), "--port", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = _read_line(proc, timeout_s=60)
        assert line.startswith("lossless: serving ") and " at http://127.0.0.1:" in line
        url = line.rsplit(" ", 1)[-1]
        with httpx.Client(trust_env=False, timeout=10) as client:
            assert client.get(url + "/models").json()["data"][0]["id"]
            assert client.get(url.removesuffix("/v1") + "/health").status_code == 200
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert err.strip().endswith("lossless: stopped")
    assert out == ""
    assert "Traceback" not in err


def _read_line(proc: subprocess.Popen[str], timeout_s: float) -> str:
    assert proc.stderr is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], 0.1)
        if ready:
            return proc.stderr.readline().strip()
        assert proc.poll() is None, f"serve exited with {proc.returncode}: {proc.stderr.read()}"
    raise AssertionError("serve did not announce its URL in time")
