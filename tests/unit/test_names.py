"""One name, one meaning: a class or function defined at the top of two modules of ``lossless`` under one
name is one idea in both (each command's ``run``), or a reader is misled. ``SHARED`` lists every name
that more than one module defines, with the modules that may; a new one fails until it is renamed or
listed with why. Private names (a leading underscore) are their own module's and are not counted.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import lossless

ROOT = Path(lossless.__file__).parent

SHARED: dict[str, frozenset[str]] = {
    # the same role in every room that plays it
    "run": frozenset(  # a command folder's run.py: its options -> its result
        {
            *("advise/run.py", "bench/run.py", "demo/run.py", "inspect/run.py", "probe/run.py"),
            *("sweep/run.py", "tasks/run.py", "verify/run.py", "watch/run.py"),
        }
    ),
    "main": frozenset({"cli/__init__.py", "server/precompile.py", "tasks/sandbox_boot.py"}),  # a process
    # the lossless serve command, and the server it runs
    "serve": frozenset({"cli/serving.py", "server/main.py"}),
    "verify": frozenset({"cli/measure.py", "verify/run.py"}),  # the lossless verify command, and its work
    # a translated API's module: its request parsed (as the chat API's is), its body, its stream's events
    "parse": frozenset(
        {
            "server/openai/protocol.py",
            "server/dialects/openai_responses.py",
            "server/dialects/anthropic_messages.py",
        }
    ),
    "body": frozenset({"server/dialects/openai_responses.py", "server/dialects/anthropic_messages.py"}),
    "event": frozenset(
        {"server/dialects/openai_responses_stream.py", "server/dialects/anthropic_messages_stream.py"}
    ),
    "events": frozenset(
        {"server/dialects/openai_responses_stream.py", "server/dialects/anthropic_messages_stream.py"}
    ),
    # evidence -> a verdict, one per claim; a claim's measurement
    "judge": frozenset(
        {"inspect/identity.py", "inspect/precision.py", "inspect/speculation.py", "verify/judge.py"}
    ),
    "measure": frozenset({"inspect/context.py", "inspect/identity.py"}),
    "to_json": frozenset(
        {"records.py", "rundir.py", "report/compare.py", "report/trend.py"}
    ),  # its JSON text
    # report/'s modules, each showing its command's result
    "emit": frozenset(
        {
            *("report/advise.py", "report/bench.py", "report/compare.py", "report/inspect.py"),
            *("report/probe.py", "report/sweep.py", "report/tasks.py", "report/verify.py"),
        }
    ),
    "render": frozenset(
        {
            *("report/inspect.py", "report/inspect_html.py", "report/probe.py", "report/svg.py"),
            *("report/tasks.py", "report/terminal.py", "report/verify.py"),
        }
    ),
    "render_html": frozenset(
        {
            *("report/advise.py", "report/compare.py", "report/sweep.py", "report/tasks.py"),
            *("report/trend.py", "report/verify.py"),
        }
    ),
    "render_terminal": frozenset(
        {"report/advise.py", "report/compare.py", "report/sweep.py", "report/trend.py"}
    ),
    # seconds before a request is sent again: the server's Retry-After, else a doubling wait with jitter;
    # bench's per attempt of a record, tasks' per turn of an agent, each room with its own bounds
    "backoff": frozenset({"bench/runtime.py", "tasks/runner.py"}),
}


def defined(root: Path) -> dict[str, set[str]]:
    """Every public class or function name defined at the top of a module under ``root`` -> its modules."""
    found: dict[str, set[str]] = defaultdict(set)
    for path in sorted(root.rglob("*.py")):
        for node in ast.parse(path.read_text()).body:
            is_definition = isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef)
            if is_definition and not node.name.startswith("_"):
                found[node.name].add(str(path.relative_to(root)))
    return found


def unexplained(found: dict[str, set[str]], shared: dict[str, frozenset[str]]) -> list[str]:
    """Names defined in several modules beyond what ``shared`` allows, and entries of ``shared`` that no
    longer name a shared definition (remove them)."""
    wrong = [
        f"{name}: {', '.join(sorted(where))}"
        for name, where in sorted(found.items())
        if len(where) > 1 and not where <= shared.get(name, frozenset())
    ]
    stale = [f"{name}: no longer shared" for name in sorted(shared) if len(found.get(name, ())) < 2]
    return wrong + stale


def test_every_name_has_one_meaning() -> None:
    assert unexplained(defined(ROOT), SHARED) == []


def test_a_name_with_two_meanings_is_caught(tmp_path: Path) -> None:
    """The check above can fail: a name in two modules unlisted, one listed for other modules, and a
    listing that names no shared definition any more."""
    (tmp_path / "a.py").write_text("class Limits: ...\ndef run() -> None: ...\ndef _own() -> None: ...\n")
    (tmp_path / "b.py").write_text("Limits = 1\ndef Limits() -> None: ...\ndef run() -> None: ...\n")
    (tmp_path / "c.py").write_text("def _own() -> None: ...\ndef run() -> None: ...\n")
    shared = {"run": frozenset({"a.py", "b.py"}), "gone": frozenset({"a.py", "b.py"})}
    assert unexplained(defined(tmp_path), shared) == [
        "Limits: a.py, b.py",
        "run: a.py, b.py, c.py",
        "gone: no longer shared",
    ]
