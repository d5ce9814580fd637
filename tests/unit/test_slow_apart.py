"""make test's scheduling (tests/support/slow_apart.py), run for real: pytest with two xdist workers over a
few files of slow and other tests that record which worker ran them. The slow ones against servers we did
not write (tests/compat) share one worker, the other slow ones the other worker, and each file's other
tests stay together on one; xdist's own loadgroup marks were silently ignored (pytest 9.2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

SUPPORT = Path(__file__).resolve().parents[1] / "support"
TEST = """import os, pytest
{mark}
@pytest.mark.parametrize("i", range(3))
def test_{name}(i, request):
    with open(os.environ["RAN_LOG"], "a") as log:
        log.write(f"{{request.node.nodeid}} {{os.environ['PYTEST_XDIST_WORKER']}}\\n")
"""


def test_each_group_of_slow_tests_has_a_worker_and_each_file_stays_together(tmp_path: Path) -> None:
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: slow\n")
    (tmp_path / "conftest.py").write_text("from slow_apart import *  # noqa: F403\n")
    (tmp_path / "tests" / "compat").mkdir(parents=True)
    files = {"test_a.py": "pytestmark = pytest.mark.slow", "test_b.py": "", "test_c.py": "", "test_d.py": ""}
    files |= {"tests/compat/test_f.py": "pytestmark = pytest.mark.slow", "tests/compat/test_g.py": ""}
    for path, mark in files.items():
        (tmp_path / path).write_text(TEST.format(name=Path(path).stem[5:], mark=mark))
    (tmp_path / "test_e.py").write_text(  # one slow test in a file of others
        TEST.format(name="e", mark="")
        + "\n@pytest.mark.slow\ndef test_e_slow(request):\n    test_e(9, request)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(SUPPORT), "RAN_LOG": str(tmp_path / "ran.log")}
    env.pop("PYTEST_XDIST_WORKER", None)
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2", "--dist", "loadgroup", "-q"]
    done = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    ran = dict(line.split() for line in (tmp_path / "ran.log").read_text().splitlines())
    assert len(ran) == 22
    ours = {w for nodeid, w in ran.items() if nodeid.startswith("test_a.py") or "e_slow" in nodeid}
    theirs = {w for nodeid, w in ran.items() if nodeid.startswith("tests/compat/test_f.py")}
    assert len(ours) == len(theirs) == 1 and ours != theirs
    for name in ("test_b", "test_c", "test_d", "test_e", "tests/compat/test_g"):
        assert len({w for n, w in ran.items() if n.startswith(f"{name}.py") and "e_slow" not in n}) == 1
