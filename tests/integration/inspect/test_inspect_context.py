"""The context limit by behaviour (``inspect/context.py``) against real servers on 127.0.0.1: ours, with
a tiny random model given an 8,192-token context (SmolLM2 itself takes ~150 s to prefill 8k tokens on a
2-core CPU; the tiny model ~2 s, and its server refuses past the limit the same way), and the scripted
server with a 3,000-token context, answered over it with vLLM's 400 or with a 503.
"""

from __future__ import annotations

import asyncio
import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from scripted_server import ScriptedServer

from lossless.client.endpoints import Endpoint
from lossless.client.wire import Wire
from lossless.inspect.context import ContextLimit, measure

OURS = 8192


def limit(url: str, model: str, declared: int | None, **kw: float) -> ContextLimit:
    async def run() -> ContextLimit:
        async with Wire(Endpoint("e", url, model), timeout_s=60) as w:
            return await measure(w, declared, **kw)  # type: ignore[arg-type]

    return asyncio.run(run())


@pytest.fixture(scope="module")
def ours(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    from lossless.server.launch import start_embedded
    from lossless.server.main import load_model
    from lossless.server.options import ServeOptions

    folder = tmp_path_factory.mktemp("tiny-8k") / "tiny"
    shutil.copytree(tiny_checkpoint, folder)  # the session's checkpoint stays as it is
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "max_position_embeddings": OURS}))
    loaded = load_model(ServeOptions(model=str(folder)))
    with start_embedded(ServeOptions(), loaded=loaded) as url:
        yield url, loaded.name


@pytest.mark.slow
def test_our_declared_limit_is_confirmed_in_two_requests(ours: tuple[str, str]) -> None:
    got = limit(*ours, OURS)
    assert (got.status, got.limit) == ("declared", OURS)
    assert got.requests == 4  # 2 calibrating, just under, just over
    assert got.accepted is not None and got.refused is not None
    assert OURS - 100 < got.accepted < OURS <= got.refused < OURS + 100


@pytest.mark.slow
def test_our_limit_is_found_without_a_declaration(ours: tuple[str, str]) -> None:
    got = limit(*ours, None)
    assert got.status == "measured", got.note
    assert got.accepted is not None and got.refused is not None and got.limit == got.accepted + 1
    assert got.accepted < OURS <= got.refused  # our server: prompt + 1 generated token <= 8192
    assert got.refused - got.accepted <= 0.02 * got.refused
    assert got.requests <= 12  # 2 + doubling 1k..8k (4) + bisection (<= 6)


@pytest.mark.slow
def test_a_declaration_too_low_is_searched_past(ours: tuple[str, str]) -> None:
    got = limit(*ours, 4096)
    assert got.status == "measured" and "declared 4,096, but" in got.note
    assert got.accepted is not None and got.refused is not None
    assert got.accepted < OURS <= got.refused


@pytest.fixture(scope="module")
def scripted() -> Iterator[ScriptedServer]:
    with ScriptedServer() as s:
        yield s


def test_search_finds_a_3000_token_context(scripted: ScriptedServer) -> None:
    scripted.script({"steps": [[0.0, "content", 1]], "context": 3000})
    got = limit(scripted.url, "m", None)
    assert got.status == "measured", got.note
    assert got.accepted is not None and got.refused is not None
    assert got.accepted < 3000 <= got.refused and got.refused - got.accepted <= 60
    assert got.requests == len(scripted.log()) <= 12
    assert all(entry["max_tokens"] == 1 for entry in scripted.log())


def test_a_declaration_too_high_is_refused_then_searched_below(scripted: ScriptedServer) -> None:
    scripted.script({"steps": [[0.0, "content", 1]], "context": 3000})
    got = limit(scripted.url, "m", 4096)
    assert got.status == "measured" and "declared 4,096, but a 4," in got.note, got.note
    assert got.accepted is not None and got.refused is not None
    assert got.accepted < 3000 <= got.refused


def test_a_5xx_past_the_limit_is_never_read_as_one(scripted: ScriptedServer) -> None:
    over = {"status": 503, "body": '{"error": {"message": "prompt too long for the queue"}}'}
    scripted.script({"steps": [[0.0, "content", 1]], "context": 3000, "over": over})
    got = limit(scripted.url, "m", None)
    assert got.status == "accepted at 2,048" and got.limit is None and got.refused is None
    assert "HTTP 503" in got.note
    declared = limit(scripted.url, "m", 4096)  # just under the declaration: 503, cannot tell
    assert declared.status == "not measured" and declared.limit is None and "HTTP 503" in declared.note


def test_a_server_that_answers_nothing_is_not_measured(scripted: ScriptedServer) -> None:
    scripted.script({"status": 500, "body": "boom"})
    got = limit(scripted.url, "m", 8192)
    assert got.status == "not measured" and got.requests == 1 and "HTTP 500" in got.note


def test_the_budget_bounds_the_search(scripted: ScriptedServer) -> None:
    scripted.script({"steps": [[0.0, "content", 1]], "context": 3000})
    got = limit(scripted.url, "m", None, max_requests=5)
    assert got.requests == 5 and got.status == "refused at 4,096" and got.limit is None
    assert got.accepted == 2048 and "5 requests" in got.note


def test_inspect_context_puts_the_measured_limit_on_the_card(
    scripted: ScriptedServer, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from lossless.cli import main

    scripted.script({"steps": [[0.0, "content", 1]] * 4, "context": 3000})
    args = ["inspect", scripted.url, "--model", "m", "--no-precision", "--context", "--json"]
    result = CliRunner().invoke(main, [*args, "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (card,) = json.loads(result.stdout)["cards"]
    said = card["identity"]["context"]
    assert said["status"] == "measured" and 2900 <= said["limit"] <= 3000, said
    assert "context limit" in result.stderr and (tmp_path / "inspect.html").exists()
    # without the flag nothing long is sent, and the card says what was declared (nothing here)
    result = CliRunner().invoke(main, [*args[:-2], "--json"])
    assert result.exit_code == 0 and json.loads(result.stdout)["cards"][0]["identity"]["context"] is None
