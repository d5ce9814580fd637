"""``analyze.compare_runs`` and ``lossless compare`` on two saved runs with known latencies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from lossless import rundir
from lossless.analyze import compare_runs, summarize
from lossless.cli import main
from lossless.records import RequestRecord
from lossless.rundir import write_jsonl

MS = 1_000_000


def _record(endpoint: str, i: int, ttft_ms: float, gap_ms: float, load: str = "c=1") -> RequestRecord:
    sent = i * 10_000 * MS
    events = tuple(sent + int((ttft_ms + k * gap_ms) * MS) for k in range(9))
    return RequestRecord(
        endpoint=endpoint,
        request_index=i,
        attempt=0,
        prompt_id=f"p{i}",
        prompt_class="short",
        api="chat",
        stream=True,
        warmup=False,
        load=load,
        scheduled_ns=sent,
        sent_ns=sent,
        headers_ns=sent + MS,
        event_ns=events,
        event_kinds="c" * 9,
        event_tokens=(-1,) * 9,
        end_ns=events[-1] + MS,
        status=200,
        error_kind=None,
        error=None,
        retried=False,
        n_in=5,
        n_out=9,
        n_out_source="usage",
        n_reasoning=None,
        finish_reason="stop",
        text="x",
        reasoning_text="",
        tool_call_chars=0,
        server_headers=(),
    )


def _run(endpoint: str, ttft_ms: float, gap_ms: float) -> list[RequestRecord]:
    # a little spread so that percentiles and bootstraps have something to resample
    return [_record(endpoint, i, ttft_ms * (1 + i / 100), gap_ms * (1 + i / 200)) for i in range(30)]


def test_ratios_of_b_to_a_with_ci_around_them() -> None:
    a, b = _run("x", 100.0, 10.0), _run("x", 50.0, 20.0)
    out = {(c.metric, c.stat): c for c in compare_runs(a, b)}
    ttft = out[("ttft_ms", "p50")]
    assert ttft.ratio == pytest.approx(0.5, rel=1e-6)
    assert ttft.ci95[0] <= 0.5 <= ttft.ci95[1] and ttft.ci95[1] < 1.0
    assert out[("output_tps", "p50")].ratio == pytest.approx(0.5, rel=1e-6)  # twice the gap: half the speed
    assert ttft.endpoint_a == ttft.endpoint_b == "x" and ttft.load == "c=1"
    assert "B's p50 TTFT is 0.50x A's" in ttft.text


def test_endpoints_pair_by_position_when_names_differ_and_loads_must_match() -> None:
    a = [*_run("old", 100.0, 10.0), _record("old", 99, 1.0, 1.0, load="c=8")]
    out = compare_runs(a, _run("new", 100.0, 10.0))
    assert out and {(c.endpoint_a, c.endpoint_b, c.load) for c in out} == {("old", "new", "c=1")}
    assert all(c.ratio == pytest.approx(1.0) for c in out)


def _save(folder: Path, records: list[RequestRecord]) -> Path:
    write_jsonl(folder / "records.jsonl", records)
    rundir.write(summarize(records, {records[0].endpoint: (None, None)}), folder)
    return folder


def test_compare_cli_json_table_and_html(tmp_path: Path) -> None:
    run_a = _save(tmp_path / "a", _run("x", 100.0, 10.0))
    run_b = _save(tmp_path / "b", _run("x", 200.0, 10.0))
    page = tmp_path / "compare.html"
    result = CliRunner().invoke(main, ["compare", str(run_a), str(run_b), "--json", "-o", str(page)])
    assert result.exit_code == 0, result.output
    ratios = json.loads(result.stdout)["comparisons"]  # stdout is the JSON alone
    ttft = next(c for c in ratios if c["metric"] == "ttft_ms" and c["stat"] == "p50")
    assert ttft["ratio"] == pytest.approx(2.0, rel=1e-6)
    assert "lossless compare" in result.stderr and "B worse" in result.stderr
    html = page.read_text()
    assert html.count('<svg class="plot"') == 4 and "http://" not in html.replace("http://www.w3.org", "")


def test_compare_plain_table_on_stdout_when_piped(tmp_path: Path) -> None:
    run_a = _save(tmp_path / "a", _run("x", 100.0, 10.0))
    result = CliRunner().invoke(main, ["compare", str(run_a), str(run_a)])
    assert result.exit_code == 0 and "no clear difference" in result.stdout
    assert "\x1b[" not in result.stdout  # no colour codes when not a terminal


def test_report_of_a_folder_without_runs_is_a_usage_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["report", str(tmp_path)])
    assert result.exit_code == 2 and "holds no run" in result.stderr
