"""Expected tool calls, matched on structure as the Berkeley Function-Calling Leaderboard (BFCL) does.

A call matches an expected one when its name is the same, its arguments are a JSON object, every
expected argument is present with a value among that argument's alternatives, and it has no argument
the expectation does not name. An empty string among the alternatives marks the argument optional (it
may be absent), as in BFCL's answer files. Values compare structurally: numbers by value (an integer
where a float is expected is fine, a boolean is never a number), strings ignoring case, white space and
the punctuation ``, . / - _ * ^``, lists item by item, objects key by key. Several calls (parallel calls)
match in any order: each expected call must pair with a different actual one.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lossless.tasks.fields import as_object, fail, join, only, shown, take

_IGNORED = re.compile(r"[\s,./\-_*^]")


@dataclass(frozen=True)
class ExpectedCall:
    name: str
    arguments: Mapping[str, tuple[Any, ...]]  # argument -> allowed values; "" among them: may be absent


def parse_calls(value: Any, where: str, prefix: str) -> tuple[ExpectedCall, ...]:
    if not isinstance(value, list):
        fail(where, prefix, f"expected a list of calls, got {shown(value)}")
    calls = []
    for i, item in enumerate(value):
        name = f"{prefix}[{i}]"
        obj = as_object(item, where, name)
        only(obj, ("name", "arguments"), where, name)
        arguments = as_object(take(obj, "arguments", dict, where, name, {}), where, join(name, "arguments"))
        for key, alternatives in arguments.items():
            if not isinstance(alternatives, list) or not alternatives:
                problem = f"expected a non-empty list of allowed values, got {shown(alternatives)}"
                fail(where, join(name, f"arguments.{key}"), problem)
        allowed = {key: tuple(alternatives) for key, alternatives in arguments.items()}
        calls.append(ExpectedCall(take(obj, "name", str, where, name), allowed))
    return tuple(calls)


def actual_call(call: Mapping[str, Any]) -> tuple[str, Any]:
    """(name, arguments as given): takes ``{name, arguments}`` or an OpenAI ``tool_calls`` item."""
    inner = call.get("function", call)
    return str(inner.get("name", "")), inner.get("arguments")


def mismatch(expected: ExpectedCall, call: Mapping[str, Any]) -> str | None:
    """Why ``call`` does not match ``expected``; None when it does."""
    name, raw = actual_call(call)
    if name != expected.name:
        return f"name {name!r} is not {expected.name!r}"
    try:
        arguments = json.loads(raw) if isinstance(raw, str) else raw
    except json.JSONDecodeError as exc:
        return f"arguments are not valid JSON ({exc.msg} at column {exc.colno})"
    if not isinstance(arguments, dict):
        return f"arguments are not a JSON object: {shown(raw)}"
    for key in arguments:
        if key not in expected.arguments:
            return f"unexpected argument {key!r}"
    for key, allowed in expected.arguments.items():
        if key not in arguments:
            if "" not in allowed:
                return f"argument {key!r} is missing"
        elif not any(same(option, arguments[key]) for option in allowed if option != ""):
            return f"argument {key!r}: {shown(arguments[key])} is not among {shown(list(allowed))}"
    return None


def same(expected: Any, actual: Any) -> bool:
    if isinstance(expected, bool) or isinstance(actual, bool):
        return type(expected) is type(actual) and expected == actual
    if isinstance(expected, int | float) and isinstance(actual, int | float):
        return bool(expected == actual)
    if isinstance(expected, str) and isinstance(actual, str):
        return _IGNORED.sub("", expected).casefold() == _IGNORED.sub("", actual).casefold()
    if isinstance(expected, list) and isinstance(actual, list):
        return len(expected) == len(actual) and all(map(same, expected, actual))
    if isinstance(expected, dict) and isinstance(actual, dict):
        return expected.keys() == actual.keys() and all(same(v, actual[k]) for k, v in expected.items())
    return bool(expected is None and actual is None)


def match_calls(
    expected: Sequence[ExpectedCall], calls: Sequence[Mapping[str, Any]]
) -> tuple[bool, str, dict[str, Any]]:
    """(passed, one-line reason, details) for the calls a model made against those expected."""
    names = [actual_call(c)[0] for c in calls]
    details: dict[str, Any] = {"expected": [e.name for e in expected], "called": names}
    if len(calls) != len(expected):
        return (
            False,
            f"expected {len(expected)} tool calls, got {len(calls)} ({', '.join(names) or 'none'})",
            details,
        )
    why = [[mismatch(e, c) for c in calls] for e in expected]
    pairs = _pairs([[j for j, w in enumerate(row) if w is None] for row in why])
    if len(pairs) == len(expected):
        details["pairs"] = sorted(pairs.items())
        return True, f"all {len(expected)} expected tool calls made", details
    missing = min(set(range(len(expected))) - set(pairs))
    name = expected[missing].name
    unpaired = "its matching call is paired with another expected call"
    unpaired = unpaired if name in names else f"no call to it (got {', '.join(names)})"
    reason = next((w for j, w in enumerate(why[missing]) if names[j] == name and w is not None), unpaired)
    return False, f"expected call {name}: {reason}", details


def _pairs(fits: list[list[int]]) -> dict[int, int]:
    """A largest pairing of expected calls to the actual calls each fits (augmenting paths)."""
    taken: dict[int, int] = {}  # actual -> expected

    def place(e: int, seen: set[int]) -> bool:
        for a in fits[e]:
            if a not in seen:
                seen.add(a)
                if a not in taken or place(taken[a], seen):
                    taken[a] = e
                    return True
        return False

    for e in range(len(fits)):
        place(e, set())
    return {e: a for a, e in taken.items()}
