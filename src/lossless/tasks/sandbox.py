"""Run untrusted-ish Python (a model's code plus its unit tests) in a limited child process.

What one run gets:
- a throw-away directory (a fresh temporary directory, removed afterwards) as its working directory,
  ``HOME`` and ``TMPDIR``, with the program file one level above it;
- ``python -I``: no user site-packages, no ``PYTHON*`` variables, the script's directory not on the path;
- an environment of a handful of fixed variables: nothing of the parent's passes (no API keys);
- resource limits (``setrlimit``, set by ``sandbox_boot.py`` in the child before the program runs):
  address space, CPU seconds, open files, size of any one file written, no core dumps; and a wall-time
  limit, after which the whole process group is killed (also after a clean exit, for anything left);
- an audit hook (PEP 578), installed before the program runs, that refuses sockets other than
  ``socketpair``'s (so no TCP/UDP, no DNS, no connecting to local Unix sockets), starting processes
  (``subprocess``, ``os.system``, ``os.exec*``, ``os.fork``, ``os.posix_spawn``), creating, writing,
  renaming or deleting files outside the throw-away directory, and reading other processes'
  ``/proc/PID/*`` (the parent's ``environ`` holds its secrets).

What it does not stop - this is a guard against accidents and careless code, not a security boundary
against hostile code:
- native code: ``ctypes`` or a C extension can make any system call directly (``socket(2)``,
  ``execve(2)``, ``open(2)``) and can even switch the audit hook off; the hook sees only calls made
  through Python's own functions;
- reading: any file the user running lossless can read (``~/.netrc``, key files) can be read and
  printed, and the tails of stdout and stderr come back to the caller;
- the child runs as the same user on the same file system and kernel: no namespaces, seccomp, cgroups
  or chroot; absolute paths into places the user may write are refused only by the hook above;
- disk: each file is capped, not their number (many capped files can still fill a disk);
- CPU share and memory bandwidth: a run can slow the machine, within its time limits.
Run hostile code in a container or a virtual machine.

POSIX only (``resource``, process groups).
"""

from __future__ import annotations

import contextlib
import functools
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import BinaryIO, Literal

from lossless.tasks.sandbox_boot import EXIT_MEMORY, MEMORY_NOTE

Status = Literal["passed", "failed", "timeout", "crashed"]
# Fixed, not inherited: BLAS libraries that numpy may load start a thread (and a large address-space
# reservation) per core, which trips the memory limit on a big machine.
_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
_ENV |= {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass(frozen=True)
class SandboxLimits:
    seconds: float = 10.0  # wall time, from start to kill
    memory_mb: int = 1024  # address space (RLIMIT_AS), the interpreter's own included
    cpu_seconds: int | None = None  # RLIMIT_CPU; None: the wall time rounded up, plus one
    open_files: int = 64  # RLIMIT_NOFILE
    file_mb: int = 16  # the largest file it may write (RLIMIT_FSIZE)


@dataclass(frozen=True)
class SandboxResult:
    status: Status
    reason: str  # one line
    returncode: int | None  # negative: killed by that signal
    seconds: float  # wall time of the child
    stderr_tail: str  # at most tail_chars characters, from the end
    stdout_tail: str


def run_python(
    code: str,
    tests: str = "",
    *,
    limits: SandboxLimits | None = None,
    python: str = sys.executable,
    tail_chars: int = 2000,
) -> SandboxResult:
    """Run ``code`` then ``tests`` as one program; passed means it exited with status 0."""
    limits = limits or SandboxLimits()
    root = Path(tempfile.mkdtemp(prefix="lossless-sandbox-"))
    try:
        work = root / "work"
        work.mkdir()
        program = root / "program.py"
        program.write_text(code.rstrip("\n") + "\n\n" + tests, encoding="utf-8")
        cpu = limits.cpu_seconds or math.ceil(limits.seconds) + 1
        child_limits = {
            "root": str(root),
            "memory_mb": limits.memory_mb,
            "cpu_seconds": cpu,
            "open_files": limits.open_files,
            "file_mb": limits.file_mb,
        }
        env = _ENV | {"HOME": str(work), "TMPDIR": str(work)}
        argv = [python, "-I", "-c", _boot_source(), str(program), json.dumps(child_limits)]
        with open(root / "stdout", "w+b") as out, open(root / "stderr", "w+b") as err:
            returncode, seconds, timed_out = _run(argv, work, env, out, err, limits.seconds)
            stdout, stderr = _tail(out, tail_chars), _tail(err, tail_chars)
        status, reason = _verdict(returncode, timed_out, limits, stderr)
        return SandboxResult(status, reason, returncode, seconds, stderr, stdout)
    finally:
        _remove(root)


@functools.cache
def _boot_source() -> str:
    return resources.files("lossless.tasks").joinpath("sandbox_boot.py").read_text(encoding="utf-8")


def _run(
    argv: list[str], cwd: Path, env: dict[str, str], out: BinaryIO, err: BinaryIO, seconds: float
) -> tuple[int | None, float, bool]:
    started = time.perf_counter()
    # its own session: one killpg ends the child and anything it started
    child = subprocess.Popen(
        argv, cwd=cwd, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=err, start_new_session=True
    )
    timed_out = False
    try:
        child.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        # also when it exited: whatever it left running in its group goes with it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, signal.SIGKILL)
        child.wait()
    return child.returncode, time.perf_counter() - started, timed_out


def _tail(file: BinaryIO, chars: int) -> str:
    # bytes, not characters, are bounded here; 4 a character covers any UTF-8
    size = file.seek(0, os.SEEK_END)
    file.seek(max(0, size - 4 * chars))
    return file.read().decode("utf-8", errors="replace")[-chars:]


def _verdict(
    returncode: int | None, timed_out: bool, limits: SandboxLimits, stderr: str
) -> tuple[Status, str]:
    if timed_out:
        return "timeout", f"killed after the wall-time limit of {limits.seconds:g} s"
    if returncode == 0:
        return "passed", "exited with status 0"
    if returncode == -signal.SIGXCPU:
        return "timeout", "killed at the CPU-time limit"
    if returncode == EXIT_MEMORY and stderr.rstrip().endswith(MEMORY_NOTE):
        return "crashed", f"ran out of its memory limit ({limits.memory_mb} MB)"
    if returncode is not None and returncode < 0:
        return "crashed", f"killed by {signal.Signals(-returncode).name}"
    last = next((line for line in reversed(stderr.splitlines()) if line.strip()), "")
    return "failed", f"exited with status {returncode}" + (f": {last.strip()[:200]}" if last else "")


def _remove(root: Path) -> None:
    """The child may have taken away its own permissions on what it made; give them back first."""
    for top, dirs, _ in os.walk(root):
        for name in dirs:
            path = os.path.join(top, name)
            if not os.path.islink(path):  # chmod would follow it out of the directory
                with contextlib.suppress(OSError):
                    os.chmod(path, 0o700)
    shutil.rmtree(root, ignore_errors=True)
