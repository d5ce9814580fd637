"""Policies bench executes (--hedge-after, --failover) against scripted servers with known latency
distributions, and advise's predictions from a plain run checked against them: within 15% at p99 where
the attempts of a request are independent, a warning where they are not."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from scripted_server import ScriptedServer

from lossless.records import RequestRecord
from lossless.rundir import read_jsonl

FAST = {"head_delay": 0.02, "steps": [[0.01, "content", 1]] * 2}
# one request in five waits 0.4 s for its answer, drawn afresh for every request: independent attempts
HEAVY = {**FAST, "draw": [{}, {}, {}, {}, {"head_delay": 0.4}]}
KEYS = [f"p{i}" for i in range(20)]
REQUESTS = "300"


def _lossless(*args: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "lossless.cli", *args], capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    return done


def _requests(run: Path) -> dict[tuple[str, int], list[RequestRecord]]:
    found: dict[tuple[str, int], list[RequestRecord]] = {}
    for r in read_jsonl(run / "records.jsonl"):
        found.setdefault((r.load, r.request_index), []).append(r)
    return found


def _advise(*runs: Path) -> dict:
    done = _lossless("advise", *map(str, runs), "--json", "--resamples", "100")
    return json.loads(done.stdout)


def test_hedge_runs_as_advise_predicts(server: ScriptedServer, tmp_path: Path) -> None:
    server.script(**{"/iid": HEAVY})
    url = f"{server.root}/iid/v1"
    common = ("--model", "m", "--requests", REQUESTS, "--concurrency", "8")
    _lossless("bench", url, *common, "--out", str(tmp_path / "plain"))
    _lossless("bench", url, *common, "--hedge-after", "100", "--out", str(tmp_path / "hedged"))
    requests = _requests(tmp_path / "hedged")
    assert len(requests) == int(REQUESTS)
    hedged = 0
    for attempts in requests.values():
        attempts.sort(key=lambda r: r.attempt)
        assert [r.attempt for r in attempts] in ([0], [0, 1])
        assert [r.retried for r in attempts].count(False) == 1  # one outcome per request
        if len(attempts) == 2:
            hedged += 1
            first, second = attempts
            assert second.sent_ns - first.sent_ns >= 99e6  # sent at the delay (a timer may fire a bit early)
            loser = next(r for r in attempts if r.retried)
            assert loser.error_kind == "abandoned" or loser.ok
    assert 0.1 < hedged / len(requests) < 0.3  # the slow fifth, give or take
    advice = _advise(tmp_path / "plain", tmp_path / "hedged")
    (executed,) = advice["executed"]
    predicted = executed["predicted"]
    assert (executed["policy"], executed["delay_ms"], predicted["delay_ms"]) == ("hedge", 100.0, 100.0)
    # p99: both attempts slow (1 in 25), ~0.42 s in both; measured and predicted within 15%
    assert executed["p99"] == pytest.approx(predicted["p99"]["value"], rel=0.15)
    assert executed["p99"] > 300 and executed["error_rate"] == 0
    assert not [n for n in advice["notes"] if "not independent" in n]


def test_correlated_attempts_are_flagged(server: ScriptedServer, tmp_path: Path) -> None:
    # one prompt in twenty is slow every time it is asked: a hedge of it is slow too. Independent draws
    # would make both attempts slow one time in 400, under the 1% a p99 leaves: predicted p99 ~0.15 s
    server.script(FAST, p19={**FAST, "head_delay": 0.4})
    prompts = tmp_path / "prompts.jsonl"
    prompts.write_text("".join(f'{{"prompt": "{k}"}}\n' for k in KEYS))
    common = ("--model", "m", "--suite", f"file:{prompts}", "--requests", "100", "--concurrency", "8")
    _lossless("bench", server.url, *common, "--out", str(tmp_path / "plain"))
    _lossless("bench", server.url, *common, "--hedge-after", "100", "--out", str(tmp_path / "hedged"))
    advice = _advise(tmp_path / "plain", tmp_path / "hedged")
    (executed,) = advice["executed"]
    assert executed["p99"] > 400 > 2 * executed["predicted"]["p99"]["value"]  # the hedge did not help
    assert [n for n in advice["notes"] if "not independent" in n and "hedged after 100 ms" in n]


def test_failover_runs_as_advise_predicts(server: ScriptedServer, tmp_path: Path) -> None:
    # a: one request in ten refused (429), one in ten silent for 0.6 s; b: always quick
    flaky = {**FAST, "draw": [{}] * 8 + [{"status": 429, "body": "busy"}, {"head_delay": 0.6}]}
    server.script(**{"/a": flaky, "/b": FAST})
    endpoints = tmp_path / "endpoints.toml"
    toml = '[[endpoint]]\nname = "{n}"\nbase_url = "{root}/{n}/v1"\nmodel = "m"\n'
    endpoints.write_text("".join(toml.format(n=n, root=server.root) for n in ("a", "b")))
    common = ("--endpoints", str(endpoints), "--requests", "200", "--concurrency", "8")
    _lossless("bench", *common, "--out", str(tmp_path / "plain"))
    policy = ("--failover", "b", "--failover-after", "200")
    _lossless("bench", *common, *policy, "--out", str(tmp_path / "failover"))
    moved = 0
    for attempts in _requests(tmp_path / "failover").values():
        attempts.sort(key=lambda r: r.attempt)
        assert [r.endpoint for r in attempts] in (["a"], ["a", "b"])
        assert attempts[-1].ok and not attempts[-1].retried  # b always answers
        if len(attempts) == 2:
            moved += 1
            assert attempts[0].retried and attempts[0].error_kind in ("http_429", "abandoned")
            if attempts[0].error_kind == "abandoned":  # no first token at 200 ms: b asked then
                assert attempts[1].sent_ns - attempts[0].sent_ns >= 199e6
    assert 0.1 < moved / 200 < 0.32
    advice = _advise(tmp_path / "plain", tmp_path / "failover")
    (executed,) = advice["executed"]
    assert executed["chain"] == ["a", "b"] and executed["error_rate"] == 0
    assert executed["p99"] == pytest.approx(executed["predicted"]["p99"]["value"], rel=0.15)
    assert not [n for n in advice["notes"] if "not independent" in n]


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (("--hedge-after", "50", "--failover", "http://127.0.0.1:9/v1"), "not both"),
        (("--hedge-after", "50", "--retries", "2"), "not with --retries"),
        (("--failover-after", "50"), "--failover-after goes with --failover"),
        (("--hedge-after", "-1"), "--hedge-after"),
    ],
)
def test_bad_policies_are_one_line_errors(args: tuple[str, ...], said: str) -> None:
    done = subprocess.run(
        [sys.executable, "-m", "lossless.cli", "bench", "http://127.0.0.1:9/v1", "--model", "m", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and said in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_an_interrupted_hedged_run_keeps_every_attempt(server: ScriptedServer, tmp_path: Path) -> None:
    # every answer takes ~0.3 s, so every request has its hedge in flight when SIGTERM comes
    server.script({"head_delay": 0.3, "steps": [[0.0, "content", 1]]})
    argv = [sys.executable, "-m", "lossless.cli", "bench", server.url, "--model", "m", "--requests", "400"]
    argv += ["--concurrency", "4", "--hedge-after", "50", "--out", str(tmp_path)]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    records = tmp_path / "records.jsonl"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and (not records.exists() or records.read_text().count("\n") < 8):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 130 and "Traceback" not in stderr, stderr
    found = list(read_jsonl(records))
    # every attempt the server saw has its record: finished, abandoned or cancelled (one cancelled before
    # its bytes went out has a record too, which the server never saw)
    assert len(found) >= len(server.sent())
    assert {r.error_kind for r in found} <= {None, "abandoned", "cancelled"} and any(r.attempt for r in found)
