"""``bench --resume``: a killed run continued. What its records.jsonl holds of each request is kept where
the request finished (its last attempt recorded, not cut off by the run's end); the rest is dropped and
sent again, so no request is lost and none is counted twice.

Request ``i`` of a level is the same prompt in every run of the same flags (the workload is seeded), so
the resumed run sends exactly the requests the first one owed. The records of both runs are summarized
together; their times are on one monotonic clock when both ran on one machine, so the measurement
window (and so throughput) spans the pause between them, which the summary says.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path

from lossless.atomic import atomic_path
from lossless.bench.config import LoadLevel
from lossless.client.endpoints import Endpoint
from lossless.errors import UsageError
from lossless.records import Failure, RequestRecord
from lossless.rundir import read_records, write_jsonl

Key = tuple[str, str, int]  # (endpoint, load level, request index)
UNFINISHED = (Failure.CANCELLED, Failure.WORKER_LOST)


def finished(records: Iterable[RequestRecord]) -> tuple[list[RequestRecord], frozenset[Key]]:
    """The records of the requests that finished, in their order, and those requests."""
    attempts: dict[Key, list[RequestRecord]] = {}
    for r in records:
        attempts.setdefault((r.endpoint, r.load, r.request_index), []).append(r)
    done = frozenset(
        key
        for key, rs in attempts.items()
        if any(not r.retried for r in rs) and all(r.error_kind not in UNFINISHED for r in rs)
    )
    return [r for key, rs in attempts.items() if key in done for r in rs], done


def resume(
    path: Path, endpoints: Sequence[Endpoint], loads: Sequence[LoadLevel]
) -> tuple[list[RequestRecord], frozenset[Key], list[str]]:
    """records.jsonl at ``path`` cut back to its finished requests (rewritten whole), those requests, and
    notes; a UsageError when it was made with other endpoints or load levels than these."""
    if not path.is_file():
        raise UsageError(f"--resume: {path} is not there: nothing to continue (drop --resume to start a run)")
    records, notes = read_records(path)
    names, labels = {e.name for e in endpoints}, {level.label for level in loads}
    strange = sorted({r.endpoint for r in records} - names) + sorted({r.load for r in records} - labels)
    if strange:
        raise UsageError(
            f"--resume: {path} was made with other endpoints or loads ({', '.join(strange)}): "
            "give the flags of the run to continue"
        )
    kept, done = finished(records)
    with atomic_path(path) as tmp:
        write_jsonl(tmp, kept)
    dropped = len(records) - len(kept)
    notes.append(
        f"resumed: {len(done)} finished requests kept from the killed run, {dropped} records of "
        "unfinished ones dropped (sent again); throughput spans the pause between runs"
    )
    return kept, done, notes
