from __future__ import annotations

from pathlib import Path

import pytest
from sample_records import make

from lossless.rundir import read_jsonl, write_jsonl


def test_jsonl_round_trip_is_exact(tmp_path: Path) -> None:
    records = [make(), make(request_index=1, error_kind="http_429", status=429, event_ns=(), event_kinds="")]
    write_jsonl(tmp_path / "r.jsonl", records)
    assert list(read_jsonl(tmp_path / "r.jsonl")) == records
    assert len((tmp_path / "r.jsonl").read_text().splitlines()) == 2


def test_write_atomic_leaves_the_old_file_or_the_new_one(tmp_path: Path) -> None:
    from lossless.atomic import write_atomic

    target = write_atomic(tmp_path / "out" / "summary.json", "old\n")
    with pytest.raises(TypeError):  # not text: fails after the temporary file was made
        write_atomic(target, 42)  # type: ignore[arg-type]
    assert target.read_text() == "old\n"
    assert sorted(p.name for p in target.parent.iterdir()) == ["summary.json"]  # no temporary left
    write_atomic(target, "new\n")
    assert target.read_text() == "new\n"
