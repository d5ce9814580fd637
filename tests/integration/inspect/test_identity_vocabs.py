"""Tokenizer identity against a server that counts prompt tokens with a real vocabulary: the scripted
server's ``count_with``, on each of llama.cpp's vocabulary-only GGUFs and SmolLM2's, behind three
different chat templates. Only ``usage.prompt_tokens`` crosses the wire."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
from llama_vocab import VERSION, vocab_files
from scripted_server import ScriptedServer

from lossless.client.endpoints import Endpoint
from lossless.client.wire import Wire
from lossless.inspect import identity
from lossless.inspect.identity import Identity, Measured, judge, measure

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None, reason="the scripted server counts with llama-cpp-python"
)
TEMPLATES = (  # the differential counts must not depend on which
    "<|im_start|>{role}\n{content}<|im_end|>\n",
    "[INST] {content} [/INST]",
    "{role}: {content}\n\n",
)


@pytest.fixture(scope="session")
def vocabs(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, smollm2_path: Path
) -> dict[str, Path]:
    """family -> its vocabulary file: llama.cpp's, unpacked once into pytest's cache (76 MB) from the
    llama-cpp-python sdist (pip's own cache keeps the download), and the embedded SmolLM2 GGUF."""
    cache = getattr(request.config, "cache", None)  # None under -p no:cacheprovider: fetched each run
    folder = cache.mkdir(f"llama-vocab-{VERSION}") if cache else tmp_path_factory.mktemp("vocab") / "v"
    try:
        files = vocab_files(folder)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"llama-cpp-python {VERSION} sdist not downloadable from PyPI: {exc.stderr[-300:]}")
    return {**files, "smollm2": smollm2_path}


def _identify(
    server: ScriptedServer, path: Path, template: str, **script: object
) -> tuple[Measured, Identity]:
    server.script(
        {"count_with": str(path), "count_template": template, "steps": [[0, "content", 1]], **script}
    )

    async def go() -> Measured:
        async with Wire(Endpoint("scripted", server.url, "m")) as w:
            return await measure(w)

    m = asyncio.run(go())
    return m, judge(m)


def test_each_family_is_named_from_prompt_tokens_alone(
    server: ScriptedServer, vocabs: dict[str, Path]
) -> None:
    families = sorted(identity.bundled())
    assert len(families) >= 15 and set(families) <= set(vocabs)
    wrong = {}
    for i, family in enumerate(families):
        m, found = _identify(server, vocabs[family], TEMPLATES[i % len(TEMPLATES)])
        assert m.prompt_tokens["baseline"] and m.prompt_tokens["baseline"] > 3  # the template is counted
        if found.verdict != "evident" or family not in (found.family or "").split(" / "):
            wrong[family] = (found.verdict, found.family, found.evidence.get("differs_on"))
    assert not wrong


def test_a_named_tokenizer_is_told_too(server: ScriptedServer, vocabs: dict[str, Path]) -> None:
    # counted in a child: importing llama_cpp leaves two files open until exit (a warning, an error here)
    code = (
        "import json, sys; from lossless.inspect import identity;"
        "print(json.dumps(identity.references(sys.argv[1:])))"
    )
    done = subprocess.run([sys.executable, "-c", code, str(vocabs["gpt-2"])], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    refs = json.loads(done.stdout)
    assert refs["ggml-vocab-gpt-2"] == refs.pop("gpt-2")
    m, found = _identify(server, vocabs["gpt-2"], TEMPLATES[1])
    assert (found.verdict, found.family) == ("evident", "gpt-2")
    assert judge(m, refs).family == "ggml-vocab-gpt-2"
    del refs["ggml-vocab-gpt-2"]
    assert judge(m, refs).verdict == "not evident"  # GPT-2 is none of the others


def test_no_usage_cannot_tell(server: ScriptedServer, vocabs: dict[str, Path]) -> None:
    body = {"id": "x", "model": "served-name", "system_fingerprint": "fp-1", "choices": []}
    m, found = _identify(server, vocabs["qwen2"], TEMPLATES[0], raw_body=json.dumps(body))
    assert m.counts is None and m.models == ("served-name",)
    assert (found.verdict, found.family) == ("inconclusive", None)
    assert found.note == "cannot tell: the server sends no usage.prompt_tokens: its tokenizer cannot be told"
    assert found.evidence["declared_model"] == ["served-name"]
    assert found.evidence["system_fingerprint"] == ["fp-1"]
