"""Reading one JSON object of a task file, with one-line errors that name the file, line and field.

``where`` is ``"path:line"`` (or a built-in set's name and task id); ``name`` is the dotted field
path inside the task (``"checker.answer"``, ``"tools[1].latency_s"``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NoReturn

from lossless.errors import UsageError

_MISSING: Any = object()
_TYPE_NAMES = {str: "a string", int: "an integer", float: "a number", bool: "true or false"}
_TYPE_NAMES |= {list: "a list", dict: "an object"}


def fail(where: str, name: str, problem: str) -> NoReturn:
    raise UsageError(f"{where}: {name}: {problem}" if name else f"{where}: {problem}")


def shown(value: Any, limit: int = 60) -> str:
    """A value as an error message quotes it: one line, bounded."""
    text = " ".join(repr(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def join(prefix: str, key: str) -> str:
    return f"{prefix}.{key}" if prefix else key


def as_object(value: Any, where: str, name: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        fail(where, name, f"expected an object, got {shown(value)}")
    return value


def only(obj: Mapping[str, Any], known: tuple[str, ...], where: str, prefix: str) -> None:
    """Unknown keys are refused: a misspelt limit or option would otherwise be silently ignored."""
    for key in obj:
        if key not in known:
            fail(where, join(prefix, key), f"unknown field (known: {', '.join(known)})")


def take(
    obj: Mapping[str, Any],
    key: str,
    kind: type | tuple[type, ...],
    where: str,
    prefix: str,
    default: Any = _MISSING,
) -> Any:
    name = join(prefix, key)
    if key not in obj:
        if default is _MISSING:
            fail(where, name, "missing")
        return default
    value = obj[key]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # JSON's true/false are Python ints: a bool is only accepted where a bool is asked for.
    wrong_bool = isinstance(value, bool) and bool not in kinds
    if wrong_bool or not isinstance(value, kinds):
        wanted = " or ".join(_TYPE_NAMES.get(k, k.__name__) for k in kinds)
        fail(where, name, f"expected {wanted}, got {shown(value)}")
    return value


def number(
    obj: Mapping[str, Any], key: str, where: str, prefix: str, default: Any = _MISSING, minimum: float = 0.0
) -> float:
    value = take(obj, key, (int, float), where, prefix, default)
    if value < minimum:
        fail(where, join(prefix, key), f"must be at least {minimum:g}, got {shown(value)}")
    return float(value)


def count(obj: Mapping[str, Any], key: str, where: str, prefix: str, default: Any = _MISSING) -> int:
    value = take(obj, key, int, where, prefix, default)
    if value < 1:
        fail(where, join(prefix, key), f"must be a positive integer, got {shown(value)}")
    return int(value)
