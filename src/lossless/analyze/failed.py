"""Total failure, in words: the endpoints (at a load level) whose every measured request failed, each with
its dominant cause and the server's own explanation, so that a run that measured nothing says why
instead of a table of zeros."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from lossless.records import Failure, RequestRecord


@dataclass(frozen=True)
class TotalFailure:
    endpoint: str
    load: str
    failed: int  # requests, every one of them
    kind: str  # the commonest error kind
    times: int  # requests that failed so
    said: str | None  # the commonest message of that kind (the server's words, redacted), if any

    @property
    def text(self) -> str:
        said = f": {self.said}" if self.said else ""
        return (
            f"endpoint {self.endpoint!r} [{self.load}]: all {self.failed} requests failed, {self.times} "
            f"of them {self.kind}{said}"
        )


def total_failures(records: Sequence[RequestRecord]) -> list[TotalFailure]:
    """Per endpoint and load, in the order first sent: those with no successful measured request (warm-up
    and requests the run's end cut off do not count; a retried attempt counts as its last try)."""
    groups: dict[tuple[str, str], list[RequestRecord]] = {}
    for r in records:
        if r.measured and not r.retried and r.error_kind != Failure.CANCELLED:
            groups.setdefault((r.endpoint, r.load), []).append(r)
    found = []
    for (endpoint, load), final in groups.items():
        if any(r.ok for r in final):
            continue
        kind, times = Counter(r.error_kind or "" for r in final).most_common(1)[0]
        said = Counter(r.error for r in final if r.error_kind == kind and r.error).most_common(1)
        found.append(TotalFailure(endpoint, load, len(final), kind, times, said[0][0] if said else None))
    return found
