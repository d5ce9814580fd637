"""Token-exact prompts: the embedded server counts exactly the prompt tokens asked for (chat template
taken off by one calibration request), and generates exactly the output tokens asked (ignore_eos)."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest

from lossless.bench.workload.synthetic import exact_text, parse_lengths
from lossless.errors import UsageError
from lossless.provision.counting import load_token_encoder
from lossless.rundir import read_jsonl


@pytest.mark.slow
@pytest.mark.parametrize("api", ["chat", "completions"])
def test_the_embedded_server_counts_what_was_asked(tmp_path: Path, api: str) -> None:
    args = (
        "--input-tokens",
        "normal:200,60",
        "--output-tokens",
        "uniform:5,15",
        "--requests",
        "6",
        "--api",
        api,
    )
    done = subprocess.run(
        [sys.executable, "-m", "lossless.cli", "bench", *args, "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    records = list(read_jsonl(tmp_path / "records.jsonl"))
    assert len({r.asked_in for r in records}) > 1  # drawn, not fixed
    for r in records:
        assert r.ok and r.n_in == r.asked_in and r.n_out == r.asked_out, (
            r.asked_in,
            r.n_in,
            r.asked_out,
            r.n_out,
        )
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["endpoints"][0]["lengths"] == {
        "requests": 6,
        "input_exact": 6,
        "input_off_most": 0,
        "output_asked": 6,
        "output_exact": 6,
    }
    assert summary["config"]["synthetic"]["ignore_eos"] is True


def test_exact_text_and_length_specs(smollm2_path: Path) -> None:
    encode, decode = load_token_encoder(str(smollm2_path))
    rng = random.Random(0)
    for n in (12, 100, 1000, 4321):
        assert len(encode(exact_text(n, "Request 1 (00c0ffee).", rng, encode, decode))) == n
    assert parse_lengths("1000", "--input-tokens").draw(0, rng) == 1000
    assert [parse_lengths("aa", "--input-tokens").draw(i, rng) for i in range(5)] == [
        100,
        1000,
        10000,
        100000,
        100,
    ]
    drawn = [parse_lengths("uniform:10,20", "x").draw(i, rng) for i in range(200)]
    assert min(drawn) >= 10 and max(drawn) <= 20 and len(set(drawn)) > 5
    assert all(v >= 1 for v in (parse_lengths("normal:2,50", "x").draw(i, rng) for i in range(200)))
    for bad in ("", "0", "normal:5", "uniform:9,3", "lognormal:1,2", "1e9", "many"):
        with pytest.raises(UsageError, match="--input-tokens"):
            parse_lengths(bad, "--input-tokens")
