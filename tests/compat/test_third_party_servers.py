"""Smoke test: the real third-party servers that compatibility tests measure start and answer."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from third_party import LlamaCppServer, TransformersServer, hf_folder, requantize

pytestmark = pytest.mark.slow


def test_llama_cpp_serves_the_gguf_and_its_q2_k_copy(
    smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    q2k = requantize(smollm2_path, tmp_path_factory.mktemp("q2k") / "smollm2-q2_k.gguf")
    assert q2k.stat().st_size < smollm2_path.stat().st_size
    body = {"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0}
    with httpx.Client(trust_env=False, timeout=60) as http:
        for model in (smollm2_path, q2k):
            with LlamaCppServer(model, threads=1) as server:
                assert server.name.startswith("llama.cpp (llama-cpp-python ")
                listed = http.get(server.url + "/models").json()["data"]
                assert [m["id"] for m in listed] == [server.model_id]
                r = http.post(server.url + "/completions", json=body | {"model": server.model_id})
                assert r.status_code == 200, r.text
                assert r.json()["choices"][0]["text"].strip()


def test_transformers_serve_answers_chat(
    smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = hf_folder(smollm2_path, tmp_path_factory.mktemp("hf") / "smollm2")
    with TransformersServer(folder) as server, httpx.Client(trust_env=False, timeout=120) as http:
        body = {"model": server.model_id, "messages": [{"role": "user", "content": "Hi!"}], "max_tokens": 4}
        r = http.post(server.url + "/chat/completions", json=body)
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["choices"][0]["message"]["content"]
        assert answer["usage"]["completion_tokens"] == 4 or answer["choices"][0]["finish_reason"] == "length"
