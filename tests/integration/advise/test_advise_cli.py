"""``lossless advise`` end to end: real records from ``lossless bench`` against two scripted servers (one
with a heavy-tailed first token, one answering 429 now and then), advised on through the CLI."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from scripted_server import ScriptedServer

from lossless.cli import main

KEYS = [f"p{i}" for i in range(10)]
QUICK = {"head_delay": 0.01, "steps": [[0.01, "content", 1]] * 3}
# a: one prompt in ten waits 0.4 s for its first token, another 0.8 s: a heavy tail
HEAVY = {**{k: QUICK for k in KEYS}, "p8": {**QUICK, "head_delay": 0.4}, "p9": {**QUICK, "head_delay": 0.8}}
# b: steady, but one prompt in ten is refused with a 429
THROTTLED = {**{k: {**QUICK, "head_delay": 0.03} for k in KEYS}, "p5": {"status": 429, "body": "slow down"}}
REQUESTS = 30


def _lossless(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "lossless.cli", *args], capture_output=True, text=True, timeout=300
    )


def _bench(name: str, scripts: dict, folder: Path) -> Path:
    """One bench run of endpoint ``name`` on its own scripted server: 30 attempts at c=3, priced."""
    prompts = folder / "prompts.jsonl"
    prompts.write_text("".join(f'{{"prompt": "{k}"}}\n' for k in KEYS))
    out = folder / name
    with ScriptedServer() as server:
        server.script(QUICK, **scripts)
        toml = folder / f"{name}.toml"
        toml.write_text(
            f'[[endpoint]]\nname = "{name}"\nbase_url = "{server.url}"\nmodel = "m"\n'
            "price = { input = 1.0, output = 2.0 }\n"
        )
        args = ["bench", "--endpoints", str(toml), "--suite", f"file:{prompts}", "--requests", str(REQUESTS)]
        result = CliRunner().invoke(main, [*args, "--concurrency", "3", "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    folder = tmp_path_factory.mktemp("advise")
    yield _bench("a", HEAVY, folder), _bench("b", THROTTLED, folder)


def _ms(estimate: dict) -> float:
    """A predicted time; null is "no answer" (more requests failed than the percentile leaves room for)."""
    return math.inf if estimate["value"] is None else float(estimate["value"])


def _by_label(predictions: list[dict]) -> dict[str, dict]:
    return {p["label"]: p for p in predictions}


def test_advise_json_from_two_runs(runs: tuple[Path, Path]) -> None:
    done = _lossless("advise", *map(str, runs), "--json", "--resamples", "100")
    assert done.returncode == 0, done.stderr
    advice = json.loads(done.stdout)  # stdout is the JSON alone; the tables went to stderr
    assert "hedging" in done.stderr and "assumes: Attempts are independent" in done.stderr
    assert {"runs", "settings", "assumptions", "groups", "failover", "notes"} <= set(advice)
    a, b = advice["groups"]
    assert (a["endpoint"], b["endpoint"], a["load"], b["load"]) == ("a", "b", "c=3", "c=3")
    assert a["attempts"] == a["ok"] == REQUESTS and b["errors"] == {"http_429": 3}
    for g in (a, b):
        assert [t["phase"] for t in g["timeouts"]] == ["connect", "first_token", "total"]
        for t in g["timeouts"]:
            assert t["timeout_ms"]["value"] > 0 and 0 <= t["cut"]["value"] <= 0.05
        one, *hedges = g["hedging"]
        assert one["policy"] == "single" and hedges and one["usd_per_success"]["value"] > 0
        delays = [h["delay_ms"] for h in hedges]  # quantiles of E2E; equal ones (b's narrow spread) kept once
        assert delays == sorted(set(delays))
        for p in g["hedging"]:
            assert p["assumptions"] and p["p50"]["ci95"][0] <= p["p50"]["ci95"][1]
            assert all(_ms(p[q]) <= _ms(one[q]) for q in ("p50", "p95", "p99"))  # never worse
    # a's tail: the first token time-out sits above its slowest first token (~0.8 s) and cuts nothing
    first_token = a["timeouts"][1]
    assert first_token["timeout_ms"]["value"] >= 800 and first_token["cut"]["value"] == 0
    # a's earliest hedge: both attempts are slow (0.4 s or more) one time in 25, under the 5% a p95 leaves,
    # so its p95 drops from the 0.8 s group's to under the slow group's least (its p99 sits at 1 in 100,
    # both attempts 0.8 s: too close to the edge to check)
    assert a["hedging"][0]["p95"]["value"] >= 800 and a["hedging"][1]["p95"]["value"] < 400
    assert len(a["hedging"]) >= 4  # a's E2E spans ~40 ms to ~0.8 s: its p25..p99 give 3 delays or more
    # b alone: ~10% no answer; a hedge mostly rescues them (both attempts refused: ~1%)
    assert b["hedging"][0]["error_rate"]["value"] == pytest.approx(0.1, abs=0.02)
    assert b["hedging"][0]["p95"]["value"] is None  # one request in ten never answered: p95 is none
    assert all(p["error_rate"]["value"] < 0.03 for p in b["hedging"][1:])
    failover = _by_label(advice["failover"])
    to_a = failover["b, then a (on 429/5xx/network errors)"]
    assert to_a["error_rate"]["value"] == 0  # b's 429s go to a, which always answers
    assert to_a["attempts_per_request"]["value"] == pytest.approx(1.1, abs=0.02)
    assert to_a["usd_per_success"]["value"] > 0 and to_a["assumptions"]
    assert any(lb.startswith("a, then b (") and "ms without a first token" in lb for lb in failover)


def test_advise_html_page(runs: tuple[Path, Path], tmp_path: Path) -> None:
    page = tmp_path / "advice.html"
    done = _lossless("advise", *map(str, runs), "-o", str(page), "--resamples", "0", "--draws", "2000")
    assert done.returncode == 0, done.stderr
    text = page.read_text()
    for part in ("Time-outs", "Hedging at c=3", "Failover at c=3", "<svg", "hedge delay (ms)", "independent"):
        assert part in text, part
    assert "<script" not in text and "lossless advise" in done.stdout  # the table went to stdout


def test_bad_input_is_one_line_and_exit_2(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "records.jsonl").write_text('{"endpoint": "a"}\n')
    for folder, message in (("empty", "holds no records.jsonl"), ("torn", "not a request record")):
        done = _lossless("advise", str(tmp_path / folder))
        assert done.returncode == 2, done.stderr
        assert message in done.stderr and "Traceback" not in done.stderr
        assert len(done.stderr.strip().splitlines()) == 1 and done.stdout == ""
