"""One self-contained HTML file per run: inline CSS and SVG, no script, no font, no request of any kind,
so it opens offline and can be mailed or attached to a ticket as it is.

``render_run(summary, records, verify)`` -> the page; ``build(run_dir)`` reads what ``bench --out`` and
``verify --out`` wrote there. Nothing here reads an API key, and the summary holds none to show.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from html import escape
from pathlib import Path
from typing import Any

from lossless.analyze import METRICS, Summary
from lossless.analyze.metrics import SHOWN_RATIOS, thin
from lossless.atomic import write_atomic
from lossless.errors import UsageError
from lossless.records import RequestRecord
from lossless.report import inspect_html, plots
from lossless.report.notes import endpoint_notes
from lossless.report.page import figure, page, section, table
from lossless.report.probe import probe_section
from lossless.report.tasks import tasks_section
from lossless.report.terminal import REPEAT_INTERVALS, repeat_rows
from lossless.report.verify import verify_section
from lossless.rundir import INSPECT, PROBE, TASKS, SavedRun, first_line, read_run

# what another command left in the run's folder -> (the section's id, its title, its renderer)
SECTIONS: dict[str, tuple[str, str, Callable[[Mapping[str, Any]], str]]] = {
    PROBE: ("probe", "Parameters", probe_section),
    TASKS: ("tasks", "Tasks", tasks_section),
    INSPECT: ("inspect", "Inspected", inspect_html.summary_section),
}

# --- a run --------------------------------------------------------------------------------------------


_OVERVIEW = tuple((m, stat) for m in METRICS for stat in m.overview)


def _overview(summary: Summary) -> str:
    rows = []
    for e in summary.endpoints:
        req, tput = e.overall.requests, e.overall.throughput.output_tokens_per_s
        errors = ", ".join(f"{k}: {v}" for k, v in req.errors.items()) or "-"
        count = {m.key: int(e.overall.stat(m.key, "n") or 0) for m, _ in _OVERVIEW}
        cells = (
            ("~" if thin(s, count[m.key]) else "") + m.fmt(e.overall.stat(m.key, s)) for m, s in _OVERVIEW
        )
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
    headers, rows = repeat_rows(summary)
    if rows:
        body += (
            f'<h2 style="margin-top:14px">Over the runs: mean ({REPEAT_INTERVALS})</h2>{table(headers, rows)}'
        )
    if summary.stopped:
        body += f'<p class="about"><b>Sweep stopped</b>: {escape(summary.stopped)}</p>'
    if summary.interrupted:
        body += '<p class="about"><b>Interrupted</b>: results cover the requests that finished.</p>'
    about = "Successful requests only; warm-up excluded. ~: fewer requests than the percentile is read from."
    return section("overview", "Results", body, about)


def _kv(pairs: Iterable[tuple[str, Any]]) -> str:
    return table(("", ""), ((k, "-" if v is None else str(v)) for k, v in pairs), cls="kv")


def _setup(summary: Summary) -> str:
    env, config = (summary.run.environment, summary.run.config) if summary.run else ({}, {})
    if not env and not config:
        why = "rebuilt from records.jsonl" if summary.rebuilt_from_records else "by this version"
        return section("setup", "Configuration and environment", f"<p>Not recorded ({why}).</p>")
    parts = []
    if config:
        settings = [
            (k, json.dumps(v) if isinstance(v, dict | list) else v)
            for k, v in config.items()
            if k != "endpoints"
        ]
        parts.append(f"<div><h2>Run</h2>{_kv(settings)}</div>")
        rows = [
            (
                e["name"],
                e["base_url"],
                e["model"],
                e.get("api_key_env") or "-",
                json.dumps(e.get("body") or {}),
                ", ".join(e.get("headers") or []) or "-",
            )
            for e in config.get("endpoints", [])
        ]
        headers = ("endpoint", "base URL", "model", "key variable", "extra body", "extra headers")
        parts.append(f"<div><h2>Endpoints</h2>{table(headers, rows)}</div>")
    if env:
        parts.append(f"<div><h2>Environment</h2>{_kv(env.items())}</div>")
    clients = summary.run.clients if summary.run else ()
    if clients:
        rows = [
            (c["worker"], c["host"], c["load"], f"{c['cpu_s']:.2f}", f"{c['wall_s']:.2f}", f"{c['busy']:.0%}")
            for c in clients
        ]
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
    others: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """The page; ``inspected``: the endpoints an inspect card in the folder tells of, linked to it;
    ``others``: probe.json, tasks.json and inspect.json read back, each its section."""
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
    for name, (key, title, make) in SECTIONS.items():
        if others and name in others:
            sections.append(make(others[name]))
            nav.append((key, title))
    if summary is not None:
        sections.append(_setup(summary))
        nav.append(("setup", "Configuration"))
    env = summary.run.environment if summary is not None and summary.run is not None else {}
    when = env.get("started_utc", "time not recorded")
    names = ", ".join(dict.fromkeys(e.name for e in summary.endpoints)) if summary is not None else ""
    what = names or ("verification" if verify is not None else ", ".join(others or ()))
    subtitle = f"{what} · {when} · lossless {env.get('lossless_version', '')}".strip()
    return page("lossless report", subtitle, sections, nav)


def with_links(
    run: SavedRun, run_dir: Path, page_dir: Path
) -> tuple[SavedRun, tuple[inspect_html.Link, ...]]:
    """The endpoints an inspect.json in the run's folder (``lossless inspect --out``) has cards of, linked
    from a page written in ``page_dir``; what could not be linked is added to the run's notes."""
    config = run.summary.run.config if run.summary is not None and run.summary.run is not None else {}
    linked, more = inspect_html.links(config.get("endpoints") or [], [run_dir], page_dir)
    return replace(run, notes=(*run.notes, *more)), tuple(linked)


def render_saved(run: SavedRun, run_dir: Path, inspected: Sequence[inspect_html.Link] = ()) -> str:
    """``render_run`` of what ``rundir.read_run`` found. The records and summary.json were checked field by
    field on reading (``Summary.from_dict``); verify.json is a plain dict read back, so a field of the
    wrong shape in it is caught where the page reads it."""
    try:
        return render_run(run.summary, run.records, run.verify, run.notes, inspected, run.others)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
        raise UsageError(
            f"{run_dir}: summary.json or verify.json is not shaped as lossless writes it "
            f"({type(exc).__name__}: {first_line(exc)})"
        ) from None


def build(run_dir: Path) -> str:
    run, inspected = with_links(read_run(run_dir), run_dir, run_dir)
    return render_saved(run, run_dir, inspected)


def write_page(path: Path, text: str) -> Path:
    """A page at ``path``, written whole or not at all; its path."""
    return write_atomic(path, text)
