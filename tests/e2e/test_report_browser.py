"""The HTML report in a real headless browser (Debian's chromium through playwright): it renders every plot,
logs no console error, and asks the network for nothing but the file itself.

Skipped ONLY when /usr/bin/chromium is missing AND the CI environment variable is not set: in CI a missing
browser fails the test rather than hiding it (CI installs `apt-get install chromium` and `pip install
playwright`; `playwright install` is not used, the system chromium is).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import MARKS, chromium, watch
from click.testing import CliRunner
from scripted_server import ScriptedServer
from task_server import Behaviour, task_server, task_specs

from lossless.cli import main

FAKE_KEY = "sk-lossless-FAKE-7f3a9c2e1d"
pytestmark = MARKS
# A 1.2 s gap in one prompt's stream: a stall for the timeline plot.
STALL = {"steps": [[0.01, "content", 2]] * 3 + [[1.2, "content", 1]] + [[0.01, "content", 1]] * 3}


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real bench run: two endpoints (a fast and a slow scripted server), a sweep of two loads."""
    out = tmp_path_factory.mktemp("report") / "run"
    with ScriptedServer() as fast, ScriptedServer() as slow:
        fast.script({"steps": [[0.005, "content", 1]] * 12}, **{"Hi!": STALL})
        slow.script({"steps": [[0.02, "content", 1]] * 12, "head_delay": 0.05})
        toml = out.parent / "endpoints.toml"
        toml.write_text(
            f'[[endpoint]]\nname = "fast"\nbase_url = "{fast.url}"\nmodel = "m"\napi_key_env = "FAKE_KEY"\n\n'
            f'[[endpoint]]\nname = "slow"\nbase_url = "{slow.url}"\nmodel = "m"\n'
            f'headers = {{ "Authorization" = "Bearer {FAKE_KEY}" }}\n'
        )
        args = ["bench", "--endpoints", str(toml), "--requests", "10", "--concurrency", "1,4"]
        args += ["--out", str(out), "--html", str(out / "bench.html")]
        result = CliRunner().invoke(main, args, env={"FAKE_KEY": FAKE_KEY})
    assert result.exit_code == 0, result.output
    return out


def _load(page: Any, path: Path) -> tuple[list[str], list[str]]:
    errors, requests = watch(page)
    page.goto(path.as_uri())
    page.wait_for_load_state("networkidle")
    return errors, requests


@pytest.fixture(scope="module")
def tasks_page(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `lossless tasks --html` run: two scripted agent servers, one failing some tool calls."""
    out = tmp_path_factory.mktemp("tasks")
    path = out / "tasks.jsonl"
    path.write_text("".join(json.dumps(s) + "\n" for s in task_specs(6, 0.01)))
    good = Behaviour(ttft_s=0.005, tpot_s=0.001, tokens=3)
    sloppy = Behaviour(success=0.5, ttft_s=0.01, tpot_s=0.002, tokens=3, invalid_args=0.5)
    with task_server(good, seed=0) as (a, _), task_server(sloppy, seed=0) as (b, _):
        args = [
            "tasks",
            a,
            b,
            "--model",
            "m",
            "--set",
            str(path),
            "--price-in",
            "1",
            "--price-out",
            "2",
            "--html",
            str(out / "tasks.html"),
        ]
        result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return out / "tasks.html"


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real `lossless sweep` of two scripted servers of known capacity (30 and 60 requests/s), as URLs."""
    out = tmp_path_factory.mktemp("sweep")
    with ScriptedServer() as slow, ScriptedServer() as fast:
        slow.script({"capacity": 30.0, "steps": [[0.002, "content", 1]] * 8})
        fast.script({"capacity": 60.0, "steps": [[0.002, "content", 1]] * 8})
        args = [
            "sweep",
            slow.url,
            fast.url,
            "--model",
            "m",
            "--rate",
            "10,20,40,80,160",
            "--burstiness",
            "20",
            "--requests",
            "40",
            "--out",
            str(out),
        ]
        result = CliRunner().invoke(main, args)
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def browser(run_dir: Path, tasks_page: Path, sweep_dir: Path) -> Iterator[Any]:
    yield from chromium()


def _check_plots(page: Any) -> int:
    plots = page.query_selector_all("svg.plot")
    for plot in plots:
        label = plot.get_attribute("aria-label")
        assert "empty" not in (plot.get_attribute("class") or ""), f"no data in {label}"
        assert plot.query_selector_all("path, circle"), f"nothing drawn in {label}"
        box = plot.bounding_box()
        assert box and box["width"] > 100 and box["height"] > 80, label
    return len(plots)


def test_report_renders_offline_with_every_plot(browser: Any, run_dir: Path, tmp_path: Path) -> None:
    report = tmp_path / "report.html"
    result = CliRunner().invoke(main, ["report", str(run_dir), "-o", str(report)])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(report)
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    errors, requests = _load(page, report)
    assert errors == []
    assert requests == [report.as_uri()]  # nothing but the file: no font, script, image or beacon
    # sweep, TTFT, E2E, speed, E2E-vs-tokens, timelines, drift
    assert _check_plots(page) == 7
    titles = page.eval_on_selector_all("svg.plot", "els => els.map(e => e.getAttribute('aria-label'))")
    assert "Throughput against latency" in titles and "Token arrival per request" in titles
    text = page.inner_text("body")
    for words in (
        "fast",
        "slow",
        "c=4",
        "stall (gap > 1 s)",
        "lossless_version",
        "FAKE_KEY",
        "Authorization",
    ):
        assert words in page.content() or words in text, words
    page.screenshot(path=str(tmp_path / "report.png"), full_page=True)
    shutil.copy(tmp_path / "report.png", "/tmp/lossless-report.png")
    page.close()


def test_no_key_in_any_file_and_bench_html_written(run_dir: Path) -> None:
    written = "".join(p.read_text(encoding="utf-8") for p in run_dir.iterdir())
    assert (run_dir / "bench.html").exists()
    assert FAKE_KEY not in written and "sk-lossless" not in written
    config = json.loads((run_dir / "summary.json").read_text())["config"]
    assert config["endpoints"][1]["headers"] == ["Authorization"]  # the name, never the value


def test_compare_page_renders(browser: Any, run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "compare.html"
    result = CliRunner().invoke(main, ["compare", str(run_dir), str(run_dir), "-o", str(out), "--json"])
    assert result.exit_code == 0, result.output
    ratios = json.loads(result.stdout)["comparisons"]
    assert ratios and all(c["ratio"] == pytest.approx(1.0) for c in ratios)  # a run against itself
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    errors, requests = _load(page, out)
    assert errors == [] and requests == [out.as_uri()]
    assert _check_plots(page) == 4
    page.screenshot(path=str(tmp_path / "compare.png"), full_page=True)
    shutil.copy(tmp_path / "compare.png", "/tmp/lossless-compare.png")
    page.close()


def test_tasks_page_renders(browser: Any, tasks_page: Path, tmp_path: Path) -> None:
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    errors, requests = _load(page, tasks_page)
    assert errors == [] and requests == [tasks_page.as_uri()]
    assert _check_plots(page) == 2  # success per endpoint; the pair's ratios
    text = page.inner_text("body")
    assert "speed-ups: output speed" in text and page.query_selector(".badge")
    rows = page.query_selector_all("#per-task tbody tr")
    assert len(rows) == 6 and all(len(r.query_selector_all("td")) == 3 for r in rows)
    assert "fail" in page.inner_text("#per-task") and "pass" in page.inner_text("#per-task")
    page.screenshot(path=str(tmp_path / "tasks.png"), full_page=True)
    shutil.copy(tmp_path / "tasks.png", "/tmp/lossless-tasks.png")
    page.close()


def test_sweep_page_renders_the_pareto_fronts(browser: Any, sweep_dir: Path, tmp_path: Path) -> None:
    path = sweep_dir / "sweep.html"
    page = browser.new_page(viewport={"width": 1366, "height": 900})
    errors, requests = _load(page, path)
    assert errors == [] and requests == [path.as_uri()]
    assert _check_plots(page) == 2  # speed and TTFT against throughput
    titles = page.eval_on_selector_all("svg.plot", "els => els.map(e => e.getAttribute('aria-label'))")
    assert titles == ["Per-request speed against total throughput", "TTFT against total throughput"]
    assert "Pareto front" in page.inner_text("#pareto")  # the front's own legend entry
    rows = page.query_selector_all("#table tbody tr")
    assert len(rows) == 7  # 3 loads of the 30/s server, 4 of the 60/s one: each stopped at saturation
    assert "saturated" in page.inner_text("#table") and "stopped at rate=40" in page.inner_text("#table")
    links = page.eval_on_selector_all("#configs a", "els => els.map(e => e.getAttribute('href'))")
    assert len(links) == 2 and all((sweep_dir / link).is_file() for link in links)
    page.screenshot(path=str(tmp_path / "sweep.png"), full_page=True)
    shutil.copy(tmp_path / "sweep.png", "/tmp/lossless-sweep.png")
    page.close()
