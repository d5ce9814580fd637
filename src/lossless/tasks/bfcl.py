"""BFCL v4 categories as task sets: the Berkeley Function-Calling Leaderboard's questions and answers
(Apache-2.0), read from the data files its ``bfcl-eval`` wheel ships.

The wheel is fetched once with ``pip download --no-deps`` (its own dependencies - model SDKs, vLLM,
sentence-transformers - are never installed; we only read its data), checked against a pinned sha256
and kept in the cache beside the embedded model; its JSON files are read from the zip.

- ``bfcl-simple``: ``simple_python``, 400 questions, one function offered, one call expected.
- ``bfcl-multiple``: ``multiple``, 200 questions, several functions offered, one call to the right one.
- ``bfcl-irrelevance``: ``irrelevance``, 240 questions no offered function answers: no call expected.

Converted as BFCL's own OpenAI handler converts them: its parameter types become JSON Schema's (dict ->
object, float -> number, tuple -> array, any -> string), and a "." in a function name becomes "_" (the
OpenAI API accepts only ``[A-Za-z0-9_-]``), in the tools offered and the calls expected alike. An
expected argument whose value is an object lists alternatives per key, as BFCL's answer files do; it is
expanded into the literal objects it allows, since our checker (calls.py) compares values literally.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import tempfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lossless import models
from lossless.atomic import atomic_path
from lossless.errors import UsageError
from lossless.tasks.calls import parse_calls
from lossless.tasks.checkers import ToolCalls
from lossless.tasks.task import Limits, Task
from lossless.tasks.tools import Tool

REQUIREMENT = "bfcl-eval==2026.3.23"
SHA256 = "3bb6dfa5f0c68ad403c9ec50b00db2bb3b4cc9b38ab1ff33f48fe30d853d3a0a"
CATEGORIES = {"bfcl-simple": "simple_python", "bfcl-multiple": "multiple", "bfcl-irrelevance": "irrelevance"}
TYPES = {
    "dict": "object",
    "float": "number",
    "tuple": "array",
    "any": "string",
    "list": "array",
    "bool": "boolean",
    "byte": "integer",
    "short": "integer",
    "long": "integer",
    "double": "number",
    "char": "string",
}
MAX_LITERALS = 64  # literal objects one expected object argument may expand into
LIMITS = Limits(max_steps=1, max_tokens=256, max_seconds=120.0)  # one answer: the calls, or none


def wheel_path() -> Path:
    return models.home() / "tasks" / f"{REQUIREMENT.replace('==', '-')}.whl"


def pull_wheel(*, quiet: bool = True) -> Path:
    """The bfcl-eval wheel in the cache, fetched first if it is not there."""
    target = wheel_path()
    if target.is_file():
        return target
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch = tempfile.TemporaryDirectory(dir=target.parent, prefix=".pull-")
    except OSError as exc:
        raise UsageError(f"cannot write the task cache {target.parent}: {exc.strerror or exc}") from exc
    with scratch as tmp:
        wheel = models.pip_download(REQUIREMENT, "the BFCL task data", Path(tmp), quiet=quiet)
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest != SHA256:
            raise UsageError(f"{REQUIREMENT}: the wheel has sha256 {digest}, expected {SHA256}")
        with atomic_path(target) as part:
            part.write_bytes(wheel.read_bytes())
    return target


def load_category(name: str) -> tuple[Task, ...]:
    """One of CATEGORIES' sets, as tasks with a tool_calls checker."""
    category = CATEGORIES[name]
    with zipfile.ZipFile(pull_wheel()) as wheel:
        questions = _lines(wheel, f"bfcl_eval/data/BFCL_v4_{category}.json")
        answers = (
            {}
            if category == "irrelevance"
            else {
                a["id"]: a["ground_truth"]
                for a in _lines(wheel, f"bfcl_eval/data/possible_answer/BFCL_v4_{category}.json")
            }
        )
    return tuple(task(q, answers.get(q["id"], [])) for q in questions)


def _lines(wheel: zipfile.ZipFile, member: str) -> list[dict[str, Any]]:
    text = wheel.read(member).decode("utf-8")
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def task(question: dict[str, Any], ground_truth: list[dict[str, Any]]) -> Task:
    """A BFCL entry (single-turn: ``question[0]`` is the conversation) and its answer -> a Task."""
    tools = tuple(_tool(f) for f in question["function"])
    calls = [
        {"name": openai_name(name), "arguments": {k: _alternatives(v) for k, v in args.items()}}
        for call in ground_truth
        for name, args in call.items()
    ]
    checker = ToolCalls(parse_calls(calls, f"BFCL {question['id']}", "calls"))
    return Task(question["id"], tuple(question["question"][0]), checker, tools, LIMITS)


def openai_name(name: str) -> str:
    return name.replace(".", "_")


def _tool(function: dict[str, Any]) -> Tool:
    parameters = schema(function.get("parameters", {"type": "dict", "properties": {}}))
    spec = {
        "type": "function",
        "function": {**function, "name": openai_name(function["name"]), "parameters": parameters},
    }
    # never called: a tool_calls task ends at the model's first answer, whose calls are the answer
    return Tool(openai_name(function["name"]), spec, 0.0, "none", table={})


def schema(node: Any) -> Any:
    """A BFCL parameter schema as JSON Schema: its type names mapped, everywhere they occur."""
    if isinstance(node, list):
        return [schema(item) for item in node]
    if not isinstance(node, dict):
        return node
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "type" and isinstance(value, str):
            out[key] = TYPES.get(value, value)
        elif key == "properties" and isinstance(value, dict):
            out[key] = {name: schema(sub) for name, sub in value.items()}
        elif key in ("items", "additionalProperties", "anyOf", "oneOf"):
            out[key] = schema(value)
        else:
            out[key] = value
    return out


def _alternatives(values: list[Any]) -> list[Any]:
    """An argument's allowed values, with each per-key-alternatives object expanded into literal ones."""
    return [literal for value in values for literal in itertools.islice(_literals(value), MAX_LITERALS)]


def _literals(value: Any) -> Iterator[Any]:
    if isinstance(value, dict):  # {key: [alternatives, "" when it may be absent]}
        keys = list(value)
        options = [value[k] if isinstance(value[k], list) else [value[k]] for k in keys]
        for combo in itertools.product(*([x for v in opts for x in _literals(v)] for opts in options)):
            yield {k: v for k, v in zip(keys, combo, strict=True) if v != ""}
    elif isinstance(value, list) and any(isinstance(item, dict) for item in value):
        yield from (list(combo) for combo in itertools.product(*(list(_literals(item)) for item in value)))
    else:
        yield value
