"""The summary as JSON (stdout or summary.json) and CSV (one row per endpoint and load level); every
command's result as JSON, on stdout and in its file (``emit_json``)."""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from lossless.atomic import write_atomic

if TYPE_CHECKING:
    from lossless.analyze import GroupStats, Summary

_HEAD = ("name", "load", "class", "ok", "failed", "cancelled", "attempts", "output_tokens_per_s",
         "requests_per_s", "goodput_requests_per_s", "cost_per_ok_request_usd", "errors")  # fmt: skip


class Result(Protocol):
    def as_dict(self) -> dict[str, Any]: ...


def to_json(summary: Summary) -> str:
    return strict_json(summary.as_dict())


def emit_json(result: Result, as_json: bool, out_dir: Path | None, name: str) -> Path | None:
    """A command's result as strict JSON, made once: printed on stdout under --json, and written
    atomically as ``out_dir/name`` under --out (that path returned)."""
    if not as_json and out_dir is None:
        return None
    text = strict_json(result.as_dict())
    if as_json:
        print(text, flush=True)
    return None if out_dir is None else write_atomic(out_dir / name, text + "\n")


def strict_json(obj: Any) -> str:
    """JSON that every parser reads: NaN and infinities (a server's NaN counter, a ratio over zero)
    become null, instead of the bare ``NaN`` Python would write."""
    return json.dumps(finite(obj), indent=2, ensure_ascii=False, allow_nan=False, default=str)


def finite(obj: Any) -> Any:
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: finite(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [finite(v) for v in obj]
    return obj


def to_csv(summary: Summary) -> str:
    from lossless.analyze import METRICS, STATS  # here: probe and verify write JSON without numpy

    columns = [(m.key, stat) for m in METRICS for stat in STATS]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow([*_HEAD, *(f"{key}.{stat}" for key, stat in columns)])
    for e in summary.endpoints:
        # the endpoint's row (class "all"), then one per prompt class when there are several
        parts = [("all", e.overall), *(e.classes.items() if len(e.classes) > 1 else ())]
        for cls, part in parts:
            writer.writerow(["" if v is None else v for v in _row(e.name, e.load, cls, part, columns)])
    return buf.getvalue()


def _row(name: str, load: str, cls: str, g: GroupStats, columns: list[tuple[str, str]]) -> list[Any]:
    req, tput = g.requests, g.throughput
    row: list[Any] = [name, load, cls, req.ok, req.failed, req.cancelled, req.attempts]
    row += [tput.output_tokens_per_s, tput.requests_per_s, tput.goodput_requests_per_s]
    row += [g.cost_per_ok_request_usd, ";".join(f"{k}={v}" for k, v in req.errors.items())]
    row += [g.stat(key, stat) for key, stat in columns]
    return row


def write(summary: Summary, out_dir: Path) -> None:
    write_atomic(out_dir / "summary.json", to_json(summary) + "\n")
    write_atomic(out_dir / "summary.csv", to_csv(summary))
