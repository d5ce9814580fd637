"""Secrets never leave memory: not a key in a custom header carried to another origin by a redirect, not a
fragment of a key echoed in an error body, not a password in the URL, in any file, table or JSON."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from scripted_server import ScriptedServer

from lossless.cli import main

KEY = "sk-lossless-FAKE-7f3a9c2e1d5b"
PASSWORD = "hunter2-FAKE-pass-9d8c"


@pytest.fixture(scope="module")
def servers() -> Iterator[tuple[ScriptedServer, ScriptedServer]]:
    with ScriptedServer() as a, ScriptedServer() as b:
        yield a, b


def every_output(result: object, folder: Path) -> str:
    files = "".join(p.read_text() for p in folder.rglob("*") if p.is_file())
    return getattr(result, "stdout", "") + getattr(result, "stderr", "") + files


def test_a_redirect_to_another_origin_is_not_followed(
    servers: tuple[ScriptedServer, ScriptedServer], tmp_path: Path
) -> None:
    a, b = servers
    b.script({"steps": [[0.0, "content", 1]]})
    a.script({"status": 307, "headers": [["location", f"{b.url}/chat/completions"]]})
    toml = tmp_path / "e.toml"
    toml.write_text(
        f'[[endpoint]]\nname = "a"\nbase_url = "{a.url}"\nmodel = "m"\n'
        f'headers = {{ "api-key" = "{KEY}", "x-api-key" = "{KEY}" }}\n'
    )
    result = CliRunner().invoke(main, ["bench", "--endpoints", str(toml), "--requests", "2", "--json"])
    # the one request bench sends first meets the redirect: the run stops there, in one line
    assert result.exit_code == 2 and "HTTP 307" in result.stderr, result.output
    assert b.log() == []  # the key's headers never reached the other origin
    assert KEY[:8] not in result.output


def test_a_key_fragment_in_an_error_body_is_masked(
    servers: tuple[ScriptedServer, ScriptedServer], tmp_path: Path
) -> None:
    a, _ = servers
    body = f'{{"error": {{"message": "Incorrect API key provided: {KEY[:12]}********{KEY[-4:]}"}}}}'
    a.script({"status": 401, "body": body})
    out = tmp_path / "run"
    args = ["bench", a.url, "--model", "m", "--api-key-env", "K", "--requests", "2", "--out", str(out)]
    result = CliRunner().invoke(main, [*args, "--json"], env={"K": KEY})
    # the one request bench sends first is refused: the run stops there, quoting the server, masked
    assert result.exit_code == 2 and "HTTP 401: Incorrect API key provided: ***" in result.stderr
    text = every_output(result, out)
    assert "$K was refused" in text and KEY[:12] not in text and KEY[:8] not in text


def test_a_password_in_the_url_is_written_nowhere(
    servers: tuple[ScriptedServer, ScriptedServer], tmp_path: Path
) -> None:
    a, _ = servers
    a.script({"steps": [[0.0, "content", 1]]})
    url = a.url.replace("http://", f"http://user:{PASSWORD}@")
    out, probed = tmp_path / "run", tmp_path / "probe"
    bench = CliRunner().invoke(
        main, ["bench", url, "--model", "m", "--requests", "2", "--out", str(out), "--json"]
    )
    assert bench.exit_code == 0, bench.output
    probe = CliRunner().invoke(
        main, ["probe", url, "--model", "m", "--repeats", "2", "--out", str(probed), "--json"]
    )
    assert probe.exit_code == 0, probe.output
    everything = every_output(bench, out) + every_output(probe, probed)
    assert (out / "summary.json").is_file() and (probed / "probe.json").is_file()
    assert PASSWORD not in everything and PASSWORD[:8] not in everything
