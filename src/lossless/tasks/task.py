"""A task: what the model is asked, with which tools, how success is checked, and its limits.

A task file is JSON Lines, one task per line (blank lines skipped)::

    {"id": "stock-total",
     "messages": [{"role": "system", "content": "Use the tools."},
                  {"role": "user", "content": "How many widgets are in Oslo and Lima together?"}],
     "tools": [{"type": "function",
                "function": {"name": "lookup", "description": "...", "parameters": {...}},
                "latency_s": 0.2,
                "results": [{"arguments": {"key": "stock:oslo"}, "result": 1240}],
                "default": "not found"},
               {"type": "function", "function": {"name": "calculator", ...},
                "latency_s": 0.1, "implementation": "lossless.tasks.calculator:calculator"}],
     "checker": {"kind": "numeric", "answer": 1630},
     "limits": {"max_steps": 6, "max_tokens": 2048, "max_seconds": 120},
     "reference": "1630"}

- ``id`` (string, unique in the file) and ``messages`` (OpenAI chat messages: objects with a ``role``
  among system, developer, user, assistant and tool) are required, and so is ``checker`` (its kinds:
  ``checkers.py``).
- ``tools`` (optional): OpenAI function tools plus ``latency_s`` (seconds a call takes; default 0) and
  exactly one of ``results`` (a table of arguments -> result, with an optional ``default`` for arguments
  not in it) or ``implementation`` (``module:function`` or ``file.py:function`` beside the task file);
  see ``tools.py``.
- ``limits`` (optional): ``max_steps`` model calls in the agent loop [8], ``max_tokens`` output tokens
  over all of them [4096], ``max_seconds`` wall time of the whole task, tool latency included [300].
- ``reference`` (optional): an answer known to pass the checker, so that a task set can test itself.

Unknown fields are refused; every error names the file, the line and the field.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lossless.tasks.checkers import Checker, parse_checker
from lossless.tasks.fields import as_object, count, fail, number, only, shown, take
from lossless.tasks.tools import Tool, parse_tool

_KEYS = ("id", "messages", "tools", "checker", "limits", "reference")
_ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass(frozen=True)
class Limits:
    max_steps: int = 8  # model calls in the agent loop
    max_tokens: int = 4096  # output tokens over all steps
    max_seconds: float = 300.0  # wall time of the whole task, tool latency included


@dataclass(frozen=True)
class Task:
    id: str
    messages: tuple[Mapping[str, Any], ...]  # the conversation's opening, OpenAI chat format
    checker: Checker
    tools: tuple[Tool, ...] = ()
    limits: Limits = field(default_factory=Limits)
    reference: str | None = None  # an answer that passes the checker

    def tool_specs(self) -> list[dict[str, Any]]:
        """The request's ``tools`` field (empty: send none)."""
        return [dict(t.spec) for t in self.tools]

    def tool(self, name: str) -> Tool | None:
        return next((t for t in self.tools if t.name == name), None)


def load_tasks(path: str | Path) -> tuple[Task, ...]:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        fail(str(path), "", f"cannot read the task file: {getattr(exc, 'strerror', None) or exc}")
    tasks: list[Task] = []
    seen: dict[str, int] = {}
    for number_, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        where = f"{path}:{number_}"
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            fail(where, "", f"not valid JSON: {exc.msg} at column {exc.colno}")
        task = parse_task(value, where, path.parent)
        if task.id in seen:
            fail(where, "id", f"{task.id!r} is already the id of line {seen[task.id]}")
        seen[task.id] = number_
        tasks.append(task)
    if not tasks:
        fail(str(path), "", "no tasks in the file")
    return tuple(tasks)


def parse_task(value: Any, where: str, base: Path | None = None) -> Task:
    """One task from its JSON object; ``base``: where ``file.py:function`` tools are looked for."""
    obj = as_object(value, where, "")
    only(obj, _KEYS, where, "")
    task_id = take(obj, "id", str, where, "")
    if not task_id.strip():
        fail(where, "id", "must not be empty")
    messages = _messages(take(obj, "messages", list, where, ""), where)
    raw_tools = take(obj, "tools", list, where, "", [])
    tools = tuple(parse_tool(t, where, f"tools[{i}]", base or Path.cwd()) for i, t in enumerate(raw_tools))
    names = [t.name for t in tools]
    if dupes := sorted({n for n in names if names.count(n) > 1}):
        fail(where, "tools", f"two tools are named {dupes[0]!r}")
    return Task(
        id=task_id,
        messages=messages,
        checker=parse_checker(take(obj, "checker", dict, where, ""), where),
        tools=tools,
        limits=_limits(take(obj, "limits", dict, where, "", {}), where),
        reference=take(obj, "reference", (str, type(None)), where, "", None),
    )


def _messages(items: list[Any], where: str) -> tuple[Mapping[str, Any], ...]:
    if not items:
        fail(where, "messages", "must hold at least one message")
    for i, item in enumerate(items):
        name = f"messages[{i}]"
        message = as_object(item, where, name)
        role = take(message, "role", str, where, name)
        if role not in _ROLES:
            fail(where, f"{name}.role", f"{shown(role)} is not one of {', '.join(_ROLES)}")
        if role != "assistant":  # an assistant turn may carry only tool_calls
            take(message, "content", (str, list), where, name)
    return tuple(items)


def _limits(obj: Mapping[str, Any], where: str) -> Limits:
    only(obj, ("max_steps", "max_tokens", "max_seconds"), where, "limits")
    default = Limits()
    return Limits(
        max_steps=count(obj, "max_steps", where, "limits", default.max_steps),
        max_tokens=count(obj, "max_tokens", where, "limits", default.max_tokens),
        max_seconds=number(obj, "max_seconds", where, "limits", default.max_seconds, minimum=0.001),
    )
