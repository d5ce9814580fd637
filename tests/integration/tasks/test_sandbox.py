"""The sandbox runs real child processes: HumanEval's canonical solutions all pass, and broken or
misbehaving programs fail with the right status without harming the run (or the machine).

Time limits are generous where a program should pass (a busy 2-core machine slows a good run) and short
only for the programs that loop on purpose."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from lossless.tasks.checkers import PythonTests, check
from lossless.tasks.sandbox import SandboxLimits, SandboxResult, run_python
from lossless.tasks.sets import humaneval

GENEROUS = SandboxLimits(seconds=60.0)
SHORT = SandboxLimits(seconds=2.0)


def _run(code: str, tests: str = "", limits: SandboxLimits = GENEROUS) -> SandboxResult:
    return run_python(code, tests, limits=limits)


@pytest.mark.slow
def test_all_humaneval_canonical_solutions_pass() -> None:
    tasks = humaneval()
    # the problems' own limits (15 s each) are far above what a correct solution needs here
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda t: (t.id, check(t.checker, t.reference)), tasks))
    failed = [(task_id, r.reason) for task_id, r in results if not r.passed]
    assert len(results) == 164 and failed == []


def test_a_chat_answer_with_the_whole_function_passes_and_a_wrong_one_fails() -> None:
    task = humaneval()[0]
    assert isinstance(task.checker, PythonTests) and task.reference
    whole = f"Here it is:\n```python\n{task.checker.prefix}{task.reference}```\nDone."
    assert check(task.checker, whole).passed
    wrong = check(task.checker, "    return True\n")
    assert not wrong.passed and wrong.reason.startswith("failed:")
    assert "AssertionError" in wrong.details["stderr_tail"]


def test_a_passing_program_and_its_output() -> None:
    result = _run("def add(a, b):\n    return a + b\n", "assert add(2, 3) == 5\nprint('ok')")
    assert result.status == "passed" and result.returncode == 0
    assert result.stdout_tail == "ok\n" and result.stderr_tail == ""


def test_a_wrong_answer_fails_with_its_assertion() -> None:
    result = _run("def add(a, b):\n    return a - b\n", "assert add(2, 3) == 5, 'add is wrong'")
    assert result.status == "failed" and result.returncode == 1
    assert result.reason == "exited with status 1: AssertionError: add is wrong"


def test_a_syntax_error_fails() -> None:
    result = _run("def add(a, b)\n    return a + b\n", "assert add(2, 3) == 5")
    assert result.status == "failed" and "SyntaxError" in result.reason


def test_an_endless_loop_is_killed_at_the_wall_time_limit() -> None:
    started = time.perf_counter()
    result = _run("while True:\n    pass\n", limits=SHORT)
    assert result.status == "timeout" and "wall-time limit of 2 s" in result.reason
    assert time.perf_counter() - started < 30  # killed, not waited for


def test_a_program_waiting_forever_on_a_thread_is_killed_too() -> None:
    result = _run(
        "import threading, time\nthreading.Thread(target=time.sleep, args=(600,)).start()\n", limits=SHORT
    )
    assert result.status == "timeout"


def test_the_cpu_limit_ends_a_spin_the_wall_clock_would_allow() -> None:
    result = _run("while True:\n    pass\n", limits=SandboxLimits(seconds=60.0, cpu_seconds=1))
    assert result.status == "timeout" and result.reason == "killed at the CPU-time limit"


def test_unbounded_allocation_hits_the_memory_limit() -> None:
    code = "chunks = []\nwhile True:\n    chunks.append(bytearray(50_000_000))\n"
    result = _run(code, limits=SandboxLimits(seconds=60.0, memory_mb=256))
    assert result.status == "crashed" and result.reason == "ran out of its memory limit (256 MB)"


@pytest.mark.parametrize(
    "code",
    [
        "import socket\nsocket.create_connection(('127.0.0.1', 9), timeout=1)",
        "import socket\nsocket.socket(socket.AF_INET, socket.SOCK_STREAM)",
        "import _socket\n_socket.socket()",  # under the socket module, still refused
        "import urllib.request\nurllib.request.urlopen('http://example.com', timeout=1)",
        "import socket\nsocket.getaddrinfo('example.com', 80)",
        "import socket\ns = socket.socket(socket.AF_UNIX)\ns.connect('/var/run/docker.sock')",
    ],
)
def test_network_is_refused(code: str) -> None:
    result = _run(code)
    assert result.status == "failed"
    assert "sandbox: network access is refused" in result.reason  # urllib wraps it in a URLError


def test_asyncio_still_works() -> None:
    """Its event loop wakes itself through a socketpair: a local pair of Unix sockets is allowed."""
    result = _run("import asyncio\nasync def f():\n    return 7\nassert asyncio.run(f()) == 7\n")
    assert result.status == "passed", result.stderr_tail


def test_starting_processes_is_refused() -> None:
    for code in ("import subprocess\nsubprocess.run(['true'])", "import os\nos.system('true')"):
        result = _run(code)
        assert result.status == "failed" and "starting processes is refused" in result.reason


def test_files_written_stay_in_the_throw_away_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    code = (
        "import os\nprint(os.getcwd())\n"
        "open('here.txt', 'w').write('x')\nopen('../up.txt', 'w').write('x')\n"
        "os.makedirs('sub/dir')\nopen('sub/dir/deep.txt', 'w').write('x')\n"
    )
    result = _run(code)
    assert result.status == "passed", result.stderr_tail
    work = Path(result.stdout_tail.strip())
    assert work.name == "work" and not work.parent.exists()  # the whole directory is gone
    assert list(tmp_path.iterdir()) == []  # nothing landed where the caller stood


def test_writing_or_deleting_outside_is_refused(tmp_path: Path) -> None:
    victim = tmp_path / "keep.txt"
    victim.write_text("precious")
    attempts = [
        f"open({str(victim)!r}, 'w')",
        f"open({str(tmp_path / 'new.txt')!r}, 'x')",
        f"import os\nos.remove({str(victim)!r})",
        f"import shutil\nshutil.rmtree({str(tmp_path)!r})",
        f"import os\nos.rename({str(victim)!r}, 'stolen.txt')",
        f"import os\nfd = os.open({str(tmp_path)!r}, os.O_RDONLY)",  # a directory to write relative to
    ]
    for code in attempts:
        result = _run(code)
        assert result.status == "failed" and "PermissionError: sandbox:" in result.reason, code
    assert victim.read_text() == "precious" and sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]


def test_reading_outside_is_not_stopped(tmp_path: Path) -> None:
    """Said plainly in sandbox.py: files the user can read, the program can read and print."""
    (tmp_path / "notes.txt").write_text("readable")
    result = _run(f"print(open({str(tmp_path / 'notes.txt')!r}).read())")
    assert result.status == "passed" and result.stdout_tail == "readable\n"


def test_secrets_in_the_environment_do_not_reach_the_program(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-sandbox-test-secret")
    code = (
        "import os\nassert os.environ.get('OPENAI_API_KEY') is None\n"
        "assert not any('sk-' in v for v in os.environ.values())\n"
        "print(sorted(os.environ))\n"
        "try:\n    open(f'/proc/{os.getppid()}/environ', 'rb').read()\n"
        "except PermissionError as exc:\n    print('refused', exc)\n"
    )
    result = _run(code)
    assert result.status == "passed", result.stderr_tail
    assert "refused sandbox: other processes' /proc entries are refused" in result.stdout_tail
    assert "sk-sandbox-test-secret" not in result.stdout_tail + result.stderr_tail


def test_output_comes_back_bounded() -> None:
    result = run_python(
        "import sys\nsys.stderr.write('x' * 1_000_000 + 'END')\nraise SystemExit(3)", tail_chars=100
    )
    assert result.status == "failed" and result.returncode == 3
    assert len(result.stderr_tail) == 100 and result.stderr_tail.endswith("END")


def test_a_huge_file_is_cut_at_the_file_size_limit() -> None:
    code = "with open('big', 'wb') as f:\n    f.write(b'x' * 20_000_000)\n"
    result = _run(code, limits=SandboxLimits(seconds=60.0, file_mb=1))
    assert result.status == "failed" and "File too large" in result.reason


def test_a_crash_by_signal_is_crashed() -> None:
    result = _run("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)")
    assert result.status == "crashed" and result.reason == "killed by SIGSEGV"


def test_nothing_is_left_behind_after_a_timeout() -> None:
    code = "import os\nprint(os.getcwd(), flush=True)\nopen('x', 'w').write('1')\nwhile True:\n    pass\n"
    result = _run(code, limits=SHORT)
    work = Path(result.stdout_tail.strip())
    assert result.status == "timeout" and work.name == "work" and not work.parent.exists()
