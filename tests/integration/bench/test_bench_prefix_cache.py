"""Prompt caching against a scripted server that simulates a prefix cache: the cached-token counts of
two usage shapes, TTFT split by hit and miss, and cost with a cached-input price, all exact."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from scripted_server import ScriptedServer

from lossless.analyze import describe, timing
from lossless.rundir import read_jsonl

PRICE = {"input": 2.0, "output": 8.0, "cached_input": 0.5}  # USD per million tokens


def test_cache_hits_ttft_split_and_cost_are_exact(server: ScriptedServer, tmp_path: Path) -> None:
    steps = [[0.0, "content", 1]] * 3
    scripts = {
        f"/{name}": {"prefix_cache": {"hit_s": 0.01, "miss_s": 0.2, "shape": shape}, "steps": steps}
        for name, shape in (("oa", "openai"), ("ds", "deepseek"))
    }
    server.script(**scripts)
    price = ", ".join(f"{k} = {v}" for k, v in PRICE.items())
    endpoints = tmp_path / "endpoints.toml"
    endpoints.write_text(
        "".join(
            f'[[endpoint]]\nname = "{name}"\nbase_url = "{server.root}/{name}/v1"\nmodel = "m"\n'
            f"price = {{ {price} }}\n"
            for name in ("oa", "ds")
        )
    )
    args = (
        "--endpoints",
        str(endpoints),
        "--suite",
        "prefix:200,3",
        "--requests",
        "12",
        "--out",
        str(tmp_path),
    )
    command = [sys.executable, "-m", "lossless.cli", "bench", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "prompt cache: 9/12 requests hit" in done.stdout
    summary = json.loads((tmp_path / "summary.json").read_text())
    records = list(read_jsonl(tmp_path / "records.jsonl"))
    for entry in summary["endpoints"]:
        mine = [r for r in records if r.endpoint == entry["name"]]
        # the first use of each of the 3 prefixes misses; every later request hits its whole prefix
        assert [r.n_cached == 0 for r in mine] == [r.request_index < 3 for r in mine]
        prefix_words = {r.prompt_id: r.n_cached for r in mine if r.n_cached}
        assert all(200 / 1.3 < n < 200 / 1.3 + 5 for n in prefix_words.values())
        cache = entry["prompt_cache"]
        assert (cache["reporting"], cache["hits"]) == (12, 9)
        assert cache["cached_tokens"] == sum(r.n_cached or 0 for r in mine)
        assert cache["prompt_tokens"] == sum(r.n_in or 0 for r in mine)
        hit = describe([timing(r).ttft for r in mine if r.n_cached])
        miss = describe([timing(r).ttft for r in mine if not r.n_cached])
        assert cache["ttft_hit"]["p50"] == pytest.approx(hit.p50) and cache["ttft_miss"][
            "p50"
        ] == pytest.approx(miss.p50)
        assert cache["ttft_hit"]["p50"] + 150 < cache["ttft_miss"]["p50"]  # 10 ms against 200 ms
        fresh, cached, out = (sum(getattr(r, k) or 0 for r in mine) for k in ("n_in", "n_cached", "n_out"))
        cost = (
            (fresh - cached) * PRICE["input"] + cached * PRICE["cached_input"] + out * PRICE["output"]
        ) / 1e6
        assert entry["cost_per_ok_request_usd"] == pytest.approx(cost / len(mine), rel=1e-12)
        # the workload's own split: a prefix's first use, and its repeats
        assert set(entry["classes"]) == {"prefix-first", "prefix-repeat"}
