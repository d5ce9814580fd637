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

from lossless.analyze import summarize
from lossless.checks import record_problem
from lossless.errors import UsageError
from lossless.records import RequestRecord, from_json
from lossless.report import plots, svg

CSS = """
:root { --fg: #1d2433; --muted: #5b6476; --line: #d9dee7; --bg: #f6f7f9; --card: #fff; --accent: #1f77b4; }
* { box-sizing: border-box; }
body { margin: 0; background: var(--bg); color: var(--fg);
  font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1320px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 24px; margin: 0 0 4px; } h2 { font-size: 18px; margin: 0 0 6px; }
.sub { color: var(--muted); margin: 0 0 18px; }
nav a { color: var(--accent); margin-right: 14px; text-decoration: none; font-size: 13px; }
section { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 16px 18px;
  margin: 16px 0; }
.about { color: var(--muted); margin: 0 0 10px; max-width: 90ch; }
.figure { display: flex; flex-wrap: wrap; gap: 18px; align-items: flex-start; }
.figure > svg { flex: 1 1 560px; max-width: 720px; height: auto; }
.figure > .numbers { flex: 1 1 500px; overflow-x: auto; }
table { border-collapse: collapse; font-variant-numeric: tabular-nums; font-size: 13px; }
th, td { padding: 4px 8px; border-bottom: 1px solid var(--line); text-align: right; white-space: nowrap; }
th { color: var(--muted); font-weight: 600; background: #fafbfc; }
th:first-child, td:first-child { text-align: left; }
td.text { text-align: left; white-space: normal; }
.kv td:first-child { color: var(--muted); }
.badge { display: inline-block; padding: 2px 10px; border-radius: 12px; font-weight: 700; color: #fff; }
.equivalent { background: #2ca02c; } .different { background: #d62728; }
.inconclusive { background: #c98a00; }
ul.tight { margin: 6px 0; padding-left: 20px; }
.cols { display: flex; flex-wrap: wrap; gap: 28px; }
svg.plot { background: #fff; font-family: inherit; }
svg .title { font-size: 14px; font-weight: 700; fill: var(--fg); }
svg .tick, svg .legend { font-size: 12px; fill: #3c4454; }
svg .axis { font-size: 12px; fill: var(--muted); }
svg .note { font-size: 14px; fill: var(--muted); font-style: italic; }
svg .frame { fill: none; stroke: #b8c0cc; }
svg .grid { stroke: #eceff3; }
svg .ref { stroke: #555; stroke-dasharray: 4 3; }
svg .ref-label { font-size: 11px; fill: #555; }
footer { color: var(--muted); font-size: 12px; margin-top: 24px; }
"""


def page(title: str, subtitle: str, sections: Iterable[str], nav: Sequence[tuple[str, str]] = ()) -> str:
    links = "".join(f'<a href="#{escape(k)}">{escape(t)}</a>' for k, t in nav)
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        # no request of any kind, even one a future edit adds by mistake: the page is self-contained
        '<meta http-equiv="Content-Security-Policy" '
        "content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">"
        f"<title>{escape(title)}</title><style>{CSS}</style></head><body><main>"
        f'<h1>{escape(title)}</h1><p class="sub">{escape(subtitle)}</p>'
        + (f"<nav>{links}</nav>" if links else "")
        + "".join(sections)
        + "<footer>Written by lossless. Self-contained: no scripts, fonts or network requests.</footer>"
        "</main></body></html>\n"
    )


def table(headers: Sequence[str], rows: Iterable[Sequence[str]], cls: str = "") -> str:
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{escape(str(c))}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def section(key: str, title: str, body: str, about: str = "") -> str:
    intro = f'<p class="about">{escape(about)}</p>' if about else ""
    return f'<section id="{escape(key)}"><h2>{escape(title)}</h2>{intro}{body}</section>'


def figure(f: plots.Figure) -> str:
    numbers = f'<div class="numbers">{table(f.headers, f.rows)}</div>'
    return section(f.key, f.title, f'<div class="figure">{f.svg}{numbers}</div>', f.about)


# --- a run --------------------------------------------------------------------------------------------


def _overview(summary: dict[str, Any]) -> str:
    entries = summary["endpoints"]
    rows = []
    for e in entries:
        req, tput = e["requests"], e["throughput"]["output_tokens_per_s"]
        errors = ", ".join(f"{k}: {v}" for k, v in req["errors"].items()) or "-"
        rows.append(
            (e["name"], e["load"], f"{req['ok']}/{req['failed']}",
             *(plots._num(e[m].get(s), d) for m, s, d in _OVERVIEW),
             plots._num(tput, 1), errors)
        )  # fmt: skip
    headers = ("endpoint", "load", "ok/failed", "TTFT p50 (ms)", "TTFT p99 (ms)", "TPOT p50 (ms)",
               "speed p50 (tok/s)", "E2E p50 (ms)", "E2E p99 (ms)", "tok/s total", "errors")  # fmt: skip
    body = table(headers, rows)
    texts = [f"[{c['load']}] {c['text']}" for c in summary.get("comparisons", []) if c.get("stat") != "p90"]
    if texts:
        items = "".join(f"<li>{escape(t)}</li>" for t in texts)
        body += (
            f'<h2 style="margin-top:14px">Compared with the first endpoint</h2><ul class="tight">{items}</ul>'
        )
    if summary.get("interrupted"):
        body += '<p class="about"><b>Interrupted</b>: results cover the requests that finished.</p>'
    return section("overview", "Results", body, "Successful requests only; warm-up excluded.")


_OVERVIEW = (
    ("ttft_ms", "p50", 0),
    ("ttft_ms", "p99", 0),
    ("tpot_ms", "p50", 1),
    ("output_tps", "p50", 1),
    ("e2e_ms", "p50", 0),
    ("e2e_ms", "p99", 0),
)


def _kv(pairs: Iterable[tuple[str, Any]]) -> str:
    return table(("", ""), ((k, "-" if v is None else str(v)) for k, v in pairs), cls="kv")


def _setup(summary: dict[str, Any]) -> str:
    env, config = summary.get("environment"), summary.get("config")
    if not env and not config:
        why = "rebuilt from records.jsonl" if summary.get("rebuilt_from_records") else "by this version"
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
    about = "API keys are never recorded: only the name of the variable that held one."
    return section(
        "setup", "Configuration and environment", f'<div class="cols">{"".join(parts)}</div>', about
    )


def render_run(
    summary: dict[str, Any] | None,
    records: Sequence[RequestRecord],
    verify: dict[str, Any] | None = None,
    notes: Sequence[str] = (),
) -> str:
    sections, nav = [], []
    if notes:
        items = "".join(f"<li>{escape(n)}</li>" for n in notes)
        sections.append(section("notes", "Notes", f'<ul class="tight">{items}</ul>'))
    if summary is not None:
        figs = plots.figures(summary, records)
        sections += [_overview(summary), *(figure(f) for f in figs)]
        nav += [("overview", "Results"), *((f.key, f.title) for f in figs)]
    if verify is not None:
        sections.append(verify_section(verify))
        nav.append(("verify", "Verification"))
    if summary is not None:
        sections.append(_setup(summary))
        nav.append(("setup", "Configuration"))
    env = (summary or {}).get("environment") or {}
    when = env.get("started_utc", "time not recorded")
    names = ", ".join(dict.fromkeys(e["name"] for e in (summary or {}).get("endpoints", [])))
    subtitle = f"{names or 'verification'} · {when} · lossless {env.get('lossless_version', '')}".strip()
    return page("lossless report", subtitle, sections, nav)


def verify_section(v: dict[str, Any]) -> str:
    verdict = str(v.get("verdict", "inconclusive"))
    reasons = "".join(f"<li>{escape(str(r))}</li>" for r in v.get("reasons", []))
    notes = "".join(f"<li>note: {escape(str(n))}</li>" for n in v.get("notes", []))
    base, cand = v.get("baseline", {}), v.get("candidate", {})
    head = (
        f'<p><span class="badge {escape(verdict)}">{escape(verdict)}</span> '
        f"{escape(cand.get('model', ''))} at {escape(cand.get('base_url', ''))} against "
        f"{escape(base.get('model', ''))} at {escape(base.get('base_url', ''))}</p>"
        f'<ul class="tight">{reasons}{notes}</ul>'
    )
    rows, bars = [], []
    for t in v.get("tests", []):
        aa, ab = t["aa"], t["ab"]
        rows.append((t["name"], f"{t['aa_holm_p']:.3g}", f"{t['ab_holm_p']:.3g}", f"{ab['effect']:+.4g}",
                     f"{aa['effect']:+.4g}", t["effect_meaning"]))  # fmt: skip
        for arm, found, p in (("A/A", aa, t["aa_holm_p"]), ("A/B", ab, t["ab_holm_p"])):
            if found.get("threshold"):
                tip = f"{t['name']} {arm}: statistic {found['statistic']:.4g}, p (Holm) {p:.3g}"
                ratio = found["statistic"] / found["threshold"]
                bars.append(svg.Row(f"{t['name']} {arm}", ratio, group=_ARMS[arm], tip=tip))
    chart = svg.intervals(
        "Test statistics against what this run could detect",
        "statistic / smallest flagged statistic",
        bars,
        refs=[(1.0, "flagged")],
    )
    headers = ("test", "A/A p (Holm)", "A/B p (Holm)", "A/B effect", "A/A effect", "effect is")
    numbers = table(headers, rows)
    body = head + f'<div class="figure">{chart}<div class="numbers">{numbers}</div></div>'
    body += _tasks(v)
    about = (
        "A/A compares the baseline with itself (the noise floor), A/B the candidate with the baseline. "
        "A dot right of the dashed line is a difference this run's test flags."
    )
    return section("verify", "Verification: is it the same model?", body, about)


_ARMS = {"A/A": "A/A: baseline against itself", "A/B": "A/B: candidate against baseline"}


def _tasks(v: dict[str, Any]) -> str:
    parts = []
    t = v.get("tasks")
    if t:
        m = t["margin"]
        row = svg.Row("accuracy difference", t["difference"], t["ci90"][0], t["ci90"][1], tip="90% CI")
        parts.append(
            svg.intervals(
                "Task accuracy: candidate - baseline (90% CI, TOST)",
                "accuracy difference",
                [row],
                refs=[(-m, f"-{m:g}"), (m, f"+{m:g}")],
            )
        )
        parts.append(
            f"<p>{t['n']} tasks; both right {t['both']}, only baseline {t['only_x']}, only candidate "
            f"{t['only_y']}; McNemar p {t['p_mcnemar']:.3g}; equivalent within ±{m:g}: "
            f"{'yes' if t['equivalent'] else 'no'}.</p>"
        )
    g = v.get("greedy") or {}
    if "candidate_match" in g:
        parts.append(
            f"<p>Greedy (diagnostic): the candidate matches the baseline on {g['candidate_match']:.0%} "
            f"of prompts; the baseline matches itself on {g['baseline_self_match']:.0%}.</p>"
        )
    a = v.get("logprob_agreement")
    if a:
        parts.append(
            f"<p>Log-prob agreement on {a['n']} texts: {a['mean_abs_diff']:.3g} nats/token (baseline "
            f"against itself {a['baseline_noise']:.3g}).</p>"
        )
    return "".join(parts)


# --- files --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SavedRun:
    summary: dict[str, Any] | None  # summary.json, or rebuilt from the records when it is missing
    records: list[RequestRecord]  # records.jsonl
    verify: dict[str, Any] | None  # verify.json
    notes: tuple[str, ...] = ()  # what a person should know about how these were read


def read_run(run_dir: Path, rebuild: bool = True) -> SavedRun:
    """What ``bench --out`` (summary.json, records.jsonl) and ``verify --out`` (verify.json) left in DIR.

    A run killed before it wrote summary.json (SIGKILL, a power cut) still left its records, flushed one
    line at a time: with ``rebuild`` its summary is made again from them. Anything unreadable is a
    UsageError naming the file (and line)."""
    summary, verify = _read_json(run_dir / "summary.json"), _read_json(run_dir / "verify.json")
    records_path = run_dir / "records.jsonl"
    if not records_path.exists():
        if summary is not None:
            raise UsageError(f"{run_dir} has summary.json but no records.jsonl to plot")
        if verify is None:
            raise UsageError(
                f"{run_dir} holds neither summary.json and records.jsonl (bench --out) nor verify.json "
                "(verify --out)"
            )
        return SavedRun(None, [], verify)
    records, notes = read_records(records_path)
    if summary is not None:
        _check_summary(summary, run_dir / "summary.json")
    elif rebuild and not records and verify is None:
        raise UsageError(f"{records_path} holds no records and there is no summary.json: nothing to show")
    elif rebuild and records:
        summary = _rebuilt(records)
        notes.append(
            f"{run_dir / 'summary.json'} is missing (the run was stopped before it ended?): the summary was "
            f"rebuilt from the {len(records)} records in records.jsonl, without prices (no costs), "
            "configuration or environment"
        )
    return SavedRun(summary, records, verify, tuple(notes))


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


def _check_summary(summary: dict[str, Any], path: Path) -> None:
    entries = summary.get("endpoints")
    if not isinstance(entries, list) or not all(
        isinstance(e, dict) and isinstance(e.get("name"), str) and isinstance(e.get("load"), str)
        for e in entries
    ):
        raise UsageError(f"{path} is not a bench summary: 'endpoints' must be a list of {{name, load, ...}}")


def _rebuilt(records: Sequence[RequestRecord]) -> dict[str, Any]:
    names = dict.fromkeys(r.endpoint for r in records)  # the table in the order the run first sent
    summary = summarize(records, {name: (None, None) for name in names})
    summary["rebuilt_from_records"] = True
    return summary


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
    """``render_run`` of what ``read_run`` found. Its summary.json and verify.json are plain dicts read
    back: rather than a schema that repeats all of analyze's and verify's output, a field of the wrong
    shape is caught where the page reads it (the records are checked field by field on reading)."""
    try:
        return render_run(run.summary, run.records, run.verify, run.notes)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
        raise UsageError(
            f"{run_dir}: summary.json or verify.json is not shaped as lossless writes it "
            f"({type(exc).__name__}: {_short(exc)})"
        ) from None


def build(run_dir: Path) -> str:
    return render_saved(read_run(run_dir), run_dir)


def write(path: Path, text: str) -> Path:
    from lossless.report.files import write_atomic

    return write_atomic(path, text)
