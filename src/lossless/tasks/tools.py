"""A task's tools: what the model is shown (OpenAI function-tool format) and how a call is answered.

Answers are deterministic, so two endpoints given the same calls get the same results: either looked up
in a table from the task file (arguments -> result) or computed by a Python function the user names
(``package.module:function``, or ``file.py:function`` relative to the task file), called with the
arguments as keyword arguments. Each tool states a latency in seconds; the runner waits it out per call
so that tool time is part of task time. A call that cannot be answered (arguments not JSON, not in the
table, the function raising) gives an error result, which goes back to the model as the tool message.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from lossless.tasks.fields import as_object, fail, join, number, only, shown, take

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # what the OpenAI API accepts as a function name
_KEYS = ("type", "function", "latency_s", "results", "default", "implementation")
_NO_DEFAULT: Any = object()


@dataclass(frozen=True)
class ToolResult:
    content: str  # the tool message's content
    error: bool = False


@dataclass(frozen=True)
class Tool:
    name: str
    spec: Mapping[str, Any]  # {"type": "function", "function": {...}}: what the request's `tools` carries
    latency_s: float  # seconds the runner waits per call
    source: str  # "table", or the "module:function" it calls
    table: Mapping[str, Any] | None = None  # canonical(arguments) -> result
    default: Any = _NO_DEFAULT  # the result for arguments not in the table
    function: Callable[..., Any] | None = None

    def call(self, arguments: str | Mapping[str, Any]) -> ToolResult:
        try:
            parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
        except json.JSONDecodeError as exc:
            return ToolResult(f"error: arguments are not valid JSON ({exc.msg})", error=True)
        if not isinstance(parsed, dict):
            return ToolResult("error: arguments must be a JSON object", error=True)
        if self.function is not None:
            try:
                return ToolResult(_content(self.function(**parsed)))
            except Exception as exc:  # the tool's failure is the model's observation, not ours
                return ToolResult(f"error: {type(exc).__name__}: {exc}", error=True)
        key = canonical(parsed)
        if self.table is not None and key in self.table:
            return ToolResult(_content(self.table[key]))
        if self.default is not _NO_DEFAULT:
            return ToolResult(_content(self.default))
        return ToolResult(f"error: no result for arguments {key}", error=True)


def arguments_valid(tool: Tool | None, arguments: str) -> bool:
    """Whether a call's arguments are a JSON object that its function's ``parameters`` schema accepts
    (the K2 Vendor Verifier's schema accuracy); a call to a tool not offered is not."""
    from lossless.tasks.checkers import load_jsonschema

    try:
        parsed = json.loads(arguments)
    except (ValueError, RecursionError):
        return False
    if tool is None or not isinstance(parsed, dict):
        return False
    jsonschema = load_jsonschema()
    try:
        jsonschema.validate(parsed, tool.spec["function"].get("parameters") or {"type": "object"})
    except jsonschema.ValidationError:
        return False
    except jsonschema.SchemaError:  # the task's own schema is broken: the call cannot be blamed
        return True
    return True


def canonical(arguments: Any) -> str:
    """One text per argument value: keys sorted, 2.0 written as 2."""

    def plain(v: Any) -> Any:
        if isinstance(v, float) and v.is_integer():
            return int(v)
        if isinstance(v, dict):
            return {k: plain(x) for k, x in v.items()}
        return [plain(x) for x in v] if isinstance(v, list) else v

    return json.dumps(plain(arguments), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def _content(result: Any) -> str:
    return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


def parse_tool(value: Any, where: str, prefix: str, base: Path) -> Tool:
    obj = as_object(value, where, prefix)
    only(obj, _KEYS, where, prefix)
    if take(obj, "type", str, where, prefix, "function") != "function":
        fail(where, join(prefix, "type"), "only 'function' tools are supported")
    function = as_object(take(obj, "function", dict, where, prefix), where, join(prefix, "function"))
    name = take(function, "name", str, where, join(prefix, "function"))
    if not _NAME.fullmatch(name):
        fail(where, join(prefix, "function.name"), f"{shown(name)}: use 1-64 letters, digits, _ or -")
    take(function, "parameters", dict, where, join(prefix, "function"), {})
    latency = number(obj, "latency_s", where, prefix, 0.0)
    spec = {"type": "function", "function": function}
    has_table, has_code = "results" in obj, "implementation" in obj
    if has_table == has_code:
        fail(where, prefix, "give exactly one of 'results' (a table) and 'implementation' (module:function)")
    if has_code:
        if "default" in obj:
            fail(where, join(prefix, "default"), "only a results table takes a default")
        target = take(obj, "implementation", str, where, prefix)
        implementation = _function(target, base, where, join(prefix, "implementation"))
        return Tool(name, spec, latency, target, function=implementation)
    table = _table(take(obj, "results", list, where, prefix), where, join(prefix, "results"))
    return Tool(name, spec, latency, "table", table=table, default=obj.get("default", _NO_DEFAULT))


def _table(rows: list[Any], where: str, prefix: str) -> dict[str, Any]:
    table: dict[str, Any] = {}
    for i, row in enumerate(rows):
        name = f"{prefix}[{i}]"
        entry = as_object(row, where, name)
        only(entry, ("arguments", "result"), where, name)
        key = canonical(take(entry, "arguments", dict, where, name))
        if key in table:
            fail(where, join(name, "arguments"), f"{key} is already in the table")
        if "result" not in entry:
            fail(where, join(name, "result"), "missing")
        table[key] = entry["result"]
    return table


def _function(target: str, base: Path, where: str, name: str) -> Callable[..., Any]:
    module_name, _, attribute = target.partition(":")
    if not module_name or not attribute:
        fail(where, name, f"{shown(target)}: expected module:function or file.py:function")
    try:
        module = _load(str((base / module_name).resolve())) if module_name.endswith(".py") else None
        module = module or importlib.import_module(module_name)
    except Exception as exc:  # whatever importing the user's module raises, said on one line
        fail(where, name, f"cannot import {module_name}: {type(exc).__name__}: {' '.join(str(exc).split())}")
    found = getattr(module, attribute, None)
    if not callable(found):
        fail(where, name, f"{module_name} has no function {attribute!r}")
    return found


@functools.cache  # every task of a file names the same module: import it once
def _load(path: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"lossless_task_tools_{abs(hash(path))}", path)
    if spec is None or spec.loader is None:
        raise ImportError(f"not a Python file: {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
