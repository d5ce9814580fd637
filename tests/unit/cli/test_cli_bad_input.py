"""Bad input to every command: one line on stderr naming what was wrong ("error: ..." or click's own usage
error), exit code 2, no traceback, nothing written, and no request sent (the URL below takes none).

Each case is (argv built from a ``Given``, a fragment of the message). A fragment starting with "Error:"
is click's usage error, whose last line it is; any other is our one ``error:`` line.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path

import pytest
from click.testing import CliRunner

from lossless.cli import main
from lossless.errors import UsageError
from lossless.records import RECORD_FIELD_CHECKS, RequestRecord, to_json
from lossless.rundir import write_jsonl
from lossless.validate import writable_dir, writable_file

URL = "http://127.0.0.1:9/v1"  # the discard port: never reached, every case fails before any traffic
B = ["bench", URL, "--model", "m"]
V = ["verify", URL, URL, "--model", "m"]
MS = 1_000_000


def _record(i: int) -> RequestRecord:
    sent = i * 1000 * MS
    events = tuple(sent + (100 + 10 * k) * MS for k in range(5))
    return RequestRecord(
        endpoint="x",
        request_index=i,
        attempt=0,
        prompt_id=f"p{i}",
        prompt_class="short",
        api="chat",
        stream=True,
        warmup=False,
        load="c=1",
        scheduled_ns=sent,
        sent_ns=sent,
        headers_ns=sent + MS,
        event_ns=events,
        event_kinds="c" * 5,
        event_tokens=(-1,) * 5,
        end_ns=events[-1] + MS,
        status=200,
        error_kind=None,
        error=None,
        retried=False,
        n_in=5,
        n_out=5,
        n_out_source="usage",
        n_reasoning=None,
        finish_reason="stop",
        text="x",
        reasoning_text="",
        tool_call_chars=0,
        server_headers=(),
    )


RECORD = json.loads(to_json(_record(0)))


def record_line(**changes: object) -> str:
    return json.dumps({**RECORD, **changes}) + "\n"


@dataclass
class Given:
    tmp: Path
    env: dict[str, str] = field(default_factory=dict)  # set for the command (after the tree is taken)

    def file(self, name: str, content: str | bytes) -> str:
        path = self.tmp / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content)
        return str(path)

    def endpoints(self, extra: str, url: str = URL) -> str:
        return self.file("e.toml", f'[[endpoint]]\nname = "a"\nbase_url = "{url}"\nmodel = "m"\n{extra}\n')

    def pair(self, extra: str) -> str:
        side = f'base_url = "{URL}"\nmodel = "m"\n'
        return self.file("pair.toml", f"[baseline]\n{side}{extra}\n[candidate]\n{side}")

    def suite(self, content: str | bytes) -> str:
        return "file:" + self.file("suite.jsonl", content)

    def run(self, name: str = "run", **files: str | bytes | None) -> str:
        """A saved bench run (records.jsonl, summary.json, summary.csv) with some files replaced or added
        (``summary_json="..."``: a file's name with _ for .) or removed (None)."""
        from lossless import rundir
        from lossless.analyze import summarize

        folder = self.tmp / name
        records = [_record(i) for i in range(6)]
        write_jsonl(folder / "records.jsonl", records)
        rundir.write(summarize(records, {"x": (None, None)}), folder)
        for file_name, content in files.items():
            file_name = file_name.replace("_", ".")
            if content is None:
                (folder / file_name).unlink()
            else:
                self.file(f"{name}/{file_name}", content)
        return str(folder)

    def setenv(self, name: str, value: str) -> list[str]:
        """No arguments: ``value`` goes into the command's environment."""
        self.env[name] = value
        return []

    def folder_in_run(self, name: str) -> str:
        """A saved run in which ``name`` is a folder."""
        run = Path(self.run())
        if (run / name).exists():
            (run / name).unlink()
        (run / name).mkdir()
        return str(run)

    def fifo(self) -> str:
        os.mkfifo(self.tmp / "fifo")
        return str(self.tmp / "fifo")

    def compare(self, **b_files: str | bytes | None) -> list[str]:
        return ["compare", self.run("a"), self.run("b", **b_files)]

    @property
    def a_file(self) -> str:
        return self.file("a-file", "x")


Case = Callable[[Given], list[str]]
DEEP = "[" * 100_000 + "]" * 100_000
SUMMARY = {"endpoints": [{"name": "x", "load": "c=1"}]}  # the right outline, without what a page reads


def argv(*args: str) -> Case:
    return lambda g: list(args)


def toml(extra: str, url: str = URL) -> Case:
    """bench --endpoints with one [[endpoint]] table, ``extra`` lines added."""
    return lambda g: ["bench", "--endpoints", g.endpoints(extra, url)]


def toml_file(content: str | bytes) -> Case:
    return lambda g: ["bench", "--endpoints", g.file("e.toml", content)]


def pair(extra: str) -> Case:
    return lambda g: ["verify", "--endpoints", g.pair(extra)]


def suite(content: str | bytes) -> Case:
    return lambda g: [*B, "--suite", g.suite(content)]


def report(**files: str | bytes | None) -> Case:
    return lambda g: ["report", g.run(**files)]


def usage(option: str) -> str:
    return f"error: invalid value for '{option}'"


NAME_TRUE = f'[[endpoint]]\nname = true\nbase_url = "{URL}"\nmodel = "m"\n'
PAIR_INTS = "baseline = 5\ncandidate = 6\n"
CUT_THEN_WHOLE = record_line()[:40] + "\n" + record_line()

CASES: list[tuple[str, Case, str]] = [
    # --- bench --endpoints: the file, then every field of an [[endpoint]] table
    ("toml-not-utf8", toml_file(b"\xff\xfe[[endpoint]]"), "not UTF-8"),
    ("toml-nested-100k", toml_file(f"x = {DEEP}\n"), "nests too deeply"),
    ("toml-int-5000-digits", toml_file("x = " + "9" * 5000), "not valid TOML"),
    ("toml-a-folder", lambda g: ["bench", "--endpoints", str(g.tmp)], "Is a directory"),
    ("toml-misspelt-table", toml("[[endpionts]]\nx = 1"), "unknown top-level"),
    ("toml-name-true", toml_file(NAME_TRUE), "'name' must be"),
    ("toml-price-true", toml("price = { input = true }"), "non-negative numbers"),
    ("toml-price-inf", toml("price = { input = inf, output = 1 }"), "non-negative numbers"),
    ("toml-price-nan", toml("price = [nan, 1.0]"), "non-negative numbers"),
    ("toml-price-text", toml('price = { output = "0.6" }'), "non-negative numbers"),
    ("toml-header-crlf", toml('headers = { x-a = "b\\r\\nx-c: d" }'), "line break or control"),
    ("toml-header-name", toml('headers = { "x a" = "b" }'), "header name 'x a'"),
    ("toml-header-number", toml("headers = { x-a = 1 }"), "must be a string"),
    ("toml-body-date", toml("body = { when = 1979-05-27 }"), "JSON cannot carry"),
    ("toml-body-nan", toml("body = { temperature = nan }"), "JSON cannot carry"),
    ("toml-body-deep", toml("body = " + "{a=" * 100 + "1" + "}" * 100), "levels deep"),
    ("toml-key-env-nul", toml('api_key_env = "A\\u0000B"'), "environment variable"),
    ("toml-key-env-list", toml('api_key_env = ["A"]'), "environment variable"),
    ("toml-tokenizer-int", toml("tokenizer = 5"), "'tokenizer' must be"),
    ("toml-port-99999", toml("", "http://127.0.0.1:99999/v1"), "Port out of range"),
    ("toml-ipv6-open", toml("", "http://[::1/v1"), "Invalid IPv6 URL"),
    # --- URLs on the command line (bench, probe, verify) and verify's [baseline]/[candidate] file
    ("url-port-99999", argv("bench", "http://127.0.0.1:99999/v1", "--model", "m"), "Port out of range"),
    ("url-ipv6-open", argv("bench", "http://[::1/v1", "--model", "m"), "Invalid IPv6 URL"),
    ("url-port-word", argv("bench", "http://127.0.0.1:abc/v1", "--model", "m"), "could not be cast"),
    ("url-port-0", argv("bench", "http://127.0.0.1:0/v1", "--model", "m"), "port 0"),
    ("url-space", argv("bench", "http://a b/v1", "--model", "m"), "space or a control"),
    ("url-no-host", argv("bench", "http://:80/v1", "--model", "m"), "not an http(s) URL"),
    ("probe-port-99999", argv("probe", "http://127.0.0.1:99999/v1", "--model", "m"), "Port out of range"),
    ("verify-ipv6-open", argv("verify", URL, "http://[::1/v1", "--model", "m"), "Invalid IPv6 URL"),
    ("inspect-reference-word", argv("inspect", URL, "--model", "m", "--reference", "fp8"), "float32"),
    (
        "inspect-reference-port",
        argv("inspect", URL, "--model", "m", "--reference", "r=http://127.0.0.1:99999/v1"),
        "Port out of range",
    ),
    ("verify-pair-header-lf", pair('headers = { x = "a\\nb" }'), "line break"),
    ("verify-tasks-unknown", argv(*V, "--set", "nope"), "neither a task file nor a built-in set"),
    ("verify-pair-price-true", pair("price = [true, 1]"), "non-negative numbers"),
    (
        "verify-pair-not-tables",
        lambda g: ["verify", "--endpoints", g.file("p.toml", PAIR_INTS)],
        "not a table",
    ),
    # --- bench --suite file:PATH.jsonl: the file, then every field of a line
    ("suite-not-utf8", suite(b'\xff{"prompt": "hi"}\n'), "not UTF-8"),
    ("suite-nested-100k", suite(DEEP + "\n"), "nests too deeply"),
    ("suite-int-5000-digits", suite('{"prompt": "hi", "max_tokens": ' + "9" * 5000 + "}"), "not valid JSON"),
    ("suite-max-tokens-true", suite('{"prompt": "hi", "max_tokens": true}'), "'max_tokens' must be"),
    ("suite-max-tokens-text", suite('{"prompt": "hi", "max_tokens": "8"}'), "'max_tokens' must be"),
    ("suite-id-a-list", suite('{"prompt": "hi", "id": [1]}'), "'id' must be"),
    ("suite-prompt-empty", suite('{"prompt": ""}'), "non-empty 'prompt'"),
    ("suite-messages-empty", suite('{"messages": []}'), "non-empty 'messages'"),
    ("suite-role-a-number", suite('{"messages": [{"role": 5, "content": "x"}]}'), "strings both"),
    ("suite-a-folder", lambda g: [*B, "--suite", f"file:{g.tmp}"], "Is a directory"),
    # --- floats: nan, inf, and what overflows
    ("rate-nan", argv(*B, "--rate", "nan"), "--rate wants numbers from 1e-06 to 1e+06"),
    ("rate-tiny", argv(*B, "--rate", "1e-300"), "--rate wants numbers from 1e-06 to 1e+06"),
    ("rate-a-word", argv(*B, "--rate", "2,fast"), "--rate wants numbers like 1,2,4"),
    ("capacity-without-slo", argv(*B, "--rate", "1", "--find-capacity", "95"), "--find-capacity searches"),
    (
        "capacity-from-a-list",
        argv(*B, "--rate", "1,2", "--slo", "ttft=5", "--find-capacity", "95"),
        "--find-capacity starts from one",
    ),
    ("capacity-percent", argv(*B, "--slo", "ttft=5", "--find-capacity", "0"), usage("--find-capacity")),
    ("workers-zero", argv(*B, "--workers", "0"), usage("--workers")),
    ("turns-concurrency", argv(*B, "--take-turns", "--concurrency", "1,4"), "--take-turns sends one request"),
    ("turns-rate", argv(*B, "--take-turns", "--rate", "2"), "--take-turns sends one request"),
    ("turns-workers", argv(*B, "--take-turns", "--workers", "2"), "--take-turns runs in one process"),
    ("input-tokens-word", argv(*B, "--input-tokens", "many"), "--input-tokens wants N, normal:MEAN,SD"),
    ("output-tokens-alone", argv(*B, "--output-tokens", "5"), "--output-tokens goes with --input-tokens"),
    ("ray-no-package-or-empty", argv(*B, "--ray", ""), "--ray: give a cluster address"),
    ("burstiness-nan", argv(*B, "--rate", "1", "--burstiness", "nan"), usage("--burstiness")),
    ("duration-nan", argv(*B, "--duration", "nan"), usage("--duration")),
    ("duration-inf", argv(*B, "--duration", "inf"), usage("--duration")),
    ("timeout-connect-nan", argv(*B, "--timeout-connect", "nan"), usage("--timeout-connect")),
    ("timeout-first-token-nan", argv(*B, "--timeout-first-token", "nan"), usage("--timeout-first-token")),
    ("timeout-total-inf", argv(*B, "--timeout-total", "inf"), usage("--timeout-total")),
    ("stall-threshold-nan", argv(*B, "--stall-threshold", "nan"), usage("--stall-threshold")),
    ("verify-timeout-nan", argv(*V, "--timeout", "nan"), usage("--timeout")),
    ("demo-temperature-nan", argv("demo", "--temperature", "nan"), usage("--temperature")),
    ("serve-spec-threshold-nan", argv("serve", "--spec-threshold", "nan"), usage("--spec-threshold")),
    # --- integers: negative or huge
    ("bench-seed-negative", argv(*B, "--seed", "-1"), usage("--seed")),
    ("verify-seed-negative", argv(*V, "--seed", "-1"), usage("--seed")),
    ("draft-seed-2**70", argv("draft", "train", "--seed", str(2**70)), usage("--seed")),
    ("serve-threads-huge", argv("serve", "--threads", "9" * 20), usage("--threads")),
    ("draft-threads-huge", argv("draft", "train", "--threads", "9" * 20), usage("--threads")),
    ("draft-max-new-huge", argv("draft", "train", "--max-new", "9" * 12), usage("--max-new")),
    ("retries-huge", argv(*B, "--retries", "1000000"), usage("--retries")),
    ("concurrency-huge", argv(*B, "--concurrency", "1000000000"), "--concurrency wants positive integers"),
    ("concurrency-a-word", argv(*B, "--concurrency", "four"), "--concurrency wants integers"),
    ("verify-budget-huge", argv(*V, "--budget", "1x2x" + "9" * 30), "at most 10,000 samples"),
    ("demo-verify-budget-huge", argv("demo", "--verify-budget", "2x99999999x8"), "at most 10,000 samples"),
    # --- strings
    ("api-key-env-empty", argv(*B, "--api-key-env", ""), "not the name of an environment variable"),
    # the key itself is never in the message: the variable's name is
    ("api-key-line-break", lambda g: [*B, "--api-key-env", "K", *g.setenv("K", "sk-1\nx")], "K holds a line"),
    ("tokenizer-empty", argv(*B, "--tokenizer", ""), "--tokenizer: give"),
    ("tokenizer-not-one", lambda g: [*B, "--tokenizer", g.a_file], "cannot read"),
    ("demo-speculative-bogus", argv("demo", "--speculative", "bogus"), "--speculative: expected"),
    # --- where results go, checked before the run
    ("bench-out-a-file", lambda g: [*B, "--out", g.a_file], "is a file, not a folder"),
    ("bench-out-under-a-file", lambda g: [*B, "--out", g.a_file + "/run"], "is a file, not a folder"),
    ("bench-out-records-a-folder", lambda g: [*B, "--out", g.folder_in_run("records.jsonl")], "plain file"),
    ("bench-html-a-folder", lambda g: [*B, "--html", str(g.tmp)], "a folder, not a file"),
    ("bench-html-a-fifo", lambda g: [*B, "--html", g.fifo()], "not a plain file"),
    ("probe-out-a-file", lambda g: ["probe", URL, "--model", "m", "--out", g.a_file], "not a folder"),
    ("verify-out-a-file", lambda g: [*V, "--out", g.a_file], "is a file, not a folder"),
    ("verify-html-a-folder", lambda g: [*V, "--html", str(g.tmp)], "a folder, not a file"),
    ("demo-out-a-file", lambda g: ["demo", "--out", g.a_file], "is a file, not a folder"),
    ("draft-out-a-file", lambda g: ["draft", "train", "--out", g.a_file], "is a file, not a folder"),
    ("report-html-a-folder", lambda g: ["report", g.run(), "--html", str(g.tmp)], "a folder, not a file"),
    (
        "report-html-under-a-file",
        lambda g: ["report", g.run(), "--html", g.a_file + "/r.html"],
        "not a folder",
    ),
    ("report-default-a-folder", lambda g: ["report", g.folder_in_run("report.html")], "a folder, not a file"),
    ("compare-html-a-folder", lambda g: ["compare", g.run(), g.run(), "--html", str(g.tmp)], "not a file"),
    (
        "models-pull-home-a-file",
        lambda g: ["models", "pull", *g.setenv("LOSSLESS_HOME", g.a_file)],
        "is a file, not a folder",
    ),
    # --- report and compare: what a run folder holds
    ("report-summary-not-json", report(summary_json="{not json"), "not JSON"),
    ("report-summary-not-utf8", report(summary_json=b"\xff\xfe"), "not JSON"),
    ("report-summary-nested-100k", report(summary_json=DEEP), "nests too deeply"),
    ("report-summary-a-list", report(summary_json="[1, 2]"), "a JSON object, got list"),
    ("report-summary-endpoints-an-int", report(summary_json='{"endpoints": 5}'), "not a bench summary"),
    ("report-summary-entry-thin", report(summary_json=json.dumps(SUMMARY)), "not shaped as lossless"),
    ("report-verify-shape", report(verify_json='{"tests": 5}'), "not shaped as lossless writes it"),
    ("report-records-a-folder", lambda g: ["report", g.folder_in_run("records.jsonl")], "Is a directory"),
    ("report-records-line-1-cut", report(records_jsonl=CUT_THEN_WHOLE), "records.jsonl:1: not JSON"),
    ("report-records-a-list", report(records_jsonl="[1]\n"), "not a request record"),
    ("report-records-field-missing", report(records_jsonl='{"a": 1}\n'), "no field 'endpoint'"),
    ("report-records-time-huge", report(records_jsonl=record_line(sent_ns=10**30)), "field 'sent_ns'"),
    ("report-records-time-text", report(records_jsonl=record_line(end_ns="1")), "field 'end_ns'"),
    ("report-records-events-uneven", report(records_jsonl=record_line(event_kinds="c")), "differ in length"),
    ("report-records-nested-100k", report(records_jsonl=DEEP + "\n"), "not a request record"),
    ("report-records-empty", report(records_jsonl="", summary_json=None), "holds no records"),
    ("report-nothing-there", lambda g: ["report", str(g.tmp)], "holds no run"),
    ("compare-records-field-missing", lambda g: g.compare(records_jsonl='{"a": 1}\n'), "no field"),
    ("compare-summary-not-json", lambda g: g.compare(summary_json="{"), "not JSON"),
    (
        "compare-verify-only",
        lambda g: g.compare(records_jsonl=None, summary_json=None, verify_json="{}"),
        "no bench records",
    ),
]


def _tree(folder: Path) -> set[Path]:
    return set(folder.rglob("*"))


@pytest.mark.parametrize(("build", "message"), [pytest.param(b, m, id=i) for i, b, m in CASES])
def test_bad_input_is_one_line_exit_2_and_nothing_written(
    build: Case, message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # a default output folder (demo's, draft's) would land here and show
    monkeypatch.setenv("LOSSLESS_HOME", str(tmp_path / "home"))
    given = Given(tmp_path)
    argv = build(given)
    for name, value in given.env.items():
        monkeypatch.setenv(name, value)
    before = _tree(tmp_path)
    result = CliRunner().invoke(main, argv)
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    lines = result.stderr.strip().splitlines()  # one line, in one style: click's usage errors too
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
    assert result.stdout == "" and "sk-1" not in result.stderr  # no key in any message
    assert _tree(tmp_path) == before  # no half-written file, and the checks left nothing behind


# --- what is not bad input keeps working ------------------------------------------------------------


def test_report_of_a_killed_run_rebuilds_its_summary_from_the_records(tmp_path: Path) -> None:
    run = Given(tmp_path).run(summary_json=None, summary_csv=None)  # SIGKILL: records.jsonl only
    with (Path(run) / "records.jsonl").open("a") as f:
        f.write(record_line(request_index=6)[:50])  # and a line cut short by the kill
    result = CliRunner().invoke(main, ["report", run])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(Path(run) / "report.html")
    notes = result.stderr.strip().splitlines()
    assert len(notes) == 2 and all(n.startswith("note: ") for n in notes)
    assert "skipped its last line, cut short" in notes[0] and "rebuilt from the 6 records" in notes[1]
    page = (Path(run) / "report.html").read_text()
    assert "rebuilt from the 6 records" in page and "Not recorded (rebuilt from records.jsonl)" in page
    assert '<svg class="plot"' in page  # the figures, from the rebuilt summary
    assert not (Path(run) / "summary.json").exists()  # report reads a run; it does not rewrite it


def test_compare_reads_runs_without_a_summary(tmp_path: Path) -> None:
    given = Given(tmp_path)
    run_a, run_b = given.run("a", summary_json=None), given.run("b", summary_json=None)
    result = CliRunner().invoke(main, ["compare", run_a, run_b, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["comparisons"] and result.stderr.count("note:") == 0


def test_output_checks_leave_nothing_behind(tmp_path: Path) -> None:
    writable_dir(tmp_path / "a" / "b" / "c", "--out", ("summary.json",))
    writable_file(tmp_path / "d" / "e" / "report.html", "--html")
    assert list(tmp_path.iterdir()) == []  # the folders are made by whoever writes, after the run
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "summary.json").write_text("{}")
    writable_dir(tmp_path / "out", "--out", ("summary.json",))  # an earlier run's file may be replaced
    with pytest.raises(UsageError, match="cannot write there"):
        writable_dir(Path("/proc/lossless-no-such-folder"), "--out")


def test_every_record_field_is_checked_on_reading() -> None:
    # a field added to RequestRecord with a new kind of annotation would go unchecked: teach checks.py
    assert RECORD_FIELD_CHECKS.keys() == {f.name for f in fields(RequestRecord)}
    assert None not in RECORD_FIELD_CHECKS.values()


def test_good_endpoint_fields_still_load(tmp_path: Path) -> None:
    from lossless.client.endpoints import load_toml, parse_urls

    extra = (
        'api_key_env = ""\nprice = [0, 2.5]\nheaders = { "x-team" = "bench\\tnight", "x-id" = "é" }\n'
        'body = { reasoning = { effort = "low" }, stop = ["a", 1, true, 0.5] }\n'
    )
    (endpoint,) = load_toml(Path(Given(tmp_path).endpoints(extra, "http://[::1]:8000/v1/")))
    assert endpoint.base_url == "http://[::1]:8000/v1" and endpoint.api_key_env is None
    assert (endpoint.price_in, endpoint.price_out) == (0.0, 2.5)
    assert endpoint.headers == {"x-team": "bench\tnight", "x-id": "é"}
    assert endpoint.body == {"reasoning": {"effort": "low"}, "stop": ["a", 1, True, 0.5]}
    (by_url,) = parse_urls(["https://user:pw@host.example:443/v1"], "m", "MY_KEY")
    assert by_url.name == "host.example:443" and by_url.api_key_env == "MY_KEY"  # no password


def test_good_suite_lines_still_load(tmp_path: Path) -> None:
    import itertools
    import random

    from lossless.bench.workload.prompts import prompts

    text = (
        '{"prompt": "hi", "id": 7, "extra": "kept out"}\n{"messages": [{"content": "yo"}], "max_tokens": 3}\n'
    )
    first, second = itertools.islice(prompts(Given(tmp_path).suite(text), random.Random(0)), 2)
    assert (first.id, first.text, first.max_tokens) == ("7", "hi", None)
    assert (second.id, second.messages, second.max_tokens) == ("file-1", (("user", "yo"),), 3)


def test_public_url_keeps_no_secret() -> None:
    from lossless.client.endpoints import public_url

    assert public_url("https://u:pw@host.example:8443/v1?key=k#f") == "https://host.example:8443/v1"
    assert public_url("http://[::1]:8000/v1") == "http://[::1]:8000/v1"
