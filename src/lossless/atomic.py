"""Files written whole or not at all: a killed run or a full disk leaves the old file or the new one,
never half of one. Every file lossless writes in one piece goes through here (records.jsonl is appended
line by line instead, each line flushed as its request finishes)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

_UMASK = os.umask(0o022)  # read once, at import (the only way to read it is to set it)
os.umask(_UMASK)


@contextmanager
def atomic_path(path: Path) -> Iterator[Path]:
    """A scratch path beside ``path`` for the block to write; it replaces ``path`` when the block ends,
    and is removed if the block raises."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        # mkstemp makes the file owner-only; a result is as readable as any file the user writes
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_atomic(path: Path, data: str | bytes) -> Path:
    with atomic_path(path) as tmp:
        if isinstance(data, str):
            tmp.write_text(data, encoding="utf-8")
        else:
            tmp.write_bytes(data)
    return path
