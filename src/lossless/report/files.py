"""The summary as JSON (stdout or summary.json) and CSV (one row per endpoint and load level)."""

from __future__ import annotations

import csv
import io
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

_STATS = ("n", "mean", "std", "min", "p50", "p90", "p95", "p99", "p99.9", "max", "cv")
_METRICS = (
    "ttfb_ms",
    "ttft_ms",
    "ttfc_ms",
    "tpot_ms",
    "output_tps",
    "e2e_ms",
    "e2e_from_schedule_ms",
    "queue_delay_ms",
    "inter_chunk_ms",
    "itl_ms",
    "n_out",
)


def to_json(summary: dict[str, Any]) -> str:
    return strict_json(summary)


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


def to_csv(summary: dict[str, Any]) -> str:
    header = [
        "name",
        "load",
        "class",
        "ok",
        "failed",
        "cancelled",
        "attempts",
        "output_tokens_per_s",
        "requests_per_s",
    ]
    header += ["goodput_requests_per_s", "cost_per_ok_request_usd", "errors"]
    header += [f"{m}.{s}" for m in _METRICS for s in _STATS]
    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(header)
    for e in summary["endpoints"]:
        # the endpoint's row (class "all"), then one per prompt class when there are several
        classes = e.get("classes", {})
        parts = [("all", e), *(classes.items() if len(classes) > 1 else ())]
        for cls, part in parts:
            writer.writerow(["" if v is None else v for v in _row(e["name"], e["load"], cls, part)])
    return buf.getvalue()


def _row(name: str, load: str, cls: str, e: dict[str, Any]) -> list[Any]:
    req, tput = e["requests"], e["throughput"]
    row: list[Any] = [name, load, cls, req["ok"], req["failed"], req["cancelled"], req["attempts"]]
    row += [tput["output_tokens_per_s"], tput["requests_per_s"], tput["goodput_requests_per_s"]]
    row += [e["cost_per_ok_request_usd"], ";".join(f"{k}={v}" for k, v in req["errors"].items())]
    row += [e[m].get(s) for m in _METRICS for s in _STATS]
    return row


def write(summary: dict[str, Any], out_dir: Path) -> None:
    write_atomic(out_dir / "summary.json", to_json(summary) + "\n")
    write_atomic(out_dir / "summary.csv", to_csv(summary))


_UMASK = os.umask(0o022)  # read once, at import (the only way to read it is to set it)
os.umask(_UMASK)


def write_atomic(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` whole or not at all: a killed run never leaves half a file behind."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".part")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        # mkstemp makes the file owner-only; a report is as readable as any file the user writes
        os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    return path
