"""One self-contained HTML file per run: inline CSS and SVG, no script, no font, no request of any kind,
so it opens offline and can be mailed or attached to a ticket as it is.

``render_run(summary, records, verify)`` -> the page; ``build(run_dir)`` reads what ``bench --out`` and
``verify --out`` wrote there. Nothing here reads an API key, and the summary holds none to show.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

from lossless.analyze import METRICS, Summary, summarize
from lossless.analyze.metrics import SHOWN_RATIOS
from lossless.atomic import write_atomic
from lossless.checks import record_problem
from lossless.errors import UsageError
from lossless.records import RequestRecord, from_json
from lossless.report import inspect_html, plots
from lossless.report.notes import endpoint_notes
from lossless.report.page import figure, page, section, table
from lossless.report.verify import verify_section

# --- a run --------------------------------------------------------------------------------------------


_OVERVIEW = tuple((m, stat) for m in METRICS for stat in m.overview)


def _overview(summary: Summary) -> str:
    rows = []
    for e in summary.endpoints:
        req, tput = e.overall.requests, e.overall.throughput.output_tokens_per_s
        errors = ", ".join(f"{k}: {v}" for k, v in req.errors.items()) or "-"
        cells = (m.fmt(e.overall.stat(m.key, s)) for m, s in _OVERVIEW)
        rows.append((e.name, e.load, f"{req.ok}/{req.failed}", *cells, plots.num(tput, 1), errors))
    columns = (m.header(s) for m, s in _OVERVIEW)
    body = table(("endpoint", "load", "ok/failed", *columns, "tok/s total", "errors"), rows)
    texts = [f"[{c.load}] {c.text}" for c in summary.comparisons if c.stat in SHOWN_RATIOS]
    if texts:
        items = "".join(f"<li>{escape(t)}</li>" for t in texts)
        body += (
            f'<h2 style="margin-top:14px">Compared with the first endpoint</h2><ul class="tight">{items}</ul>'
        )
    said = [f"{e.name} [{e.load}]: " + "; ".join(n) for e in summary.endpoints if (n := endpoint_notes(e))]
    if said:
        items = "".join(f"<li>{escape(t)}</li>" for t in said)
        body += f'<h2 style="margin-top:14px">Per endpoint</h2><ul class="tight">{items}</ul>'
    if summary.interrupted:
        body += '<p class="about"><b>Interrupted</b>: results cover the requests that finished.</p>'
    return section("overview", "Results", body, "Successful requests only; warm-up excluded.")


def _kv(pairs: Iterable[tuple[str, Any]]) -> str:
    return table(("", ""), ((k, "-" if v is None else str(v)) for k, v in pairs), cls="kv")


def _setup(summary: Summary) -> str:
    env, config = (summary.run.environment, summary.run.config) if summary.run else ({}, {})
    if not env and not config:
        why = "rebuilt from records.jsonl" if summary.rebuilt_from_records else "by this version"
        return section("setup", "Configuration and environment", f"<p>Not recorded ({why}).</p>")
    parts = []
    if config:
        settings = [(k, json.dumps(v) if isinstance(v, dict | list) else v) for k, v in config.items()
                    if k != "endpoints"]  # fmt: skip
        parts.append(f"<div><h2>Run</h2>{_kv(settings)}</div>")
        rows = [
            (e["name"], e["base_url"], e["model"], e.get("api_key_env") or "-",
             json.dumps(e.get("body") or {}), ", ".join(e.get("headers") or []) or "-")
            for e in config.get("endpoints", [])
        ]  # fmt: skip
        headers = ("endpoint", "base URL", "model", "key variable", "extra body", "extra headers")
        parts.append(f"<div><h2>Endpoints</h2>{table(headers, rows)}</div>")
    if env:
        parts.append(f"<div><h2>Environment</h2>{_kv(env.items())}</div>")
    clients = summary.run.clients if summary.run else ()
    if clients:
        rows = [(c["worker"], c["host"], c["load"], f"{c['cpu_s']:.2f}", f"{c['wall_s']:.2f}",
                 f"{c['busy']:.0%}") for c in clients]  # fmt: skip
        headers = ("worker", "host", "load", "CPU (s)", "wall (s)", "busy")
        parts.append(f"<div><h2>Load generators</h2>{table(headers, rows)}</div>")
    about = "API keys are never recorded: only the name of the variable that held one."
    return section(
        "setup", "Configuration and environment", f'<div class="cols">{"".join(parts)}</div>', about
    )


def render_run(
    summary: Summary | None,
    records: Sequence[RequestRecord],
    verify: dict[str, Any] | None = None,
    notes: Sequence[str] = (),
    inspected: Sequence[inspect_html.Link] = (),
) -> str:
    """The page; ``inspected``: the endpoints an inspect card in the folder tells of, linked to it."""
    sections, nav = [], []
    notes = [*notes, *(summary.run.warnings if summary is not None and summary.run is not None else ())]
    if notes:
        items = "".join(f"<li>{escape(n)}</li>" for n in notes)
        sections.append(section("notes", "Notes", f'<ul class="tight">{items}</ul>'))
    if summary is not None:
        figs = plots.figures(summary, records)
        linked = [("inspected", "Inspected")] if inspected else []
        cards = [inspect_html.bench_section(inspected)] if inspected else []  # beside the results
        sections += [_overview(summary), *cards, *(figure(f) for f in figs)]
        nav += [("overview", "Results"), *linked, *((f.key, f.title) for f in figs)]
    if verify is not None:
        sections.append(verify_section(verify))
        nav.append(("verify", "Verification"))
    if summary is not None:
        sections.append(_setup(summary))
        nav.append(("setup", "Configuration"))
    env = summary.run.environment if summary is not None and summary.run is not None else {}
    when = env.get("started_utc", "time not recorded")
    names = ", ".join(dict.fromkeys(e.name for e in summary.endpoints)) if summary is not None else ""
    subtitle = f"{names or 'verification'} · {when} · lossless {env.get('lossless_version', '')}".strip()
    return page("lossless report", subtitle, sections, nav)


# --- files --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SavedRun:
    summary: Summary | None  # summary.json, or rebuilt from the records when it is missing
    records: list[RequestRecord]  # records.jsonl
    verify: dict[str, Any] | None  # verify.json
    notes: tuple[str, ...] = ()  # what a person should know about how these were read
    inspected: tuple[inspect_html.Link, ...] = ()  # endpoints with a card in the folder's inspect.json


def read_run(run_dir: Path, rebuild: bool = True, page_dir: Path | None = None) -> SavedRun:
    """What ``bench --out`` (summary.json, records.jsonl) and ``verify --out`` (verify.json) left in DIR.

    A run killed before it wrote summary.json (SIGKILL, a power cut) still left its records, flushed one
    line at a time: with ``rebuild`` its summary is made again from them. Anything unreadable is a
    UsageError naming the file (and line). An inspect.json there (``lossless inspect --out``) links the
    endpoints it has cards of, from a page written in ``page_dir`` (default: ``run_dir``)."""
    found, verify = _read_json(run_dir / "summary.json"), _read_json(run_dir / "verify.json")
    records_path = run_dir / "records.jsonl"
    if not records_path.exists():
        if found is not None:
            raise UsageError(f"{run_dir} has summary.json but no records.jsonl to plot")
        if verify is None:
            raise UsageError(
                f"{run_dir} holds neither summary.json and records.jsonl (bench --out) nor verify.json "
                "(verify --out)"
            )
        return SavedRun(None, [], verify)
    records, notes = read_records(records_path)
    summary = None if found is None else _summary(found, run_dir / "summary.json")
    if summary is None and rebuild and not records and verify is None:
        raise UsageError(f"{records_path} holds no records and there is no summary.json: nothing to show")
    if summary is None and rebuild and records:
        summary = _rebuilt(records)
        notes.append(
            f"{run_dir / 'summary.json'} is missing (the run was stopped before it ended?): the summary was "
            f"rebuilt from the {len(records)} records in records.jsonl, without prices (no costs), "
            "configuration or environment"
        )
    config = summary.run.config if summary is not None and summary.run is not None else {}
    linked, more = inspect_html.links(config.get("endpoints") or [], [run_dir], page_dir or run_dir)
    return SavedRun(summary, records, verify, (*notes, *more), tuple(linked))


def _read_json(path: Path) -> dict[str, Any] | None:
    if not path.exists():
        return None
    try:
        found = json.loads(path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except ValueError as exc:  # not UTF-8, not JSON
        raise UsageError(f"cannot read {path}: not JSON ({_short(exc)})") from None
    except RecursionError:
        raise UsageError(f"cannot read {path}: it nests too deeply") from None
    if not isinstance(found, dict):
        raise UsageError(f"{path} is not what lossless writes: a JSON object, got {type(found).__name__}")
    return found


def _summary(found: dict[str, Any], path: Path) -> Summary:
    entries = found.get("endpoints")
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("name"), str) and isinstance(e.get("load"), str)
        for e in entries
    ):
        raise UsageError(f"{path} is not a bench summary: 'endpoints' must be a list of {{name, load, ...}}")
    try:
        return Summary.from_dict(found)
    except (KeyError, TypeError, ValueError) as exc:
        raise UsageError(
            f"{path} is not shaped as lossless writes it ({type(exc).__name__}: {_short(exc)})"
        ) from None


def _rebuilt(records: Sequence[RequestRecord]) -> Summary:
    names = dict.fromkeys(r.endpoint for r in records)  # the table in the order the run first sent
    return summarize(records, {name: (None, None) for name in names}, rebuilt=True)


def read_records(path: Path) -> tuple[list[RequestRecord], list[str]]:
    """records.jsonl, every line checked; a cut-short last line (a write stopped midway) is skipped with
    a note: lines are flushed one at a time, so only the last can be cut."""
    try:
        with path.open("rb") as f:
            lines = [(n, raw) for n, raw in enumerate(f, 1) if raw.strip()]
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    records: list[RequestRecord] = []
    for n, raw in lines:
        try:
            record = from_json(raw.decode("utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            if n == lines[-1][0] and not raw.endswith(b"\n"):
                return records, [f"{path}: skipped its last line, cut short ({_short(exc)})"]
            raise UsageError(f"{path}:{n}: not JSON ({_short(exc)})") from None
        except KeyError as exc:
            raise UsageError(f"{path}:{n}: not a request record: no field {exc}") from None
        except (ValueError, TypeError, RecursionError) as exc:
            raise UsageError(
                f"{path}:{n}: not a request record ({type(exc).__name__}: {_short(exc)})"
            ) from None
        problem = record_problem(record)
        if problem is not None:
            raise UsageError(f"{path}:{n}: not a request record: {problem}")
        records.append(record)
    return records, []


def _short(exc: BaseException) -> str:
    return str(exc).splitlines()[0][:160] if str(exc) else type(exc).__name__


def render_saved(run: SavedRun, run_dir: Path) -> str:
    """``render_run`` of what ``read_run`` found. The records and summary.json were checked field by field
    on reading (``Summary.from_dict``); verify.json is a plain dict read back, so a field of the wrong
    shape in it is caught where the page reads it."""
    try:
        return render_run(run.summary, run.records, run.verify, run.notes, run.inspected)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
        raise UsageError(
            f"{run_dir}: summary.json or verify.json is not shaped as lossless writes it "
            f"({type(exc).__name__}: {_short(exc)})"
        ) from None


def build(run_dir: Path) -> str:
    return render_saved(read_run(run_dir), run_dir)


def write(path: Path, text: str) -> Path:
    return write_atomic(path, text)
