"""The calculator the built-in ``tools`` task set names (``lossless.tasks.calculator:calculator``).

It walks the expression's syntax tree and allows only numbers and arithmetic, so a model's argument is
never executed as Python.
"""

from __future__ import annotations

import ast
import operator
from collections.abc import Callable
from typing import Any

_BINARY: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.USub: operator.neg, ast.UAdd: operator.pos}
_MAX_EXPONENT = 1000  # 9**9**9 would take the process's memory and time


def calculator(expression: str) -> int | float:
    tree = ast.parse(expression.replace("^", "**").replace("×", "*").replace("÷", "/"), mode="eval")
    value = _evaluate(tree.body)
    return int(value) if isinstance(value, float) and value.is_integer() else value


def _evaluate(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > _MAX_EXPONENT:
            raise ValueError(f"exponent {right} is too large")
        return _BINARY[type(node.op)](left, right)
    raise ValueError(f"not arithmetic: {ast.unparse(node)}")


# The demo set's facts are made up, so that a model must look them up rather than remember them.
FACTS = {
    "stock:oslo": 1240,
    "stock:lima": 390,
    "stock:pune": 815,
    "price:widget": 4.75,
    "price:gadget": 20.0,
    "days:lima-oslo": 9,
    "days:oslo-pune": 6,
}
LOOKUP_LATENCY_S, CALCULATOR_LATENCY_S = 0.2, 0.1
SYSTEM = (
    "You help a company with widget warehouses in Oslo, Lima and Pune. Look facts up with the lookup "
    "tool and do arithmetic with the calculator tool; never guess. End with the final answer alone on "
    "the last line."
)


def _tools() -> list[dict[str, Any]]:
    lookup = {
        "name": "lookup",
        "description": "Look up a fact: stock:<warehouse> (widgets), price:<product> (euros each) "
        "or days:<from>-<to> (shipping time).",
        "parameters": {
            "type": "object",
            "properties": {"key": {"type": "string", "enum": sorted(FACTS)}},
            "required": ["key"],
            "additionalProperties": False,
        },
    }
    calculator_ = {
        "name": "calculator",
        "description": "Evaluate arithmetic: numbers, + - * / // % ** and parentheses, e.g. 12 * 4.75.",
        "parameters": {
            "type": "object",
            "properties": {"expression": {"type": "string"}},
            "required": ["expression"],
            "additionalProperties": False,
        },
    }
    table = [{"arguments": {"key": k}, "result": v} for k, v in FACTS.items()]
    return [
        {
            "type": "function",
            "function": lookup,
            "latency_s": LOOKUP_LATENCY_S,
            "results": table,
            "default": "not found",
        },
        {
            "type": "function",
            "function": calculator_,
            "latency_s": CALCULATOR_LATENCY_S,
            "implementation": "lossless.tasks.calculator:calculator",
        },
    ]


def _numeric(task_id: str, question: str, answer: float) -> dict[str, Any]:
    return {"id": task_id, "question": question, "checker": {"kind": "numeric", "answer": answer}}


def demo_specs() -> list[dict[str, Any]]:
    """The ``tools`` set as task-file objects (``sets.tools_demo`` parses them)."""
    json_schema = {
        "type": "object",
        "properties": {"warehouse": {"enum": ["Pune", "pune", "PUNE"]}, "stock": {"const": 815}},
        "required": ["warehouse", "stock"],
        "additionalProperties": False,
    }
    both = [{"name": "lookup", "arguments": {"key": [k]}} for k in ("stock:oslo", "stock:lima")]
    items = [
        _numeric("stock-oslo", "How many widgets are in stock in Oslo?", 1240),
        _numeric("stock-total", "How many widgets are in stock in Oslo and Lima together?", 1630),
        _numeric("order-cost", "What do 12 widgets cost at their list price, in euros?", 57),
        _numeric("discount", "What does one gadget cost after a 15% discount, in euros?", 17),
        _numeric("route", "How many days does shipping take from Lima to Pune by way of Oslo?", 15),
        _numeric("multiply", "What is 1234 times 5678?", 7006652),
        {
            "id": "most-stock",
            "question": "Which warehouse holds the most widgets? Answer with its name only.",
            "checker": {"kind": "regex", "pattern": r"(?:^|\n)\W*oslo\W*$", "ignore_case": True},
            "reference": "Oslo",
        },
        {
            "id": "both-stocks",
            "question": "Look up the widget stock of Oslo and of Lima, both at once.",
            "checker": {"kind": "tool_calls", "calls": both},
            "max_steps": 1,
        },
        {
            "id": "pune-json",
            "question": 'Reply with only a JSON object {"warehouse": <name>, "stock": '
            "<widgets in stock there>} for Pune.",
            "checker": {"kind": "json_schema", "schema": json_schema},
            "reference": '{"warehouse": "Pune", "stock": 815}',
        },
    ]
    return [_spec(item) for item in items]


def _spec(item: dict[str, Any]) -> dict[str, Any]:
    checker = item["checker"]
    reference = item.get("reference", f"{checker.get('answer', '')}")
    return {
        "id": f"tools-{item['id']}",
        "messages": [{"role": "system", "content": SYSTEM}, {"role": "user", "content": item["question"]}],
        "tools": _tools(),
        "checker": checker,
        "limits": {"max_steps": item.get("max_steps", 6), "max_tokens": 2048, "max_seconds": 120},
        "reference": reference if checker["kind"] != "tool_calls" else None,
    }
