"""Compiled graphs kept on disk, one folder per engine configuration, so that a second start skips the
minutes of the first compile.

The folder is ``$LOSSLESS_HOME/compiled/<key>``: inductor's own cache (``TORCHINDUCTOR_CACHE_DIR``) for one
engine, keyed by everything that invalidates the code compiled for it - torch's and Python's versions,
the CPU's features, the model's file (path, size, modification time; each file of a folder), the
engine's own source, and the configuration (numerics, int4 kernel, drafter, context length, threads).
Inductor writes each entry whole (a temporary file, then a rename); ``complete.json``, written last and
atomically, says that a compile ran to its end in this folder. A folder without it (a compile that
failed or was killed) holds only whole entries, and the next compile simply fills it further.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lossless.atomic import write_atomic
from lossless.engine import cpu

if TYPE_CHECKING:
    from lossless.engine.engine import Engine

MARKER = "complete.json"
_ENGINE_SOURCE = Path(__file__).parent  # lossless/engine: the code that dynamo traces and inductor compiles


@dataclass(frozen=True)
class CompileCache:
    folder: Path
    key: dict[str, Any]  # what the folder's name hashes (also written into the marker)

    def complete(self) -> dict[str, Any] | None:
        """The marker of a compile that ran to its end here, or None."""
        try:
            return json.loads((self.folder / MARKER).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None

    def use(self) -> None:
        """Make this process's compiles read and write this folder (inductor reads the variable at each
        cache access; a child process inherits it)."""
        self.folder.mkdir(parents=True, exist_ok=True)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(self.folder)

    def mark_complete(self, seconds: float) -> None:
        write_atomic(self.folder / MARKER, json.dumps({**self.key, "compile_s": round(seconds, 1)}, indent=1))


def compile_cache(engine: Engine, home: Path, threads: int) -> CompileCache:
    """Where ``engine``'s compiled graphs live under ``home`` (``$LOSSLESS_HOME``) with ``threads`` torch
    threads (inductor writes the thread count into its C++ code)."""
    key = cache_key(engine, threads)
    digest = hashlib.sha256(json.dumps(key, sort_keys=True).encode()).hexdigest()[:16]
    return CompileCache(home / "compiled" / digest, key)


def cache_key(engine: Engine, threads: int) -> dict[str, Any]:
    import torch

    source = engine.source
    files = [] if source is None else sorted(source.rglob("*")) if source.is_dir() else [source]
    stats = [(f.name, f.stat().st_size, f.stat().st_mtime_ns) for f in files if f.is_file()]
    spec = engine.spec
    return {
        "torch": torch.__version__,
        "python": platform.python_version(),
        "cpu": hashlib.sha256(" ".join(sorted(cpu.flags())).encode()).hexdigest()[:16],
        "model": str(source.resolve()) if source is not None else engine.name,
        "model_files": hashlib.sha256(repr(stats).encode()).hexdigest()[:16],  # names, sizes, times
        "engine_source": _source_digest(),
        "dtype": engine.dtype,
        "int4_kernel": engine.int4_kernel[0] if engine.int4_kernel else None,
        "prompt_dtype": engine.prompt_dtype,
        "drafter": None if spec is None else [spec.kind, str(spec.path), spec.k, spec.threshold, spec.tree],
        "max_context": engine.max_context,
        "threads": threads,
        "executable": sys.executable,
    }


def _source_digest() -> str:
    """The engine's code as dynamo sees it: a change to any of its files is another set of graphs."""
    digest = hashlib.sha256()
    for path in sorted(_ENGINE_SOURCE.rglob("*")):
        if path.suffix in (".py", ".cpp"):
            digest.update(path.relative_to(_ENGINE_SOURCE).as_posix().encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def compile_aside(engine: Engine) -> float:
    """`Engine.compile` without stopping ``engine``: its twin (the same weights, a KV cache of its own,
    `Engine.twin`) makes the graphs while ``engine`` goes on serving eagerly; then, between two
    generations, ``engine`` starts using them (`Engine.use_compiled`). Dynamo keeps graphs per function,
    behind guards on the tensors' kinds and shapes, not on which module holds them: the twin's graphs are
    ``engine``'s (one small graph is still made at first use, well under a second).

    Tracing is Python-heavy: with the default 5 ms switch interval the serving thread waited that long
    for the interpreter at each of its hundreds of operations per token (a 40-token answer took 31 s
    instead of 0.6). While the twin compiles, the interval is 0.1 ms. The seconds the twin took."""
    twin = engine.twin()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-4)
    try:
        seconds = twin.compile()
    finally:
        sys.setswitchinterval(interval)
        del twin
    engine.use_compiled()
    return seconds
