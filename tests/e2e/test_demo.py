"""``lossless demo --quick`` end to end, as a user runs it: the real embedded model, two embedded servers,
bench, verify and the HTML report, in a subprocess."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow


def test_quick_demo_summarises_and_writes_the_report(tmp_path: Path) -> None:
    out = tmp_path / "demo"
    env = {**os.environ, "NO_COLOR": "1"}
    script = Path(sys.executable).with_name("lossless")  # the installed command, as a user runs it
    cmd = [str(script)] if script.exists() else [sys.executable, "-m", "lossless.cli"]
    cmd += ["demo", "--quick", "--out", str(out)]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    stdout = done.stdout
    assert re.search(r"^speed-up .*: \d+\.\d\dx \(95% CI \d+\.\d\d-\d+\.\d\d\)", stdout, re.M), stdout
    assert re.search(r"^  grounded prompts: \d+\.\d\dx \(95% CI", stdout, re.M), stdout
    assert re.search(r"TTFT \(p50\): [+-]\d+%", stdout), stdout
    assert re.search(r"^verify: (equivalent|inconclusive) ", stdout, re.M), stdout
    report = out / "report.html"
    assert f"report: {report.resolve()}" in stdout.splitlines()
    # stdout is data: the summary only; the tables and steps went to stderr
    assert "[3/5]" in done.stderr and "lossless bench" in done.stderr and "[3/5]" not in stdout
    html = report.read_text(encoding="utf-8")
    for key in ("overview", "ttft", "speed", "timelines", "verify"):
        assert f'id="{key}"' in html
    assert html.count("<svg") >= 5 and "speculative" in html and "plain" in html
    assert {p.name for p in out.iterdir()} >= {"records.jsonl", "summary.json", "verify.json", "report.html"}
