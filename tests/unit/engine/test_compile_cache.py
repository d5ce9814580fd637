"""The compile cache's folder: one per configuration, a new one when anything that changes the compiled
code changes, and a completion marker that is written whole or not at all."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lossless.engine.compile_cache import MARKER, compile_cache
from lossless.engine.engine import Engine
from lossless.engine.speculate.spec import parse_drafter_spec


def test_one_folder_per_configuration(tiny_engine: Engine, tmp_path: Path) -> None:
    first = compile_cache(tiny_engine, tmp_path, threads=2)
    assert first.folder.parent == tmp_path / "compiled"
    assert compile_cache(tiny_engine, tmp_path, threads=2).folder == first.folder  # stable
    assert compile_cache(tiny_engine, tmp_path, threads=1).folder != first.folder
    tiny_engine.use_drafter(parse_drafter_spec("ngram"))
    with_drafter = compile_cache(tiny_engine, tmp_path, threads=2).folder
    assert with_drafter != first.folder
    tiny_engine.use_drafter(parse_drafter_spec("ngram", k=11))
    assert compile_cache(tiny_engine, tmp_path, threads=2).folder not in (first.folder, with_drafter)


def test_a_changed_model_file_is_another_folder(tiny_checkpoint: Path, tmp_path: Path) -> None:
    engine = Engine.load(tiny_checkpoint)
    before = compile_cache(engine, tmp_path, threads=2).folder
    weights = tiny_checkpoint / "model.safetensors"
    stat = weights.stat()
    try:
        os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000_000))
        assert compile_cache(engine, tmp_path, threads=2).folder != before
    finally:
        os.utime(weights, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert compile_cache(engine, tmp_path, threads=2).folder == before


def test_dtype_is_part_of_the_key(tiny_checkpoint: Path, tmp_path: Path) -> None:
    float32 = compile_cache(Engine.load(tiny_checkpoint), tmp_path, threads=2)
    bfloat16 = compile_cache(Engine.load(tiny_checkpoint, dtype="bfloat16"), tmp_path, threads=2)
    assert float32.folder != bfloat16.folder
    assert (float32.key["dtype"], bfloat16.key["dtype"]) == ("float32", "bfloat16")


def test_the_marker_says_complete_only_once_written(
    tiny_engine: Engine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    cache = compile_cache(tiny_engine, tmp_path, threads=2)
    assert cache.complete() is None
    cache.use()
    assert os.environ["TORCHINDUCTOR_CACHE_DIR"] == str(cache.folder) and cache.folder.is_dir()
    (cache.folder / MARKER).write_text("{half")  # what a torn write would leave: not complete
    assert cache.complete() is None
    cache.mark_complete(12.34)
    marker = cache.complete()
    assert marker is not None and marker["compile_s"] == 12.3 and marker["dtype"] == "float32"
    assert [p.name for p in cache.folder.iterdir()] == [MARKER]  # no scratch file left beside it
