"""Conversations against a scripted server over real HTTP: every turn carries the whole history (the
endpoint's own answers), think time separates turns, a failed turn ends its session, and the summary has
per-turn classes and each session's task time."""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest
from scripted_server import ScriptedServer

from lossless.bench.workload.conversation import _FOLLOW_UPS
from lossless.rundir import read_jsonl

THINK_S = 0.2
STEPS = [[0.02, "content", 1], [0.01, "content", 2]]  # each answer: "tok tok tok ", in ~30 ms


def _bench(server: ScriptedServer, out: Path, *args: str) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "lossless.cli", "bench", server.url, "--model", "m", "--out", str(out)]
    return subprocess.run([*command, *args], capture_output=True, text=True, timeout=300)


def test_turns_carry_the_history_and_sessions_their_task_time(server: ScriptedServer, tmp_path: Path) -> None:
    server.script({"steps": STEPS})
    done = _bench(server, tmp_path, "--suite", f"chat:3,{THINK_S}", "--requests", "4", "--concurrency", "2")
    assert done.returncode == 0, done.stderr
    assert "conversations: 4/4 completed, 12 turns answered" in done.stdout
    records = list(read_jsonl(tmp_path / "records.jsonl"))
    assert len(records) == 12 and all(r.ok for r in records)
    sessions: dict[str, list] = {}
    for r in records:
        sessions.setdefault(r.session or "", []).append(r)
    assert len(sessions) == 4
    log = {e["id"]: e for e in server.log()}
    for turns in sessions.values():
        turns.sort(key=lambda r: r.turn)
        assert [r.turn for r in turns] == [1, 2, 3]
        assert [r.prompt_class for r in turns] == ["turn-1", "turn-2", "turn-3"]
        assert len({r.request_index for r in turns}) == 1  # one request of the schedule: the session
        sent = [log[dict(r.server_headers)["x-request-id"]]["messages"] for r in turns]
        # turn k sends 2k-1 messages: the history (user, assistant) pairs, then its own question
        assert [len(m) for m in sent] == [1, 3, 5]
        assert sent[2][:4] == [*sent[1], {"role": "assistant", "content": turns[1].text}]
        assert sent[1][1] == {"role": "assistant", "content": turns[0].text} and turns[0].text == "tok " * 3
        assert all(m[-1]["content"] in _FOLLOW_UPS for m in sent[1:])
        # a turn goes out only after the think time that follows the previous answer
        for before, after in itertools.pairwise(turns):
            assert before.end_ns is not None and after.sent_ns - before.end_ns >= THINK_S * 1e9
    summary = json.loads((tmp_path / "summary.json").read_text())
    (entry,) = summary["endpoints"]
    s = entry["sessions"]
    assert (s["sessions"], s["completed"], s["turns_ok"]) == (4, 4, 12)
    assert list(entry["classes"]) == ["turn-1", "turn-2", "turn-3"]
    assert all(c["requests"]["ok"] == 4 for c in entry["classes"].values())
    # task time: two think times and three answers; waiting for answers: the three answers alone
    assert s["task_s"]["min"] >= 2 * THINK_S + s["model_s"]["min"] - 1e-9
    for turns in sessions.values():
        e2e = sum((r.end_ns - r.sent_ns) for r in turns) / 1e9
        assert s["model_s"]["min"] - 1e-9 <= e2e <= s["model_s"]["max"] + 1e-9


def test_a_failed_turn_ends_its_session(server: ScriptedServer, tmp_path: Path) -> None:
    refused = {"status": 500, "body": "down"}
    server.script({"steps": STEPS}, **{q: refused for q in _FOLLOW_UPS})  # every second turn fails
    done = _bench(server, tmp_path, "--suite", "chat:4", "--requests", "3", "--concurrency", "3")
    assert done.returncode == 0, done.stderr
    records = list(read_jsonl(tmp_path / "records.jsonl"))
    assert sorted((r.turn, r.ok) for r in records) == [(1, True)] * 3 + [(2, False)] * 3
    s = json.loads((tmp_path / "summary.json").read_text())["endpoints"][0]["sessions"]
    assert (s["sessions"], s["completed"], s["turns_ok"], s["task_s"]["n"]) == (3, 0, 3, 0)
    assert "conversations: 0/3 completed, 3 turns answered" in done.stdout


def test_sharegpt_conversations_and_single_turns(server: ScriptedServer, tmp_path: Path) -> None:
    server.script({"steps": STEPS})
    data = [
        {
            "id": "a",
            "conversations": [
                {"from": "system", "value": "Be brief."},
                {"from": "human", "value": "What is a tide?"},
                {"from": "gpt", "value": "one two three four five"},
                {"from": "human", "value": "And a neap tide?"},
                {"from": "gpt", "value": "six seven"},
            ],
        },
        {"id": "b", "conversations": [{"from": "human", "value": "Hello?"}, {"from": "gpt", "value": "Hi"}]},
    ]
    path = tmp_path / "sharegpt.json"
    path.write_text(json.dumps(data))
    done = _bench(server, tmp_path / "multi", "--suite", f"conversations:{path}", "--requests", "2")
    assert done.returncode == 0, done.stderr
    asked = [(e["messages"], e["max_tokens"]) for e in server.log()[-3:]]
    # conversation a: the system turn first, its two human turns, max_tokens from each recorded reply
    # (5 and 2 words, ~1.3 tokens a word); then b's one turn
    assert [len(m) for m, _ in asked] == [2, 4, 1] and asked[0][0][0] == {
        "role": "system",
        "content": "Be brief.",
    }
    assert [mt for _, mt in asked] == [round(5 * 1.3), round(2 * 1.3), round(1 * 1.3)]
    assert asked[1][0][-1] == {"role": "user", "content": "And a neap tide?"}
    done = _bench(server, tmp_path / "single", "--suite", f"sharegpt:{path}", "--requests", "2")
    assert done.returncode == 0, done.stderr
    firsts = [e["messages"][-1]["content"] for e in server.log()[-2:]]
    assert firsts == ["What is a tide?", "Hello?"]
    records = list(read_jsonl(tmp_path / "single" / "records.jsonl"))
    assert all(r.session is None and r.prompt_class == "sharegpt" for r in records)


@pytest.mark.parametrize(
    ("suite", "said"),
    [
        ("chat:0", "TURNS must be a whole number"),
        ("chat:x,1", "TURNS must be a whole number"),
        ("chat:3,-1", "think time 0-3600 s"),
        ("conversations:/nowhere/x.json", "/nowhere/x.json"),
    ],
)
def test_bad_conversation_suites_are_one_line_errors(
    server: ScriptedServer, tmp_path: Path, suite: str, said: str
) -> None:
    done = _bench(server, tmp_path, "--suite", suite)
    assert done.returncode != 0 and said in done.stderr and "Traceback" not in done.stderr
    assert not (tmp_path / "records.jsonl").exists()
