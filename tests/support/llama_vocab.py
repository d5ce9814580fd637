"""The vocabulary-only GGUF files llama.cpp keeps for its tokenizer tests (``ggml-vocab-<family>.gguf``).

They ship in the ``llama-cpp-python`` source distribution on PyPI, under ``vendor/llama.cpp/models/``;
``vocab_files`` fetches it with pip (from pip's own cache after the first time: no build, no install)
and keeps only those files, in a folder of the caller's choosing.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

VERSION = "0.3.36"  # the llama-cpp-python pinned by the compat extra: its llama.cpp counts like the server
PREFIX = "ggml-vocab-"


def vocab_files(folder: Path) -> dict[str, Path]:
    """family -> its ggml-vocab GGUF in ``folder``, fetched into it on first use. Raises
    ``subprocess.CalledProcessError`` when pip cannot download the sdist (PyPI unreachable)."""
    if not any(folder.glob(PREFIX + "*.gguf")):
        _fetch(folder)
    return {p.name[len(PREFIX) : -len(".gguf")]: p for p in sorted(folder.glob(PREFIX + "*.gguf"))}


def _fetch(folder: Path) -> None:
    folder.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=folder.parent) as tmp:
        argv = [sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:"]
        argv += [f"llama-cpp-python=={VERSION}", "-d", tmp, "--quiet"]
        subprocess.run(argv, check=True, capture_output=True, text=True)
        sdist = next(Path(tmp).glob("*.tar.gz"))
        part = Path(tmp) / "vocab"
        part.mkdir()
        with tarfile.open(sdist) as tar:
            for member in tar:
                name = member.name.rsplit("/", 1)[-1]
                wanted = "/models/" in member.name and name.startswith(PREFIX) and name.endswith(".gguf")
                if wanted and member.isfile() and (src := tar.extractfile(member)) is not None:
                    with src, (part / name).open("wb") as dst:
                        shutil.copyfileobj(src, dst)
        # whole or not at all: a run killed midway leaves no folder that looks complete
        shutil.rmtree(folder, ignore_errors=True)
        part.rename(folder)
