"""Did the model's final output complete the task? One checker per task, chosen by ``kind``.

``check(checker, text, tool_calls)`` takes the final answer's text (None when there was none) and the
tool calls of the final turn (``{"name", "arguments"}`` dicts, ``arguments`` a JSON string as the API
sends it; OpenAI ``tool_calls`` items are taken too) and returns a ``CheckResult``. The kinds, as a task
file writes them (defaults in brackets):

- ``{"kind": "exact", "answer": "Paris", "normalize": [false]}``: the stripped text equals the answer;
  ``normalize`` also ignores case and runs of white space.
- ``{"kind": "numeric", "answer": 42, "tolerance": [1e-6], "relative": [0]}``: the last number in the
  text (``1,234.5``, ``-3``, ``2e3``) is within ``tolerance + relative * |answer|`` of the answer.
- ``{"kind": "regex", "pattern": "\\\\bparis\\\\b", "ignore_case": [false]}``: ``re.search`` finds it.
- ``{"kind": "json_schema", "schema": {...}}``: the stripped text is JSON valid against the schema
  (any draft ``jsonschema`` knows; needs the ``tasks`` extra).
- ``{"kind": "tool_calls", "calls": [{"name": "f", "arguments": {"x": [1, 1.0], "unit": ["c", ""]}}]}``:
  see ``calls.py`` for how calls match; ``"calls": []`` expects no call at all.
- ``{"kind": "python_tests", "tests": "...", "prefix": [""], "entry_point": [null], "seconds": [15],
  "memory_mb": [1024]}``: the program ``prefix`` + the answer's code, then ``tests``, then
  ``check(<entry_point>)`` when one is named, exits cleanly in the sandbox (``sandbox.py``). The code
  is the first ``python`` (or unlabelled) fenced block of the text, else the whole text; when its first
  line is indented it continues ``prefix`` (a completion of a function body), otherwise it follows it as
  new top-level code (a whole function then replaces the prefix's stub). This check blocks for as long
  as the program runs (a fraction of a second to ``seconds``): call it from a thread in async code.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lossless.errors import UsageError
from lossless.tasks.calls import ExpectedCall, match_calls, parse_calls
from lossless.tasks.fields import as_object, fail, join, number, only, shown, take
from lossless.tasks.sandbox import SandboxLimits, run_python

_NUMBER = re.compile(r"(?:(?<![\w.])-)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?")
_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)
_PYTHON = ("python", "py", "python3", "")


@dataclass(frozen=True)
class CheckResult:
    passed: bool
    reason: str  # one line, for a person
    details: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Exact:
    answer: str
    normalize: bool = False


@dataclass(frozen=True)
class Numeric:
    answer: float
    tolerance: float = 1e-6
    relative: float = 0.0


@dataclass(frozen=True)
class Regex:
    pattern: str
    ignore_case: bool = False


@dataclass(frozen=True)
class JsonSchema:
    schema: Mapping[str, Any]


@dataclass(frozen=True)
class ToolCalls:
    calls: tuple[ExpectedCall, ...]


@dataclass(frozen=True)
class PythonTests:
    tests: str
    prefix: str = ""
    entry_point: str | None = None
    seconds: float = 15.0  # wall time of one run: generous, since a busy machine slows the good ones
    memory_mb: int = 1024


Checker = Exact | Numeric | Regex | JsonSchema | ToolCalls | PythonTests


def parse_checker(spec: Any, where: str, prefix: str = "checker") -> Checker:
    obj = as_object(spec, where, prefix)
    kind = take(obj, "kind", str, where, prefix)
    if kind not in _PARSERS:
        fail(where, join(prefix, "kind"), f"unknown kind {kind!r} (known: {', '.join(_PARSERS)})")
    known, parse = _PARSERS[kind]
    only(obj, ("kind", *known), where, prefix)
    return parse(obj, where, prefix)


def _exact(obj: Mapping[str, Any], where: str, p: str) -> Checker:
    return Exact(take(obj, "answer", str, where, p), take(obj, "normalize", bool, where, p, False))


def _numeric(obj: Mapping[str, Any], where: str, p: str) -> Checker:
    answer = take(obj, "answer", (int, float), where, p)
    return Numeric(
        float(answer), number(obj, "tolerance", where, p, 1e-6), number(obj, "relative", where, p, 0.0)
    )


def _regex(obj: Mapping[str, Any], where: str, p: str) -> Checker:
    pattern = take(obj, "pattern", str, where, p)
    try:
        re.compile(pattern)
    except re.error as exc:
        fail(where, join(p, "pattern"), f"not a valid regular expression: {exc}")
    return Regex(pattern, take(obj, "ignore_case", bool, where, p, False))


def _json_schema(obj: Mapping[str, Any], where: str, p: str) -> Checker:
    schema = take(obj, "schema", (dict, bool), where, p)
    jsonschema = load_jsonschema()
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.exceptions.SchemaError as exc:
        fail(where, join(p, "schema"), f"not a valid JSON schema: {_line(exc.message)}")
    return JsonSchema(schema)


def _tool_calls(obj: Mapping[str, Any], where: str, p: str) -> Checker:
    return ToolCalls(parse_calls(take(obj, "calls", list, where, p), where, join(p, "calls")))


def _python_tests(obj: Mapping[str, Any], where: str, p: str) -> Checker:
    return PythonTests(
        tests=take(obj, "tests", str, where, p),
        prefix=take(obj, "prefix", str, where, p, ""),
        entry_point=take(obj, "entry_point", (str, type(None)), where, p, None),
        seconds=number(obj, "seconds", where, p, 15.0, minimum=0.1),
        memory_mb=int(number(obj, "memory_mb", where, p, 1024, minimum=64)),
    )


_Parse = Callable[[Mapping[str, Any], str, str], Checker]
_PARSERS: dict[str, tuple[tuple[str, ...], _Parse]] = {
    "exact": (("answer", "normalize"), _exact),
    "numeric": (("answer", "tolerance", "relative"), _numeric),
    "regex": (("pattern", "ignore_case"), _regex),
    "json_schema": (("schema",), _json_schema),
    "tool_calls": (("calls",), _tool_calls),
    "python_tests": (("tests", "prefix", "entry_point", "seconds", "memory_mb"), _python_tests),
}


def check(checker: Checker, text: str | None, tool_calls: Sequence[Mapping[str, Any]] = ()) -> CheckResult:
    if isinstance(checker, ToolCalls):
        passed, reason, details = match_calls(checker.calls, tool_calls)
        return CheckResult(passed, reason, details)
    if text is None or not text.strip():
        return CheckResult(False, "no answer text")
    if isinstance(checker, Exact):
        return _check_exact(checker, text)
    if isinstance(checker, Numeric):
        return _check_numeric(checker, text)
    if isinstance(checker, Regex):
        flags = re.IGNORECASE if checker.ignore_case else 0
        found = re.search(checker.pattern, text, flags)
        reason = f"found {shown(found.group(0))}" if found else f"no match for {shown(checker.pattern)}"
        return CheckResult(found is not None, reason)
    if isinstance(checker, JsonSchema):
        return _check_json(checker, text)
    return _check_python(checker, text)


def _check_exact(checker: Exact, text: str) -> CheckResult:
    def norm(s: str) -> str:
        return " ".join(s.split()).casefold() if checker.normalize else s.strip()

    passed = norm(text) == norm(checker.answer)
    return CheckResult(
        passed, f"{shown(text.strip())} {'equals' if passed else 'is not'} {shown(checker.answer)}"
    )


def last_number(text: str) -> float | None:
    found = _NUMBER.findall(text)
    return float(found[-1].replace(",", "")) if found else None


def _check_numeric(checker: Numeric, text: str) -> CheckResult:
    found = last_number(text)
    details = {"found": found, "expected": checker.answer}
    if found is None:
        return CheckResult(False, "no number in the answer", details)
    allowed = checker.tolerance + checker.relative * abs(checker.answer)
    passed = math.isclose(found, checker.answer, rel_tol=0.0, abs_tol=allowed)
    verb = "is" if passed else "is not"
    return CheckResult(passed, f"last number {found:.15g} {verb} {checker.answer:.15g}", details)


def _check_json(checker: JsonSchema, text: str) -> CheckResult:
    try:
        value = json.loads(text.strip())
    except json.JSONDecodeError as exc:
        return CheckResult(False, f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}")
    jsonschema = load_jsonschema()
    validator = jsonschema.validators.validator_for(checker.schema)(checker.schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(value))
    if error is None:
        return CheckResult(True, "valid JSON that matches the schema")
    return CheckResult(False, f"does not match the schema at {error.json_path}: {_line(error.message)}")


def extract_code(text: str) -> str:
    blocks = [(lang.lower(), body) for lang, body in _FENCE.findall(text)]
    return next((body for lang, body in blocks if lang in _PYTHON), text)


def program(checker: PythonTests, text: str) -> str:
    """The code the sandbox runs before the tests: the prefix and the answer's code."""
    code = extract_code(text)
    first = next((line for line in code.splitlines() if line.strip()), "")
    return checker.prefix + code if first[:1] in (" ", "\t") else checker.prefix + "\n\n" + code


def _check_python(checker: PythonTests, text: str) -> CheckResult:
    tests = checker.tests + (f"\n\ncheck({checker.entry_point})\n" if checker.entry_point else "")
    limits = SandboxLimits(seconds=checker.seconds, memory_mb=checker.memory_mb)
    result = run_python(program(checker, text), tests, limits=limits)
    details = {"status": result.status, "seconds": result.seconds, "stderr_tail": result.stderr_tail}
    return CheckResult(result.status == "passed", f"{result.status}: {result.reason}", details)


def load_jsonschema() -> Any:
    try:
        import jsonschema
    except ImportError as exc:  # an optional extra: the core install stays small
        raise UsageError(
            "json_schema checks need the jsonschema package: pip install 'lossless[tasks]'"
        ) from exc
    return jsonschema


def _line(text: str, limit: int = 200) -> str:
    return " ".join(text.split())[:limit]
