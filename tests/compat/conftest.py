"""Servers we did not write, started once for the module that asks each of them many things (they are
slow to start): llama.cpp's own ``llama-server`` on the embedded GGUF and on a Q2_K copy made by its own
quantizer; llama-cpp-python's OpenAI server on the embedded GGUF, twice, and on the Q2_K copy;
``transformers serve`` on a Hugging Face folder of the same model, twice, and once on a folder that is
greedy-only (as a user's folder usually is); vLLM's CPU server on the same folder, once (test_vllm.py
holds every test that needs it). Module-scoped, not session-scoped: an idle ``transformers serve`` kept
~0.5-0.9 of a CPU busy for the rest of the suite, which slowed it and made its timed tests flake."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from third_party import LlamaCppServer, LlamaServer, TransformersServer, VllmServer, hf_folder, requantize


@pytest.fixture(scope="session")
def q2k_path(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return requantize(smollm2_path, tmp_path_factory.mktemp("q2k") / "smollm2-q2_k.gguf")


@pytest.fixture(scope="module")
def llama_server(smollm2_path: Path) -> Iterator[LlamaServer]:
    """llama-server with one thread (its threads spin while they wait for each other: two on two cores
    shared with the client and other servers ran several times slower) and 4 slots, so that verify's
    requests in flight are decoded together."""
    with LlamaServer(smollm2_path, parallel=4) as server:
        yield server


@pytest.fixture(scope="module")
def llama_server_q2k(q2k_path: Path) -> Iterator[LlamaServer]:
    with LlamaServer(q2k_path, parallel=4) as server:
        yield server


@pytest.fixture(scope="module")
def llama_a(smollm2_path: Path) -> Iterator[LlamaCppServer]:
    with LlamaCppServer(smollm2_path) as server:
        yield server


@pytest.fixture(scope="module")
def llama_b(smollm2_path: Path) -> Iterator[LlamaCppServer]:
    with LlamaCppServer(smollm2_path) as server:
        yield server


@pytest.fixture(scope="module")
def llama_q2k(q2k_path: Path) -> Iterator[LlamaCppServer]:
    with LlamaCppServer(q2k_path) as server:
        yield server


# SmolLM2's chat template has no tool format (it drops a request's tools): no vLLM parser reads a call the
# model makes of itself, but with tool_choice required or named vLLM constrains the output to the parser's
# format (hermes: <tool_call>{json}</tool_call>). "parameter" constrains the arguments to each tool's schema
# too; at vLLM's default ("auto") only a tool marked strict is, and the others' arguments came back as
# strings ("\"kabul\"") that our schema check refused.
VLLM_TOOLS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--tool-strict-level", "parameter")


@pytest.fixture(scope="module")
def vllm(hf_sampling: Path) -> Iterator[VllmServer]:
    """vLLM in bfloat16 on the float32 folder (see VllmServer), tool calls as above."""
    with VllmServer(hf_sampling, extra=VLLM_TOOLS) as server:
        yield server


@pytest.fixture(scope="session")
def hf_sampling(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hf_folder(smollm2_path, tmp_path_factory.mktemp("hf") / "smollm2")


@pytest.fixture(scope="session")
def hf_greedy(hf_sampling: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same weights (linked, not copied) with transformers' default generation config: greedy."""
    folder = tmp_path_factory.mktemp("hf-greedy") / "smollm2"
    folder.mkdir()
    for item in hf_sampling.iterdir():
        if item.name == "model.safetensors":
            (folder / item.name).symlink_to(item)
        elif item.name != "generation_config.json":
            shutil.copy(item, folder / item.name)
    return folder


@pytest.fixture(scope="module")
def tf_a(hf_sampling: Path) -> Iterator[TransformersServer]:
    with TransformersServer(hf_sampling) as server:
        yield server


@pytest.fixture(scope="module")
def tf_b(hf_sampling: Path) -> Iterator[TransformersServer]:
    with TransformersServer(hf_sampling) as server:
        yield server


@pytest.fixture(scope="module")
def tf_greedy(hf_greedy: Path) -> Iterator[TransformersServer]:
    with TransformersServer(hf_greedy) as server:
        yield server
