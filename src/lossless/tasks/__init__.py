"""Tasks, not tokens: what a model is asked to get done, and how success is checked.

options.py        ``TasksOptions``: what ``lossless tasks`` was asked, every default
run.py            ``run()``: every task on every endpoint -> ``TasksResult`` (report/tasks.py renders it)
task.py           ``Task``, ``Limits``: the task file (JSON Lines) and its loader
tools.py          ``Tool``: a task's tools, answered from a table or a named function, with latency
checkers.py       ``check()``: exact, numeric, regex, json_schema, tool_calls and python_tests checks
calls.py          ``match_calls()``: expected tool calls matched on structure (BFCL's rules)
fields.py         one JSON object of a task file read field by field, with one-line errors
sandbox.py        ``run_python()``: candidate code plus unit tests in a limited child process
sandbox_boot.py   the first code the sandbox's child runs: its limits, then the program
sets.py           ``load_set()``: built-in sets: humaneval (its wheel), arithmetic, tools, bfcl-*
bfcl.py           ``load_category()``: BFCL's categories as task sets, from the wheel that ships them
calculator.py     ``calculator()``: the function the built-in tools set's calls run
runner.py         ``run_task()``: the agent loop: model -> tool calls -> results -> model; retries, repairs
spent.py          ``Spent``, ``Prices``: what one task spent (calls, tokens, time, USD) -> its ``TaskRun``
tally.py          ``tally_endpoint()``, ``compare_tasks()``: per endpoint (Wilson, pass@k, cost) and paired
result.py         ``TaskRun``, ``TasksResult`` and their parts
"""

from __future__ import annotations

from lossless.tasks.checkers import Checker, CheckResult, check, parse_checker
from lossless.tasks.sandbox import SandboxLimits, SandboxResult, run_python
from lossless.tasks.sets import SETS, load_set
from lossless.tasks.task import Limits, Task, load_tasks, parse_task
from lossless.tasks.tools import Tool, ToolResult

__all__ = [
    "SETS",
    "CheckResult",
    "Checker",
    "Limits",
    "SandboxLimits",
    "SandboxResult",
    "Task",
    "Tool",
    "ToolResult",
    "check",
    "load_set",
    "load_tasks",
    "parse_checker",
    "parse_task",
    "run_python",
]
