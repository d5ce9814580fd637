"""``serve --compile background`` as a user meets it: ready at once on the eager path, the compiled graphs
swapped in when a child process has built them (the fingerprint says so), a second start that reuses
them without a child, and a killed child that leaves the server serving eagerly and the cache unmarked."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from lossless.engine.compile_cache import MARKER

pytestmark = pytest.mark.slow  # a real compile of the tiny model: ~20 s on 2 cores

BODY = {"model": "tiny-llama", "prompt": "Hello there", "max_tokens": 4, "temperature": 0}


class Serve:
    def __init__(self, model: Path, home: Path, speculative: str = "none") -> None:
        cmd = [sys.executable, "-m", "lossless.cli", "serve", "--model", str(model), "--port", "0"]
        cmd += ["--speculative", speculative]  # and the default --compile: background
        env = {**os.environ, "LOSSLESS_HOME": str(home)}
        err = subprocess.PIPE
        self.proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, text=True, env=env)
        self.said: list[str] = []  # stderr's lines so far, read by a thread (select would miss buffered ones)
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.url = self.wait_for("lossless: serving ", 120).rsplit(" ", 1)[-1]

    def _read(self) -> None:
        assert self.proc.stderr is not None
        with self.proc.stderr:  # closed at the end of the stream: the process has gone
            for line in self.proc.stderr:
                self.said.append(line.strip())

    def wait_for(self, prefix: str, timeout_s: float) -> str:
        """The first line on stderr that starts with ``prefix`` (already said, or said within the time)."""
        deadline = time.monotonic() + timeout_s
        while not (found := [line for line in self.said if line.startswith(prefix)]):
            assert self.proc.poll() is None, f"serve exited ({self.proc.returncode}); said: {self.said}"
            assert time.monotonic() < deadline, f"no {prefix!r} line in time; said: {self.said}"
            time.sleep(0.1)
        return found[0]

    def compiling(self) -> tuple[int, Path]:
        """The background child's pid and cache folder, from the line that says it started."""
        line = self.wait_for("lossless: compiling the forward passes in the background (pid ", 30)
        found = re.search(r"\(pid (\d+), into (.+)\); serving eagerly", line)
        assert found is not None, line
        return int(found.group(1)), Path(found.group(2))

    def complete(self) -> dict:
        with httpx.Client(trust_env=False, timeout=120) as client:
            reply = client.post(self.url + "/completions", json={**BODY, "model": self.model_name()})
        assert reply.status_code == 200, reply.text
        return reply.json()

    def model_name(self) -> str:
        with httpx.Client(trust_env=False, timeout=30) as client:
            return client.get(self.url + "/models").json()["data"][0]["id"]

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(timeout=60)
        finally:
            self.proc.kill()
        self._reader.join(10)
        assert self.proc.returncode == 0, self.said
        assert not any("Traceback" in line for line in self.said), self.said


@pytest.fixture
def serving(tiny_checkpoint: Path, tmp_path: Path) -> Iterator[list[Serve]]:
    started: list[Serve] = []
    yield started
    for server in started:  # a test that failed half-way leaves no server behind
        if server.proc.poll() is None:
            server.proc.kill()
            server.proc.wait(30)


def test_ready_at_once_then_compiled_then_a_second_start_reuses_the_cache(
    tiny_checkpoint: Path, tmp_path: Path, serving: list[Serve]
) -> None:
    first = Serve(tiny_checkpoint, tmp_path)
    serving.append(first)
    _, folder = first.compiling()
    assert folder.parent == tmp_path / "compiled"
    eager = first.complete()  # answered at once, eagerly: the child has yet to import torch
    assert "-compiled" not in eager["system_fingerprint"]
    swapped = first.wait_for("lossless: compiled forward passes in use, ", 400)
    compiled = first.complete()
    assert compiled["system_fingerprint"] == eager["system_fingerprint"].replace("-none", "-compiled-none")
    assert swapped.endswith(f"(system_fingerprint {compiled['system_fingerprint']})")
    assert (folder / MARKER).is_file()
    first.stop()

    second = Serve(tiny_checkpoint, tmp_path)  # the same configuration: the cache is complete
    serving.append(second)
    second.wait_for("lossless: compiled forward passes in use, ", 400)
    assert not any("in the background (pid" in line for line in second.said), second.said
    assert second.complete()["system_fingerprint"] == compiled["system_fingerprint"]
    second.stop()


def test_a_killed_compile_leaves_the_server_eager_and_the_cache_unmarked(
    tiny_checkpoint: Path, tmp_path: Path, serving: list[Serve]
) -> None:
    server = Serve(tiny_checkpoint, tmp_path)
    serving.append(server)
    pid, folder = server.compiling()
    os.kill(pid, signal.SIGKILL)
    failed = server.wait_for("lossless: background compile failed", 60)
    assert failed == "lossless: background compile failed (killed by signal 9); serving eagerly"
    assert "-compiled" not in server.complete()["system_fingerprint"]
    assert not (folder / MARKER).exists()
    server.stop()


def test_models_pull_compile_prepares_what_serve_then_reuses(
    tiny_checkpoint: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, serving: list[Serve]
) -> None:
    """`prepare_compiled` (what ``models pull --compile`` runs for an embedded model) fills the folder
    that ``lossless serve`` with no --compile option then uses without a child."""
    import torch

    from lossless.server.main import prepare_compiled

    monkeypatch.setenv("LOSSLESS_HOME", str(tmp_path))
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    # the thread count is part of the key: here, what a fresh `lossless serve` process starts with
    fresh = [sys.executable, "-c", "import torch; print(torch.get_num_threads())"]
    threads = int(subprocess.run(fresh, capture_output=True, text=True, check=True).stdout)
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        folder, seconds = prepare_compiled(str(tiny_checkpoint))
        assert seconds is not None and (folder / MARKER).is_file()
        assert prepare_compiled(str(tiny_checkpoint)) == (folder, None)  # complete already
    finally:
        torch.set_num_threads(before)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR")
    server = Serve(tiny_checkpoint, tmp_path, speculative="auto")
    serving.append(server)
    server.wait_for("lossless: compiled forward passes in use, ", 400)
    assert not any("in the background (pid" in line for line in server.said), server.said
    server.stop()


def test_sigterm_ends_the_compile_child_and_all_it_started(
    smollm2_path: Path, tmp_path: Path, serving: list[Serve]
) -> None:
    """``kill PID`` (SIGTERM, what systemd, docker and a shell's kill send) stops the server as Ctrl-C
    does: the background compile child, and whatever it started (inductor's compile workers), end with
    it rather than run on for minutes as orphans. The real model, so that the child is busy for minutes."""
    from lossless.models import home

    built = home() / "kernels"  # the int4 kernel built once for this machine: not rebuilt in the test
    if built.is_dir():
        (tmp_path / "kernels").symlink_to(built)
    server = Serve(smollm2_path, tmp_path)
    serving.append(server)
    child, _ = server.compiling()
    deadline = time.monotonic() + 120  # wait for the child's own children, if it starts any in time
    while not _descendants(child) and time.monotonic() < deadline and _alive(child):
        time.sleep(0.5)
    started = {child, *_descendants(server.proc.pid)}
    server.proc.send_signal(signal.SIGTERM)
    server.proc.wait(timeout=60)
    assert _ended(started) == [], f"still running after the server stopped, of {sorted(started)}"
    assert server.proc.returncode == 0, server.said
    server._reader.join(10)
    assert server.said[-1] == "lossless: stopped", server.said


def test_a_killed_server_takes_its_compile_child_with_it(
    tiny_checkpoint: Path, tmp_path: Path, serving: list[Serve]
) -> None:
    """SIGKILL leaves the server no time to stop anything: the child ends by itself (its parent-death
    signal), rather than compile on for nobody."""
    server = Serve(tiny_checkpoint, tmp_path)
    serving.append(server)
    child, _ = server.compiling()
    server.proc.kill()
    server.proc.wait(timeout=30)
    assert _ended({child}) == []


def _ended(pids: set[int], timeout_s: float = 10) -> list[int]:
    """Those of ``pids`` still running after up to ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while (left := sorted(p for p in pids if _alive(p))) and time.monotonic() < deadline:
        time.sleep(0.2)
    return left


def _stat(pid: int) -> list[str] | None:
    """/proc/PID/stat's fields after the command name (state, ppid, ...); None once the process is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text.rsplit(")", 1)[1].split()


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] not in ("Z", "X")  # a zombie has ended, unreaped


def _descendants(pid: int) -> set[int]:
    parent = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            parent[int(entry.name)] = int(fields[1])
    found, frontier = set(), {pid}
    while frontier:
        frontier = {p for p, pp in parent.items() if pp in frontier} - found
        found |= frontier
    return found
