"""Servers we did not write, started once for the module that asks each of them many things (they are
slow to start): llama.cpp's OpenAI server on the embedded GGUF, twice, and on a lower-bit copy made by its
own quantizer; ``transformers serve`` on a Hugging Face folder of the same model, twice, and once on a
folder that is greedy-only (as a user's folder usually is). Module-scoped, not session-scoped: an idle
``transformers serve`` kept ~0.5-0.9 of a CPU busy for the rest of the suite, which slowed it and made
its timed tests flake."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest
from third_party import LlamaCppServer, TransformersServer, hf_folder, requantize


@pytest.fixture(scope="session")
def q2k_path(smollm2_path: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return requantize(smollm2_path, tmp_path_factory.mktemp("q2k") / "smollm2-q2_k.gguf")


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
