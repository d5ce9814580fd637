"""Trace replay through ``lossless bench``: a Mooncake-style trace's arrival times (sped up), output lengths
and shared prefixes against a scripted server over real HTTP, and its input lengths counted exactly by the
embedded server."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from scripted_server import ScriptedServer

from lossless.provision.counting import load_token_encoder
from lossless.rundir import read_jsonl

# ms into the trace (the first is not 0: offsets count from it), tokens in and out, prefix blocks
TRACE = [
    {"timestamp": 1000, "input_length": 120, "output_length": 3, "hash_ids": [7]},
    {"timestamp": 1150, "input_length": 90, "output_length": 5, "hash_ids": [7]},
    {"timestamp": 1400, "input_length": 200, "output_length": 2, "hash_ids": [8]},
    {"timestamp": 1400, "input_length": 60, "output_length": 4},
    {"timestamp": 1900, "input_length": 150, "output_length": 3, "hash_ids": [7]},
]


def _trace(folder: Path) -> Path:
    path = folder / "trace.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in TRACE))
    return path


def _bench(*args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "lossless.cli", "bench", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=600)


def test_replay_keeps_the_trace_times_lengths_and_prefixes(tmp_path: Path, smollm2_path: Path) -> None:
    with ScriptedServer() as server:
        server.script({"steps": [[0.0, "content", 1]]})
        out = tmp_path / "run"
        done = _bench(
            server.url,
            "--model",
            "m",
            "--suite",
            f"trace:{_trace(tmp_path)}",
            "--replay-speed",
            "1,2",
            "--tokenizer",
            str(smollm2_path),
            "--out",
            str(out),
        )
        log = server.sent()
    assert done.returncode == 0, done.stderr
    records = list(read_jsonl(out / "records.jsonl"))
    assert [r.load for r in records] == ["replay=1x"] * 5 + ["replay=2x"] * 5  # the whole trace, each speed
    for load, speed in (("replay=1x", 1), ("replay=2x", 2)):
        level = sorted((r for r in records if r.load == load), key=lambda r: r.request_index)
        assert [r.asked_out for r in level] == [line["output_length"] for line in TRACE]
        # sent on the trace's own schedule: offsets from the first line, divided by the speed
        for r, line in zip(level, TRACE, strict=True):
            want_ns = (line["timestamp"] - TRACE[0]["timestamp"]) * 1e6 / speed
            assert abs(r.scheduled_ns - level[0].scheduled_ns - want_ns) <= 1
            assert r.ok and r.sent_ns >= r.scheduled_ns - 1e6  # (a timer may fire microseconds early)
    summary = json.loads((out / "summary.json").read_text())
    synthetic = summary["config"]["synthetic"]
    assert synthetic["trace"].endswith("trace.jsonl") and synthetic["ignore_eos"] is True
    encode, _ = load_token_encoder(str(smollm2_path))
    sent = {e["id"]: e for e in log}
    texts: dict[int, str] = {}
    for r in records:
        entry = sent[dict(r.server_headers)["x-request-id"]]
        (message,) = entry["messages"]
        line = TRACE[r.request_index]
        # the content is the trace's length less the template's tokens (measured by one calibration request)
        assert len(encode(message["content"])) == line["input_length"] - synthetic["template_overhead"]
        assert r.asked_in == line["input_length"] and entry["max_tokens"] == line["output_length"]
        assert texts.setdefault(r.request_index, message["content"]) == message["content"]  # at each speed
    # block 7 opens lines 0, 1 and 4: one text, cut to each length; block 8 and no block share nothing
    sevens = [texts[0], texts[1], texts[4]]
    assert len({t[:200] for t in sevens}) == 1 and len(set(sevens)) == 3
    assert len({texts[0][:20], texts[2][:20], texts[3][:20]}) == 3


@pytest.mark.slow
def test_the_embedded_server_counts_the_trace_lengths(tmp_path: Path) -> None:
    done = _bench(
        "--suite", f"trace:{_trace(tmp_path)}", "--replay-speed", "4", "--out", str(tmp_path / "run")
    )
    assert done.returncode == 0, done.stderr
    records = list(read_jsonl(tmp_path / "run" / "records.jsonl"))
    assert len(records) == 5
    for r, line in zip(sorted(records, key=lambda r: r.request_index), TRACE, strict=True):
        assert r.ok and r.n_in == r.asked_in == line["input_length"], (r.n_in, r.asked_in, line)
        assert r.n_out == r.asked_out == line["output_length"]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--replay-speed", "2"), "--replay-speed replays a trace"),
        (("--suite", "trace:{trace}", "--replay-speed", "0"), "--replay-speed wants numbers"),
        (("--suite", "trace:{trace}", "--rate", "1", "--replay-speed", "1"), "not with --rate"),
        (("--suite", "trace:{trace}", "--requests", "9"), "the trace has 5 requests"),
        (("--suite", "trace:/nowhere/t.jsonl"), "/nowhere/t.jsonl"),
        (
            ("--suite", "trace:{trace}"),
            "--suite trace: builds prompts with the model's tokenizer: give --tokenizer",
        ),
    ],
)
def test_bad_replays_are_one_line_errors(tmp_path: Path, args: tuple[str, ...], said: str) -> None:
    trace = _trace(tmp_path)
    done = _bench("http://127.0.0.1:9/v1", "--model", "m", *(a.format(trace=trace) for a in args))
    assert done.returncode != 0 and said in done.stderr and "Traceback" not in done.stderr, done.stderr
