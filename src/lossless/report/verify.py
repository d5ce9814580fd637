"""verify's result for people and files: the terminal table, verify.json and the HTML section."""

from __future__ import annotations

from dataclasses import asdict
from html import escape
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from lossless.atomic import write_atomic
from lossless.client.endpoints import public_url
from lossless.report import svg
from lossless.report.page import page, section, table
from lossless.rundir import VERIFY, emit_json
from lossless.verify.result import VerifyResult
from lossless.verify.two_sample import EFFECTS

VERDICT_STYLE = {"equivalent": "green", "different": "red", "inconclusive": "yellow"}

TOOL_TESTS = ("tool-call triggers", "tool-call schema")


def emit(
    result: VerifyResult, console: Console, as_json: bool, out_dir: Path | None, html: Path | None
) -> list[Path | None]:
    """The table for people (stderr under --json), the JSON on stdout, verify.json, the HTML page; the
    files written."""
    render(result, console)
    page = html and write_atomic(html, render_html(result.as_dict()))
    return [emit_json(result, as_json, out_dir, VERIFY), page]


def render(result: VerifyResult, console: Console) -> None:
    cand, base = result.candidate, result.baseline
    title = (
        f"verify: {cand.name} ({public_url(cand.base_url)}) against {base.name} ({public_url(base.base_url)})"
    )
    table_ = Table(title=title, title_justify="left")
    for col in ("test", "A/A p (Holm)", "A/B p (Holm)", "A/B effect", "A/A effect", "effect is"):
        table_.add_column(col)
    d = result.decision
    for a, b, pa, pb in zip(result.aa, result.ab, d.aa_adjusted, d.ab_adjusted, strict=False):
        table_.add_row(
            b.name, f"{pa:.3g}", f"{pb:.3g}", f"{b.effect:+.4g}", f"{a.effect:+.4g}", EFFECTS[b.name]
        )
    if result.tasks is not None:
        t = result.tasks
        table_.add_row(
            "task accuracy",
            "",
            f"{d.ab_adjusted[len(result.ab)]:.3g}",
            f"{t.difference:+.3g}",
            "",
            f"accuracy difference, {t.n} tasks (TOST +-{t.margin:g})",
        )
    if result.tool_parity is not None:
        extra = d.ab_adjusted[len(result.ab) + (result.tasks is not None) :]
        for name, (what, _), p in zip(TOOL_TESTS, result.tool_parity.findings(), extra, strict=True):
            table_.add_row(name, "", f"{p:.3g}", "", "", what)
    console.print(table_)
    _diagnostics(result, console)


def _diagnostics(result: VerifyResult, console: Console) -> None:
    g = result.greedy
    console.print(
        f"greedy (diagnostic): candidate matches baseline on {g['candidate_match']:.0%} of prompts, "
        f"baseline matches itself on {g['baseline_self_match']:.0%}"
    )
    if (d := result.distance) is not None:
        console.print(distance_line(asdict(d)), highlight=False)
    style = VERDICT_STYLE[result.verdict]
    console.print(f"[bold {style}]{result.verdict}[/bold {style}]")
    for reason in result.decision.reasons:
        console.print(f"  - {reason}")
    if (p := result.procedure) is not None:
        console.print(f"  {stopped(p.as_dict())}", highlight=False)
        for held in p.guarantees():
            console.print(f"  error rate, {held}", highlight=False)
        if power := p.power():
            console.print(f"  power: {power}", highlight=False)
    for note in result.notes:
        console.print(f"  note: {note}")


def stopped(procedure: dict[str, Any]) -> str:
    p = procedure
    return (
        f"decided at look {p['look']} of {len(p['looks'])}: {p['samples']} samples of each prompt from each "
        f"set (at most {p['looks'][-1]}), {p['requests']} requests"
    )


def render_html(verify: dict[str, Any]) -> str:
    """verify.json's content alone as a page (``verify --html``)."""
    from lossless import __version__

    subtitle = f"verification · lossless {__version__}"
    return page("lossless report", subtitle, [verify_section(verify)], [("verify", "Verification")])


def verify_section(v: dict[str, Any]) -> str:
    verdict = str(v.get("verdict", "inconclusive"))
    reasons = "".join(f"<li>{escape(str(r))}</li>" for r in v.get("reasons", []))
    if p := v.get("procedure"):
        reasons += f"<li>{escape(stopped(p))}</li>"
        reasons += "".join(f"<li>error rate, {escape(str(g))}</li>" for g in p.get("guarantees", []))
        if power := p.get("power"):
            reasons += f"<li>power: {escape(str(power))}</li>"
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
        rows.append(
            (
                t["name"],
                f"{t['aa_holm_p']:.3g}",
                f"{t['ab_holm_p']:.3g}",
                f"{ab['effect']:+.4g}",
                f"{aa['effect']:+.4g}",
                t["effect_meaning"],
            )
        )
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
    tp = v.get("tool_parity")
    if tp:
        f1 = "-" if tp["trigger_f1"] is None else f"{tp['trigger_f1']:.2f}"
        f1_aa = "-" if tp["trigger_f1_aa"] is None else f"{tp['trigger_f1_aa']:.2f}"
        valid = ["-" if s is None else f"{s:.0%}" for s in tp["schema_valid"]]
        parts.append(
            f"<p>Tool calls on {tp['tasks']} tasks: trigger F1 against the baseline {f1} (baseline "
            f"against itself {f1_aa}); arguments valid against their schema: baseline {valid[0]} of "
            f"{tp['calls'][0]}, candidate {valid[2]} of {tp['calls'][2]}.</p>"
        )
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
    if d := v.get("logprob_distance"):
        parts.append(f"<p>{escape(distance_line(d))}.</p>")
    return "".join(parts)


def distance_line(d: dict[str, Any]) -> str:
    """The log-probability distance in one sentence (terminal and page alike), from its JSON form."""
    lo, hi = d["ci95"]
    tested = (
        f"tolerance {d['tolerance']:g}"
        if d["p_above"] is not None
        else f"not tested: {d['prompts']} prompts are too few to bound it"
    )
    return (
        f"log-probability distance: {d['value']:.3g} nats a token over {d['tokens']} tokens of "
        f"{d['prompts']} prompts (baseline against itself {d['noise']:.3g}; excess 95% CI [{lo:.3g}, "
        f"{hi:.3g}], resampling prompts; {d['source']}); {tested}; as far apart as {d['nearest']}"
    )
