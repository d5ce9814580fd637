"""A fault corpus: upstream servers that fail in every way we know of, all in one bench run (one endpoint
per fault), each answer recorded with the error kind it deserves, the run finishing and no traceback.

Each fault is a script of the scripted server, picked by the first segment of its endpoint's URL.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from scripted_server import ScriptedServer

from lossless.cli import main


def sse(obj: Any) -> str:
    return "data: " + json.dumps(obj) + "\n\n"


def chunk(delta: Any = None, finish: Any = None, **top: Any) -> str:
    return sse({"id": "x", "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}], **top})


TOK = chunk({"content": "tok "})
END = chunk({}, "stop") + sse(
    {"id": "x", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 2}}
)
DONE = "data: [DONE]\n\n"


def raw(*pieces: str, drop: bool = False) -> dict[str, Any]:
    return {"raw": [[0.0, p] for p in pieces], "drop": drop}


# fault -> (script, the error kind every one of its requests must be recorded with; None: a success)
FAULTS: dict[str, tuple[dict[str, Any], str | None]] = {
    "healthy": ({"steps": [[0.0, "content", 1]] * 3}, None),
    "reset-before-head": ({"reset": True}, "connection"),
    "reset-mid-stream": ({"steps": [[0.0, "content", 1]] * 4, "drop_after": 2}, "connection"),
    "reset-raw-mid-stream": (raw(TOK, TOK, drop=True), "connection"),
    "event-not-json": ({"steps": [[0.0, "content", 1], [0.0, "malformed", 1]]}, "malformed_stream"),
    "event-not-utf8": (raw(TOK, "hex:" + b'data: {"choices": ["\xff"]}\n\n'.hex()), "malformed_stream"),
    "event-nested-100k-deep": (
        raw(TOK, "data: " + "[" * 100_000 + "]" * 100_000 + "\n\n"),
        "malformed_stream",
    ),
    "event-a-list": (raw(TOK, "data: [1, 2]\n\n"), "malformed_stream"),
    "error-event": ({"steps": [[0.0, "content", 1], [0.0, "error", 1]]}, "stream_error"),
    "content-a-number": ({"steps": [[0.0, "number", 1]]}, "malformed_stream"),
    "reasoning-an-object": ({"steps": [[0.0, "object", 1]]}, "malformed_stream"),
    "choices-a-string": (raw(sse({"choices": "oops"})), "malformed_stream"),
    "choice-a-string": (raw(sse({"choices": ["oops"]})), "malformed_stream"),
    "delta-a-string": (raw(sse({"choices": [{"delta": "tok"}]})), "malformed_stream"),
    "tool-calls-an-object": (raw(chunk({"tool_calls": {"id": 1}})), "malformed_stream"),
    "finish-reason-a-number": (raw(TOK, chunk({}, 7), DONE), "malformed_stream"),
    "no-choices-at-all": (raw(sse({"id": "x"}), DONE), "malformed_stream"),
    "usage-a-string": (raw(TOK, chunk({}, "stop", usage="lots"), DONE), None),
    "completion-tokens-a-string": (raw(TOK, chunk({}, "stop", usage={"completion_tokens": "2"}), DONE), None),
    "model-an-object": (raw(chunk({"content": "tok"}, model={"x": 1}), END, DONE), None),
    "huge-event-2mb": (raw(chunk({"content": "x" * 2_000_000}), END, DONE), None),
    "unterminated-last-event": (
        raw(TOK, 'data: {"choices": [{"delta": {"content": "t"}}]}'),
        "malformed_stream",
    ),
    "empty-stream": (raw(), "malformed_stream"),
    "finish-without-done": (raw(TOK, END), None),
    "events-after-done": (raw(TOK, END, DONE, TOK, "data: {not json\n\n"), None),
    "comments-and-keepalives": (raw(": ping\n\n", TOK, ":\n\n", END, ": bye\n\n", DONE), None),
    "crlf-and-lone-cr": (raw(TOK.replace("\n", "\r\n"), END.replace("\n", "\r"), DONE), None),
    "event-split-mid-utf8": (
        raw('data: {"choices": [{"delta": {"content": "\u00e9', '"}}]}\n\n', END, DONE),
        None,
    ),
    "usage-only-no-tokens": (raw(sse({"choices": [], "usage": {"completion_tokens": 0}}), DONE), None),
    "silent-after-head": ({"steps": [[30.0, "content", 1]]}, "timeout_first_token"),
    "slow-head": ({"head_delay": 30.0, "steps": [[0.0, "content", 1]]}, "timeout_first_token"),
    "never-ending": ({"steps": [[0.3, "content", 1]] * 100}, "timeout_total"),
    "html-502": ({"status": 502, "body": "<html><body><h1>502 Bad Gateway</h1></body></html>"}, "http_502"),
    "429-retry-after": (
        {"status": 429, "headers": [["retry-after", "1"]], "body": '{"error": {}}'},
        "http_429",
    ),
    "503-retry-after-date": (
        {"status": 503, "headers": [["retry-after", "Wed, 21 Oct 2015 07:28:00 GMT"]], "body": ""},
        "http_503",
    ),
}
# What a redirect means is that the URL is not the API's: the one request bench sends before its run
# stops it there, in one line (tests/integration/test_secrets.py: the key's headers go nowhere).
REDIRECT = {"status": 307, "headers": [["location", "/redirect-loop/v1/chat/completions"]]}


@pytest.fixture(scope="module")
def server() -> Iterator[ScriptedServer]:
    with ScriptedServer() as s:
        s.script(
            **{f"/{name}": script for name, (script, _) in FAULTS.items()}, **{"/redirect-loop": REDIRECT}
        )
        yield s


def test_every_fault_is_recorded_with_its_kind_and_the_run_goes_on(
    server: ScriptedServer, tmp_path: Path
) -> None:
    toml = tmp_path / "faults.toml"
    toml.write_text(
        "".join(
            f'[[endpoint]]\nname = "{name}"\nbase_url = "{server.root}/{name}/v1"\nmodel = "m"\n'
            for name in FAULTS
        )
    )
    out = tmp_path / "run"
    args = ["bench", "--endpoints", str(toml), "--requests", "2", "--out", str(out), "--json"]
    # time-outs far above a healthy answer's: every endpoint runs at once on one event loop beside the
    # in-process server, and parsing the 2 MB and 100k-deep events held both up for over 1 s at times
    args += ["--timeout-first-token", "4", "--timeout-total", "6", "--retries", "0"]
    result = CliRunner().invoke(main, args)
    # every request of an endpoint that only fails failed: named with its cause, after all is written
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.stderr
    failing = {name for name, (_, kind) in FAULTS.items() if kind is not None}
    named = {line.split("'")[1] for line in result.stderr.splitlines() if line.startswith("error: endpoint ")}
    assert named == failing
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert len(records) == 2 * len(FAULTS)  # every request of every endpoint, each one line
    kinds: dict[str, set[str | None]] = {}
    for r in records:
        kinds.setdefault(r["endpoint"], set()).add(r["error_kind"])
    assert kinds == {name: {kind} for name, (_, kind) in FAULTS.items()}
    summary = json.loads(result.stdout)
    assert {e["name"] for e in summary["endpoints"]} == set(FAULTS)
    assert len(FAULTS) >= 30


def test_a_redirect_stops_the_run_before_it_starts(server: ScriptedServer, tmp_path: Path) -> None:
    url = f"{server.root}/redirect-loop/v1"
    result = CliRunner().invoke(
        main, ["bench", url, "--model", "m", "--requests", "2", "--out", str(tmp_path)]
    )
    assert result.exit_code == 2 and result.stderr.count("\n") == 1, result.output
    assert "HTTP 307" in result.stderr and "a redirect, not followed" in result.stderr
    assert not (tmp_path / "records.jsonl").exists()
