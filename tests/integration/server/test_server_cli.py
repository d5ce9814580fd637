"""`lossless serve` as a user runs it: one line on stderr with the URL once ready, nothing on stdout,
loopback by default, a clean exit on Ctrl-C."""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from tiny_gguf import Q, write_gguf

from lossless.engine.cpu import native_bfloat16
from lossless.engine.weights.packed import can_pack
from lossless.engine.weights.quant import kernel


def test_serve_announces_its_url_on_stderr_and_stops_on_ctrl_c(tiny_checkpoint: Path, tmp_path: Path) -> None:
    cmd = [sys.executable, "-m", "lossless.cli", "serve", "--model", str(tiny_checkpoint), "--port", "0"]
    # the default --compile background starts a child: Ctrl-C ends it too, and the cache is the test's
    env = {**os.environ, "LOSSLESS_HOME": str(tmp_path)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
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


@pytest.mark.slow  # compiles the tiny model's graphs before serving (~30 s the first time on 2 cores)
def test_serve_int4_compiled_says_so_and_answers(tiny_checkpoint: Path, tmp_path: Path) -> None:
    gguf = write_gguf(tiny_checkpoint, tmp_path / "tiny-q4_1.gguf", Q.Q4_1)
    cmd = [sys.executable, "-m", "lossless.cli", "serve", "--model", str(gguf), "--port", "0"]
    cmd += ["--dtype", "int4", "--compile", "--speculative", "ngram"]  # a bare --compile: wait
    env = {**os.environ, "LOSSLESS_HOME": str(tmp_path)}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        url = _read_line(proc, timeout_s=300).rsplit(" ", 1)[-1]
        assert proc.stderr is not None  # the next lines came in the same write as the URL's: buffered
        said = [proc.stderr.readline().strip()]  # then the kernel, prompts, the packed layer, compile
        while not said[-1].startswith("lossless: forward passes compiled in ") and len(said) < 6:
            said.append(proc.stderr.readline().strip())
        assert said[0] == "lossless: int4 weights (the file's Q4_0 / Q4_1 blocks), as asked"
        kernel_name, why = kernel()
        assert said.pop(1) == f"lossless: int4 layers on {why}"
        # prompts in float32 where the CPU has no bfloat16 instructions, else in int4's own numerics
        if not native_bfloat16():
            assert said[1].startswith("lossless: prompts processed in float32 (this CPU has no bfloat16")
        else:  # such a CPU also packs the output layer's weight once, and says so
            native = ", ".join(native_bfloat16())
            said_it = f"lossless: prompts processed in int4 (this CPU has bfloat16 instructions: {native})"
            assert said[1] == said_it
        packed = ["lossless: output layer on oneDNN's packed bfloat16 weight (this CPU computes bfloat16)"]
        assert said[2:-1] == (packed if can_pack() else [])
        assert said[-1].startswith("lossless: forward passes compiled in ") and said[-1].endswith(
            " s (torch.compile)"
        )
        body = {"model": "tiny-q4_1", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 5}
        with httpx.Client(trust_env=False, timeout=60) as client:
            reply = client.post(url + "/chat/completions", json=body).json()
        prompts = "" if native_bfloat16() else "-float32prompts"
        dtype = "int4q8" if kernel_name == "q8" else "int4"
        fingerprint = f"-{dtype}{prompts}{'-packed' if can_pack() else ''}-compiled-ngram"
        assert reply["system_fingerprint"].endswith(fingerprint)
        assert reply["usage"]["completion_tokens"] >= 1
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 0
