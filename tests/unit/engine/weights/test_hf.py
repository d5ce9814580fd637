"""Hugging Face directory loading: errors name the file and the reason."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from lossless.engine.engine import Engine
from lossless.errors import CheckpointError


@pytest.fixture
def copy(tiny_checkpoint: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(tiny_checkpoint, tmp_path / "ckpt"))


def test_loads_with_name_and_dtype(copy: Path) -> None:
    engine = Engine.load(copy, dtype="float64")
    assert (engine.name, engine.dtype, engine.max_context) == ("ckpt", "float64", 256)


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        (lambda d: (d / "config.json").unlink(), r"config\.json: no such file"),
        (lambda d: (d / "config.json").write_text("[1, 2"), r"config\.json: not readable JSON"),
        (lambda d: (d / "model.safetensors").unlink(), r"ckpt: no \*\.safetensors"),
        (
            lambda d: (d / "model.safetensors").write_bytes(b"\x10\x00junk"),
            r"model\.safetensors: not a readable",
        ),
        (lambda d: (d / "tokenizer.json").unlink(), r"tokenizer\.json: not a readable tokenizer"),
    ],
)
def test_damaged_directory(copy: Path, damage, message: str) -> None:  # type: ignore[no-untyped-def]
    damage(copy)
    with pytest.raises(CheckpointError, match=message):
        Engine.load(copy)


def test_config_disagreeing_with_tensors(copy: Path) -> None:
    text = (copy / "config.json").read_text().replace('"intermediate_size": 128', '"intermediate_size": 96')
    (copy / "config.json").write_text(text)
    with pytest.raises(CheckpointError, match=r"ckpt: tensor layers\.0\.feed_forward\.w13\.weight has shape"):
        Engine.load(copy)


def test_unknown_dtype_is_a_usage_error(copy: Path) -> None:
    from lossless.errors import UsageError

    with pytest.raises(UsageError, match="float8"):
        Engine.load(copy, dtype="float8")
