"""A user's first hour, tried as written: the usual mistakes against a provider-like server on 127.0.0.1
(it wants a key, serves named models, answers OpenAI's errors in OpenAI's words), each said in one line
that says what to change; errors never read as verdicts; a cut answer is no evidence; files never
silently overwritten and always named; thin percentiles marked; one vocabulary."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner, Result
from provider_server import Habits, provider_server
from scripted_server import ScriptedServer

from lossless.cli import main

KEY = "sk-first-hour-0123456789abcdef"
PROVIDER = Habits(models=("provider-model", "provider-small"), key=KEY)


def lossless(*args: str, key: str | None = KEY) -> Result:
    return CliRunner().invoke(main, list(args), env={"K": key} if key else {})


def one_line(result: Result) -> str:
    lines = [line for line in result.stderr.splitlines() if not line.startswith("model: ")]
    assert result.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.output
    assert "Traceback" not in result.output and KEY[3:] not in result.output
    return lines[0]


def test_1_a_wrong_url_model_key_or_scheme_stops_bench_in_one_line_that_says_what_to_change() -> None:
    with provider_server(PROVIDER) as url:
        root = url.removesuffix("/v1")
        base = ("--model", "provider-model", "--api-key-env", "K", "--requests", "2")
        assert f"did you mean {url}?" in one_line(lossless("bench", root, *base))
        pasted = one_line(lossless("bench", url + "/chat/completions", *base))
        assert f"give the base URL, without /chat/completions: {url}" in pasted
        unknown = one_line(lossless("bench", url, "--model", "gpt-4o", "--api-key-env", "K"))
        assert "The model `gpt-4o` does not exist" in unknown  # the server's own words, quoted
        assert "it serves: provider-model, provider-small" in unknown
        refused = one_line(lossless("bench", url, *base, key="sk-wrong-key-000000"))
        assert "HTTP 401" in refused and "the key in $K was refused" in refused
        nokey = one_line(lossless("bench", url, "--model", "provider-model", "--requests", "2"))
        assert "no key was sent" in nokey and "--api-key-env" in nokey
        https = one_line(lossless("bench", url.replace("http://", "https://"), *base))
        assert "TLS handshake failed" in https and f"try {url}" in https


def test_1_a_run_where_every_request_failed_exits_2_with_the_dominant_cause(tmp_path: Path) -> None:
    with provider_server(Habits(fail=500)) as url:  # answers the check (a 500 is the run's to measure)
        result = lossless("bench", url, "--model", "m", "--requests", "3", "--out", str(tmp_path / "r"))
    assert result.exit_code == 2, result.output
    said = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert said == [
        "error: endpoint '127.0.0.1:" + url.split(":")[2].split("/")[0] + "' [c=1]: all 3 requests failed, "
        "3 of them http_500: The server had an error while processing your request."
    ], result.stderr
    assert len((tmp_path / "r" / "records.jsonl").read_text().splitlines()) == 3  # written before it exits


def test_2_probe_and_inspect_never_read_an_error_status_as_a_verdict() -> None:
    with provider_server(PROVIDER) as url:
        probe = one_line(lossless("probe", url, "--model", "provider-model", "--api-key-env", "K", key="bad"))
        inspect = one_line(
            lossless("inspect", url, "--model", "provider-model", "--api-key-env", "K", key="x")
        )
    assert "HTTP 401" in probe and "HTTP 401" in inspect


def _formats(result: Result) -> dict[str, str]:
    assert result.exit_code == 0, result.output
    checks = json.loads(result.stdout)["checks"]
    return {
        c["name"]: c["verdict"] for c in checks if c["name"].startswith(("response_format", "tool_choice"))
    }


def test_3_an_answer_cut_at_max_tokens_is_asked_again_with_room_and_never_read_as_ignored() -> None:
    # the server cuts at max_tokens and answers words, never JSON or tool calls
    with provider_server(Habits(max_tokens=True, answer_words=40, reasoning_words=0)) as url:
        roomy = _formats(lossless("probe", url, "--model", "m", "--max-tokens", "16", "--json"))
    with provider_server(Habits(max_tokens=True, answer_words=400, reasoning_words=0)) as url:
        cut = _formats(lossless("probe", url, "--model", "m", "--max-tokens", "16", "--json"))
    # 40 words fit the second ask's 64 tokens: an answer that is text is evidence
    assert set(roomy.values()) == {"ignored"}, roomy
    # 400 words are cut at 64 too: no evidence either way
    assert set(cut.values()) == {"inconclusive"}, cut


def test_4_model_is_optional_when_the_server_lists_one(tmp_path: Path) -> None:
    with provider_server(Habits(models=("only-model",))) as url:
        chosen = lossless("bench", url, "--requests", "2", "--out", str(tmp_path / "r"))
    assert chosen.exit_code == 0, chosen.output
    assert f"model: only-model (the only one {url}/models lists)" in chosen.stderr
    with provider_server(PROVIDER) as url:
        several = one_line(lossless("bench", url, "--api-key-env", "K"))
    assert "--model is required" in several and "provider-model, provider-small" in several


def test_5_a_long_command_says_each_phase_in_a_plain_line_when_not_on_a_terminal() -> None:
    with provider_server(Habits()) as url:
        result = lossless("probe", url, "--model", "m", "--repeats", "2")
    assert result.exit_code == 0, result.output
    phases = [line for line in result.stderr.splitlines() if line.startswith("probe ")]
    assert len(phases) >= 10 and any("max tokens" in p for p in phases) and "\x1b" not in result.stderr


def test_6_out_refuses_another_run_unless_overwrite_and_every_command_names_its_files(
    server: ScriptedServer, tmp_path: Path
) -> None:
    server.script({"steps": [[0.0, "content", 1]] * 2})
    out = tmp_path / "run"
    first = lossless(
        "bench",
        server.url,
        "--model",
        "m",
        "--requests",
        "2",
        "--out",
        str(out),
        "--html",
        str(out / "report.html"),
    )
    assert first.exit_code == 0, first.output
    assert (
        f"wrote: {out}/records.jsonl, {out}/summary.json, {out}/summary.csv, {out}/report.html"
        in first.stderr
    )
    again = one_line(lossless("bench", server.url, "--model", "m", "--requests", "2", "--out", str(out)))
    assert "holds another run (records.jsonl, summary.json, summary.csv, report.html)" in again
    assert "--overwrite" in again
    replaced = lossless(
        "bench", server.url, "--model", "m", "--requests", "3", "--out", str(out), "--overwrite"
    )
    assert replaced.exit_code == 0, replaced.output
    assert sorted(p.name for p in out.iterdir()) == [
        "records.jsonl",
        "summary.csv",
        "summary.json",
    ]  # no old page
    assert len((out / "records.jsonl").read_text().splitlines()) == 3


def test_6_resume_sends_only_what_the_killed_run_did_not_finish(
    server: ScriptedServer, tmp_path: Path
) -> None:
    server.script({"steps": [[0.0, "content", 1]] * 2})
    out = tmp_path / "run"
    done = lossless("bench", server.url, "--model", "m", "--requests", "6", "--out", str(out))
    assert done.exit_code == 0, done.output
    lines = (out / "records.jsonl").read_text().splitlines()
    # as a killed run leaves it: three requests finished, one cut off by the end (cancelled), no summary
    cancelled = json.loads(lines[3]) | {"error_kind": "cancelled", "error": "run interrupted"}
    (out / "records.jsonl").write_text("\n".join([*lines[:3], json.dumps(cancelled)]) + "\n")
    for name in ("summary.json", "summary.csv"):
        (out / name).unlink()
    server.script({"steps": [[0.0, "content", 1]] * 2})  # and a fresh log
    resumed = lossless("bench", server.url, "--model", "m", "--requests", "6", "--out", str(out), "--resume")
    assert resumed.exit_code == 0, resumed.output
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert sorted(r["request_index"] for r in records) == [0, 1, 2, 3, 4, 5]  # none lost, none twice
    assert all(r["error_kind"] is None for r in records)
    assert len(server.sent()) == 3  # only the three it owed
    summary = json.loads((out / "summary.json").read_text())
    assert summary["endpoints"][0]["requests"]["ok"] == 6 and "resumed" in " ".join(summary["warnings"])


def test_7_percentiles_of_too_few_requests_are_marked_and_no_claim_is_made_of_them(
    server: ScriptedServer, tmp_path: Path
) -> None:
    server.script({"steps": [[0.002, "content", 1]] * 3})
    runs = []
    for name in ("a", "b"):
        result = lossless(
            "bench", server.url, "--model", "m", "--requests", "4", "--out", str(tmp_path / name)
        )
        assert result.exit_code == 0, result.output
        runs.append(result)
    assert "~" in runs[0].stdout and "fewer requests than the percentile is read from" in runs[0].stdout
    summary = json.loads((tmp_path / "a" / "summary.json").read_text())
    assert summary["endpoints"][0]["ttft_ms"]["thin"] == ["p90", "p95", "p99", "p99.9"]
    compared = lossless("compare", str(tmp_path / "a"), str(tmp_path / "b"), "--json")
    assert compared.exit_code == 0, compared.output
    ratios = json.loads(compared.stdout)["comparisons"]
    tails = [c for c in ratios if c["stat"] in ("p90", "p99")]
    assert tails and all(c["supported"] is False and c["n"] == [4, 4] for c in tails)
    tail_rows = [line for line in compared.stderr.splitlines() if " p90 " in line or " p99 " in line]
    assert tail_rows and not any("better" in line or "worse" in line for line in tail_rows)
    assert "too few to tell (4 and 4)" in compared.stderr


def test_8_one_vocabulary_and_the_old_spellings_still_work_with_a_note(
    server: ScriptedServer, tmp_path: Path
) -> None:
    for command in ("tasks", "verify"):
        text = lossless(command, "--help").output
        assert "--set TEXT" in text and "--limit INTEGER" in text and "--tasks " not in text
    for command in ("bench", "probe", "verify", "tasks", "inspect"):
        text = lossless(command, "--help").output
        assert "--out PATH" in text and "--overwrite" in text and "--endpoints PATH" in text, command
    for command in ("bench", "verify", "tasks", "report", "compare", "advise"):
        assert "--html PATH" in lossless(command, "--help").output, command
    server.script({"steps": [[0.0, "content", 1]]})
    run = tmp_path / "run"
    assert lossless("bench", server.url, "--model", "m", "--requests", "2", "--out", str(run)).exit_code == 0
    old = lossless("report", str(run), "-o", str(tmp_path / "page.html"))
    assert old.exit_code == 0 and "note: -o/--output is now --html" in old.stderr
    assert (tmp_path / "page.html").is_file()


def test_8_usage_errors_are_one_line_in_our_style() -> None:
    line = one_line(lossless("bench", "--requests", "many"))
    assert line.startswith("error: invalid value for '--requests'") and line.endswith(
        "(see main bench --help)"
    )
    assert one_line(lossless("bench", "--nope")).startswith("error: no such option '--nope'")


@pytest.mark.parametrize("name", ["README.md", "docs/index.md", "CONTRIBUTING.md"])
def test_10_the_docs_are_short_where_they_should_be_and_every_link_resolves(name: str) -> None:
    root = Path(__file__).parents[3]
    text = (root / name).read_text()
    if name == "README.md":
        assert len(text.splitlines()) <= 250
        assert "make demo" in text and "make test" in text  # the two set-up commands
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        assert (root / name).parent.joinpath(target).exists(), f"{name}: {target}"
