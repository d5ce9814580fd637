"""BFCL v4's categories from the bfcl-eval wheel (pip download, no dependencies): every question becomes a
task whose checker passes BFCL's own ground truth and fails the calls BFCL counts wrong."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from lossless.tasks import bfcl
from lossless.tasks.checkers import ToolCalls, check
from lossless.tasks.sets import load_set
from lossless.tasks.task import Task

# the wheel is kept with pytest's cache, so a second run needs no network
CACHE = Path(__file__).resolve().parents[3] / ".pytest_cache" / "lossless-home"


@pytest.fixture(scope="module", autouse=True)
def cache_home() -> Iterator[None]:
    old = os.environ.get("LOSSLESS_HOME")
    os.environ["LOSSLESS_HOME"] = str(CACHE)
    yield
    if old is None:
        del os.environ["LOSSLESS_HOME"]
    else:
        os.environ["LOSSLESS_HOME"] = old


def _first_literal(call: Task) -> list[dict]:
    """The checker's expected calls made with each argument's first allowed value (absent when optional)."""
    assert isinstance(call.checker, ToolCalls)
    made = []
    for expected in call.checker.calls:
        arguments = {k: next(v for v in alts) for k, alts in expected.arguments.items() if alts[0] != ""}
        made.append(
            {"type": "function", "function": {"name": expected.name, "arguments": json.dumps(arguments)}}
        )
    return made


@pytest.mark.parametrize(
    ("name", "count"), [("bfcl-simple", 400), ("bfcl-multiple", 200), ("bfcl-irrelevance", 240)]
)
def test_every_question_is_a_task_its_ground_truth_passes(name: str, count: int) -> None:
    tasks = load_set(name)
    assert bfcl.wheel_path().is_relative_to(CACHE) and bfcl.wheel_path().is_file()
    assert len(tasks) == count and len({t.id for t in tasks}) == count
    for task in tasks:
        names = {t.name for t in task.tools}
        assert task.tools and all("." not in n for n in names), task.id
        for tool in task.tools:  # JSON Schema types only, as the OpenAI API wants them
            assert '"dict"' not in json.dumps(tool.spec) and '"float"' not in json.dumps(tool.spec), task.id
        calls = _first_literal(task)
        assert check(task.checker, None, calls).passed, (task.id, calls)
        if name == "bfcl-irrelevance":
            assert calls == []  # any call at all fails
            some = {"type": "function", "function": {"name": next(iter(names)), "arguments": "{}"}}
            assert not check(task.checker, None, [some]).passed
        else:
            assert {c["function"]["name"] for c in calls} <= names, task.id
            assert not check(task.checker, "no call, an answer in words", []).passed


def test_bfcl_answers_are_judged_as_bfcl_judges_them() -> None:
    tasks = {t.id: t for t in load_set("bfcl-simple")}
    area = tasks["simple_python_0"]  # calculate_triangle_area(base=10, height=5, unit optional)

    def call(name: str, **arguments: object) -> list[dict]:
        return [{"type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}]

    assert check(area.checker, None, call("calculate_triangle_area", base=10, height=5)).passed
    assert check(area.checker, None, call("calculate_triangle_area", base=10, height=5, unit="units")).passed
    assert not check(area.checker, None, call("calculate_triangle_area", base=5, height=10)).passed
    assert not check(area.checker, None, call("calculate_triangle_area", base=10)).passed
    factorial = tasks["simple_python_1"]  # math.factorial: the "." became "_"
    assert check(factorial.checker, None, call("math_factorial", number=5)).passed
    assert not check(factorial.checker, None, call("math.factorial", number=5)).passed
    # an object argument lists alternatives per key in BFCL's file: each literal object they allow passes
    grades = tasks["simple_python_89"]
    (expected,) = grades.checker.calls  # type: ignore[union-attr]
    wanted = {"department": "Science", "school": "Bluebird HS"}
    allowed = expected.arguments["conditions"]
    assert wanted in allowed and {"department": "Science", "school": "Bluebird High School"} in allowed
