"""Tasks and checkers (pure): every checker kind passing and failing, task files and their one-line errors,
tools answered from a table or a named function, and the built-in sets. The sandbox is in
tests/integration/tasks/test_sandbox.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from lossless.errors import UsageError
from lossless.tasks.calculator import calculator
from lossless.tasks.checkers import (
    Exact,
    Numeric,
    PythonTests,
    ToolCalls,
    check,
    extract_code,
    last_number,
    parse_checker,
    program,
)
from lossless.tasks.sets import arithmetic, humaneval, load_set, tools_demo
from lossless.tasks.task import Limits, load_tasks, parse_task


def _checker(spec: dict[str, Any]) -> Any:
    return parse_checker(spec, "t.jsonl:1")


def _call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": json.dumps(arguments)}


# --- exact, numeric, regex -------------------------------------------------------------------------


def test_exact_strips_and_optionally_normalises() -> None:
    strict = _checker({"kind": "exact", "answer": "New York"})
    assert check(strict, "  New York\n").passed
    assert not check(strict, "new  york").passed
    loose = _checker({"kind": "exact", "answer": "New York", "normalize": True})
    assert check(loose, " new \n york ").passed
    assert not check(loose, "New Yorkshire").passed
    assert not check(strict, None).passed and check(strict, "").reason == "no answer text"


@pytest.mark.parametrize(
    ("text", "found"),
    [
        ("The answer is 42.", 42.0),
        ("3 apples and 1,234.5 pears", 1234.5),
        ("it fell to -7", -7.0),
        ("10-4 = 6", 6.0),
        ("5-3", 3.0),  # a minus between digits is subtraction, not a sign
        ("about 2e3 of them", 2000.0),
        ("a sequence: 1,2,3", 3.0),
        ("no digits here", None),
    ],
)
def test_last_number(text: str, found: float | None) -> None:
    assert last_number(text) == found


def test_numeric_takes_the_last_number_within_its_tolerance() -> None:
    c = _checker({"kind": "numeric", "answer": 57})
    assert check(c, "12 * 4.75 = 57").passed
    assert check(c, "57.0000000001").passed
    result = check(c, "Twelve widgets cost 56.9 euros")
    assert not result.passed and result.details["found"] == 56.9
    assert "56.9 is not 57" in result.reason
    assert check(_checker({"kind": "numeric", "answer": 100, "tolerance": 1}), "it is 99").passed
    assert check(_checker({"kind": "numeric", "answer": 1000, "relative": 0.01}), "1,009").passed
    assert not check(c, "no number").passed


def test_regex_searches_with_optional_case() -> None:
    c = _checker({"kind": "regex", "pattern": r"\bParis\b"})
    assert check(c, "It is Paris.").passed
    assert not check(c, "It is paris.").passed
    assert not check(c, "Parisian").passed
    assert check(_checker({"kind": "regex", "pattern": r"\bparis\b", "ignore_case": True}), "PARIS").passed


# --- json_schema ------------------------------------------------------------------------------------

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "days": {"type": "integer", "minimum": 1}},
    "required": ["city", "days"],
    "additionalProperties": False,
}


def test_json_schema_passes_valid_json_and_says_why_otherwise() -> None:
    c = _checker({"kind": "json_schema", "schema": SCHEMA})
    assert check(c, ' {"city": "Oslo", "days": 3}\n').passed
    bad_json = check(c, '{"city": "Oslo", "days": 3')
    assert not bad_json.passed and bad_json.reason.startswith("not valid JSON")
    wrong = check(c, '{"city": "Oslo", "days": 0}')
    assert not wrong.passed and "$.days" in wrong.reason and "\n" not in wrong.reason
    assert not check(c, '{"city": "Oslo"}').passed
    assert not check(c, '{"city": "Oslo", "days": 2, "extra": 1}').passed


def test_json_schema_refuses_an_invalid_schema_when_loading() -> None:
    with pytest.raises(UsageError, match=r"^t\.jsonl:1: checker\.schema: not a valid JSON schema"):
        _checker({"kind": "json_schema", "schema": {"type": "no-such-type"}})


# --- tool_calls -------------------------------------------------------------------------------------

WEATHER: dict[str, Any] = {
    "kind": "tool_calls",
    "calls": [
        {"name": "get_weather", "arguments": {"city": ["Paris", "Paris, France"], "unit": ["celsius", ""]}}
    ],
}


def test_tool_calls_match_on_structure() -> None:
    c = _checker(WEATHER)
    assert check(c, None, [_call("get_weather", city="paris")]).passed  # case ignored; unit optional
    assert check(c, None, [_call("get_weather", city="Paris,France", unit="celsius")]).passed
    # an OpenAI tool_calls item is taken as it comes
    openai_item = {"id": "c1", "type": "function", "function": _call("get_weather", city="Paris")}
    assert check(c, "", [openai_item]).passed


@pytest.mark.parametrize(
    ("calls", "why"),
    [
        ([], "expected 1 tool calls, got 0"),
        (
            [_call("get_forecast", city="Paris")],
            "expected call get_weather: no call to it (got get_forecast)",
        ),
        ([_call("get_weather", city="Lyon")], "argument 'city': 'Lyon' is not among"),
        ([_call("get_weather", unit="celsius")], "argument 'city' is missing"),
        ([_call("get_weather", city="Paris", days=3)], "unexpected argument 'days'"),
        ([_call("get_weather", city="Paris", unit="kelvin")], "argument 'unit'"),
        ([{"name": "get_weather", "arguments": '{"city": "Paris"'}], "arguments are not valid JSON"),
        ([{"name": "get_weather", "arguments": "[1]"}], "not a JSON object"),
    ],
)
def test_tool_calls_fail_with_a_reason(calls: list[dict[str, Any]], why: str) -> None:
    result = check(_checker(WEATHER), None, calls)
    assert not result.passed
    assert why in result.reason


def test_parallel_tool_calls_match_in_any_order_each_call_once() -> None:
    c = _checker(
        {
            "kind": "tool_calls",
            "calls": [
                {"name": "lookup", "arguments": {"key": ["stock:oslo"]}},
                {"name": "lookup", "arguments": {"key": ["stock:oslo", "stock:lima"]}},
            ],
        }
    )
    # the first actual call fits both expectations; only pairing it with the first lets both match
    assert check(c, None, [_call("lookup", key="stock:lima"), _call("lookup", key="stock:oslo")]).passed
    twice = check(c, None, [_call("lookup", key="stock:lima"), _call("lookup", key="stock:lima")])
    assert not twice.passed and "expected call lookup" in twice.reason


def test_tool_call_values_compare_as_values() -> None:
    c = _checker({"kind": "tool_calls", "calls": [{"name": "f", "arguments": {"x": [2.0], "flag": [True]}}]})
    assert check(c, None, [_call("f", x=2, flag=True)]).passed  # an int where a float is expected
    assert not check(c, None, [_call("f", x=2, flag=1)]).passed  # but 1 is not true
    nested = _checker({"kind": "tool_calls", "calls": [{"name": "f", "arguments": {"xs": [[1, "a b"]]}}]})
    assert check(nested, None, [_call("f", xs=[1, "A_B"])]).passed
    assert not check(nested, None, [_call("f", xs=[1])]).passed


def test_no_call_expected() -> None:
    c = _checker({"kind": "tool_calls", "calls": []})
    assert check(c, "I cannot help with that.", []).passed
    assert not check(c, None, [_call("f")]).passed


# --- python_tests: how the program is put together (the runs are in test_sandbox.py) ----------------


def test_code_comes_from_the_first_python_block() -> None:
    text = "Here:\n```js\nno()\n```\n```python\ndef f():\n    return 1\n```\nand ```python\nx = 2\n```"
    assert extract_code(text) == "def f():\n    return 1\n"
    assert extract_code("def f(): pass") == "def f(): pass"
    assert extract_code("```\nprint(1)\n") == "print(1)\n"  # an unclosed fence: the answer was cut off


def test_a_body_continues_the_prefix_and_a_whole_function_follows_it() -> None:
    c = PythonTests(tests="", prefix="import math\ndef f(x):\n    '''doc'''\n")
    assert program(c, "    return x\n") == c.prefix + "    return x\n"
    whole = program(c, "```python\ndef f(x):\n    return math.floor(x)\n```")
    assert whole == c.prefix + "\n\ndef f(x):\n    return math.floor(x)\n"
    compile(whole, "whole", "exec")


# --- task files ---------------------------------------------------------------------------------------

GOOD: dict[str, Any] = {
    "id": "t1",
    "messages": [{"role": "user", "content": "What is 2 + 3?"}],
    "checker": {"kind": "numeric", "answer": 5},
}


def _file(tmp_path: Path, *lines: Any) -> Path:
    path = tmp_path / "tasks.jsonl"
    path.write_text("\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n")
    return path


def test_a_task_file_loads_with_defaults(tmp_path: Path) -> None:
    second = {**GOOD, "id": "t2", "limits": {"max_steps": 2, "max_seconds": 9.5}, "reference": "5"}
    tasks = load_tasks(_file(tmp_path, GOOD, "", second))
    assert [t.id for t in tasks] == ["t1", "t2"]
    assert tasks[0].checker == Numeric(5.0) and tasks[0].limits == Limits() and tasks[0].tools == ()
    assert tasks[1].limits == Limits(max_steps=2, max_tokens=4096, max_seconds=9.5)
    assert check(tasks[1].checker, tasks[1].reference).passed


def _with(**changes: Any) -> dict[str, Any]:
    return {**GOOD, **changes}


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", r"tasks\.jsonl:2: not valid JSON: .* at column 2$"),
        ("[1, 2]", r"tasks\.jsonl:2: expected an object, got \[1, 2\]$"),
        ({"messages": GOOD["messages"], "checker": GOOD["checker"]}, r":2: id: missing$"),
        (_with(id="t1"), r":2: id: 't1' is already the id of line 1$"),
        (_with(messages=[]), r":2: messages: must hold at least one message$"),
        (
            _with(messages=[{"role": "robot", "content": "x"}]),
            r":2: messages\[0\]\.role: 'robot' is not one of",
        ),
        (_with(messages=[{"role": "user"}]), r":2: messages\[0\]\.content: missing$"),
        (
            _with(checker={"kind": "vibes"}),
            r":2: checker\.kind: unknown kind 'vibes' \(known: exact, numeric",
        ),
        (_with(checker={"kind": "numeric", "answer": "5"}), r":2: checker\.answer: expected an integer or a"),
        (_with(checker={"kind": "numeric", "answer": True}), r":2: checker\.answer: expected .* got True$"),
        (_with(checker={"kind": "numeric", "answer": 5, "tol": 1}), r":2: checker\.tol: unknown field"),
        (_with(checker={"kind": "regex", "pattern": "(a"}), r":2: checker\.pattern: not a valid regular exp"),
        (
            _with(checker={"kind": "tool_calls", "calls": [{"name": "f", "arguments": {"x": 1}}]}),
            r"calls\[0\]\.arg",
        ),
        (_with(limits={"max_steps": 0}), r":2: limits\.max_steps: must be a positive integer, got 0$"),
        (_with(limits={"max_seconds": -1}), r":2: limits\.max_seconds: must be at least"),
        (_with(limit={"max_steps": 3}), r":2: limit: unknown field \(known: id, messages"),
    ],
)
def test_bad_task_lines_get_one_line_errors(tmp_path: Path, line: Any, message: str) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        load_tasks(_file(tmp_path, GOOD, line))
    assert "\n" not in str(caught.value) and str(caught.value).startswith(str(tmp_path / "tasks.jsonl:2"))


def test_unreadable_and_empty_task_files(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"nope\.jsonl: cannot read the task file: No such file"):
        load_tasks(tmp_path / "nope.jsonl")
    with pytest.raises(UsageError, match=r"tasks\.jsonl: no tasks in the file$"):
        load_tasks(_file(tmp_path, ""))


# --- tools ----------------------------------------------------------------------------------------------

LOOKUP: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "lookup",
        "parameters": {"type": "object", "properties": {"key": {"type": "string"}}},
    },
    "latency_s": 0.2,
    "results": [
        {"arguments": {"key": "a"}, "result": 1},
        {"arguments": {"key": "b", "n": 2.0}, "result": "two"},
    ],
}


def test_a_table_tool_answers_from_its_table(tmp_path: Path) -> None:
    (task,) = load_tasks(_file(tmp_path, _with(tools=[LOOKUP])))
    tool = task.tool("lookup")
    assert tool is not None and tool.latency_s == 0.2 and tool.source == "table"
    assert task.tool_specs() == [{"type": "function", "function": LOOKUP["function"]}]
    assert tool.call('{"key": "a"}').content == "1"
    assert tool.call({"n": 2, "key": "b"}).content == "two"  # keys in any order, 2 == 2.0
    missing = tool.call('{"key": "z"}')
    assert missing.error and missing.content == 'error: no result for arguments {"key":"z"}'
    assert tool.call("{oops").error and tool.call("[1]").error
    defaulted = parse_task(_with(tools=[{**LOOKUP, "default": "not found"}]), "x").tools[0]
    assert defaulted.call('{"key": "z"}') == type(missing)("not found", error=False)


def test_a_function_tool_from_a_module_or_a_file_beside_the_task_file(tmp_path: Path) -> None:
    (tmp_path / "mytools.py").write_text("def double(x):\n    return {'twice': 2 * x}\n")
    by_module = {**LOOKUP, "implementation": "lossless.tasks.calculator:calculator"}
    by_file = {**LOOKUP, "implementation": "mytools.py:double"}
    del by_module["results"], by_file["results"]
    by_file["function"] = {**LOOKUP["function"], "name": "double"}
    (task,) = load_tasks(_file(tmp_path, _with(tools=[by_module, by_file])))
    calc, double = task.tools
    assert calc.call('{"expression": "12 * 4.75"}').content == "57"
    assert double.call('{"x": 4}').content == '{"twice": 8}'
    failed = double.call('{"y": 4}')
    assert failed.error and failed.content.startswith("error: TypeError:")


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"implementation": "x:y"}, r"tools\[0\]: give exactly one of 'results'"),
        ({"results": None}, r"tools\[0\]: give exactly one of"),
        ({"latency_s": -0.1}, r"tools\[0\]\.latency_s: must be at least 0"),
        ({"function": {"name": "bad name"}}, r"tools\[0\]\.function\.name: 'bad name': use 1-64 letters"),
        ({"type": "retrieval"}, r"tools\[0\]\.type: only 'function' tools"),
        ({"results": [{"arguments": {"key": "a"}}]}, r"tools\[0\]\.results\[0\]\.result: missing"),
        (
            {"results": [{"arguments": {"k": 1}, "result": 1}] * 2},
            r"results\[1\]\.arguments: \{\"k\":1\} is already",
        ),
    ],
)
def test_bad_tools_get_one_line_errors(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    tool = {key: value for key, value in {**LOOKUP, **change}.items() if value is not None}
    with pytest.raises(UsageError, match=message):
        load_tasks(_file(tmp_path, _with(tools=[tool])))


@pytest.mark.parametrize(
    ("target", "message"),
    [
        ("no_such_module_xyz:f", r"cannot import no_such_module_xyz: ModuleNotFoundError"),
        ("lossless.tasks.calculator:nothing", r"lossless\.tasks\.calculator has no function 'nothing'"),
        ("missing.py:f", r"cannot import missing\.py: FileNotFoundError"),
        ("no-colon", r"'no-colon': expected module:function or file\.py:function"),
    ],
)
def test_function_tools_that_cannot_be_found(tmp_path: Path, target: str, message: str) -> None:
    tool = {key: value for key, value in LOOKUP.items() if key != "results"} | {"implementation": target}
    with pytest.raises(UsageError, match=r"tasks\.jsonl:1: tools\[0\]\.implementation: " + message):
        load_tasks(_file(tmp_path, _with(tools=[tool])))


def test_two_tools_with_one_name(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r":1: tools: two tools are named 'lookup'$"):
        load_tasks(_file(tmp_path, _with(tools=[LOOKUP, LOOKUP])))


def test_the_calculator_does_arithmetic_and_nothing_else() -> None:
    assert calculator("(2 + 3) * 4 - 1 / 2") == 19.5
    assert calculator("2^10") == 1024 and calculator("-3 ** 2") == -9
    for hostile in ("__import__('os')", "x + 1", "[1] * 3", "9 ** 9 ** 9"):
        with pytest.raises(ValueError):
            calculator(hostile)


# --- built-in sets -----------------------------------------------------------------------------------


def test_humaneval_ships_164_problems_as_python_test_tasks() -> None:
    tasks = humaneval()
    assert len(tasks) == 164 and len({t.id for t in tasks}) == 164
    first = tasks[0]
    assert first.id == "HumanEval/0" and isinstance(first.checker, PythonTests)
    assert first.checker.entry_point == "has_close_elements"
    assert first.checker.prefix in first.messages[0]["content"] and first.reference


def test_arithmetic_and_tools_sets_pass_their_own_references() -> None:
    sets = {"arithmetic": arithmetic(), "tools": tools_demo()}
    assert len(sets["arithmetic"]) == 12 and all(isinstance(t.checker, Numeric) for t in sets["arithmetic"])
    assert len(sets["tools"]) == 9 and {len(t.tools) for t in sets["tools"]} == {2}
    for task in (*sets["arithmetic"], *sets["tools"]):
        if isinstance(task.checker, ToolCalls):
            calls = [_call("lookup", key="stock:lima"), _call("lookup", key="stock:oslo")]
            assert check(task.checker, None, calls).passed, task.id
        else:
            result = check(task.checker, task.reference)
            assert result.passed, (task.id, result.reason)
    lookup = sets["tools"][0].tool("lookup")
    assert lookup is not None and lookup.latency_s == 0.2
    assert lookup.call('{"key": "stock:pune"}').content == "815"


def test_load_set_by_name_or_file(tmp_path: Path) -> None:
    assert [t.id for t in load_set(str(_file(tmp_path, GOOD)))] == ["t1"]
    assert len(load_set("tools")) == 9
    with pytest.raises(
        UsageError, match=r"^nope: neither a task file nor a built-in set \(humaneval, arithm"
    ):
        load_set("nope")
    assert check(Exact("x"), "x").passed


def test_required_first_forces_a_tool_call_on_an_attempts_first_model_call_only() -> None:
    from lossless.client.endpoints import Endpoint
    from lossless.tasks.runner import RunnerConfig, _body

    task, endpoint = tools_demo()[0], Endpoint("e", "http://127.0.0.1:1/v1", "m")
    messages = list(task.messages)
    config = RunnerConfig(tool_choice="required-first")
    assert _body(endpoint, task, messages, 64, config, first=True)["tool_choice"] == "required"
    assert _body(endpoint, task, messages, 64, config, first=False)["tool_choice"] == "auto"
    plain = RunnerConfig(tool_choice="required")
    assert _body(endpoint, task, messages, 64, plain, first=False)["tool_choice"] == "required"
    assert "tool_choice" not in _body(endpoint, task, messages, 64, RunnerConfig(), first=True)
