"""probe against servers that answer oddly: every check ends with a verdict, the run with exit 0."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner
from scripted_server import ScriptedServer

from lossless.cli import main


def probe(server: ScriptedServer) -> dict[str, dict[str, Any]]:
    result = CliRunner().invoke(main, ["probe", server.url, "--model", "m", "--repeats", "2", "--json"])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.stderr
    return {c["name"]: c for c in json.loads(result.stdout)["checks"]}


@pytest.mark.parametrize(
    "body",
    ['{"choices": ["oops"]}', '{"choices": [{"message": {"content": 5}}]}', "<html>not json</html>"],
    ids=["choice-a-string", "content-a-number", "html"],
)
def test_odd_answers_are_rejected_checks_not_a_crash(server: ScriptedServer, body: str) -> None:
    server.script({"steps": [[0.0, "content", 1]], "raw_body": body, "raw": [[0.0, f"data: {body}\n\n"]]})
    checks = probe(server)
    assert checks["max_tokens=5"]["verdict"] == "rejected"
    assert "not a completion object" in checks["max_tokens=5"]["evidence"]["error"]


def test_a_stream_cut_by_a_reset_is_not_taken_for_a_whole_one(server: ScriptedServer) -> None:
    """The streamed answers are cut (no [DONE], no finish_reason); the others are whole."""
    server.script({"steps": [[0.0, "content", 1]] * 6, "drop_after": 3, "usage": "final"})
    checks = probe(server)
    usage = checks["stream_options.include_usage"]
    assert usage["verdict"] == "rejected" and usage["note"].startswith("no answer")
    assert checks["stop"]["verdict"] != "rejected"  # a non-streamed check is judged as usual
