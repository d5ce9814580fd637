"""The package's shape, held by a test: no import circle, no module over 400 lines, no function over 60.

An import counts wherever it stands (a lazy import inside a function too: it still ties the two modules
together), except under ``if TYPE_CHECKING:``, which never runs.
"""

from __future__ import annotations

import ast
from pathlib import Path

import lossless

ROOT = Path(lossless.__file__).parent
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 60


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = ("lossless", *path.relative_to(ROOT).with_suffix("").parts)
        found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imported(name: str, tree: ast.AST) -> set[str]:
    """The lossless modules that module ``name`` imports."""
    package = name if MODULES[name].name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(node: ast.AST) -> None:
        if isinstance(node, ast.If) and _is_type_checking(node):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name in MODULES)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*up, base] if base else up)
            for alias in node.names:  # `from lossless.report import files` imports a module
                target = f"{base}.{alias.name}"
                found.add(target if target in MODULES else base)
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return {m for m in found if m in MODULES and m != name}


def _circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            connect(v)
    return found


def _graph() -> dict[str, set[str]]:
    return {name: _imported(name, ast.parse(path.read_text())) for name, path in MODULES.items()}


def test_no_import_circles() -> None:
    assert _circles(_graph()) == []


def test_the_circle_finder_finds_a_circle() -> None:
    """The check above can fail: a circle of three, beside a module outside it."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert _circles(graph) == [["a", "b", "c"]]


def test_lazy_imports_count_and_type_checking_ones_do_not() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from lossless.bench import plan\n"
        "def f():\n    from lossless.report import files\n"
    )
    assert _imported("lossless.cli.common", tree) == {"lossless.report.files"}


def test_modules_and_functions_are_small() -> None:
    too_long = []
    for name, path in MODULES.items():
        text = path.read_text()
        if (lines := len(text.splitlines())) > MAX_MODULE_LINES:
            too_long.append(f"{name}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                length = (node.end_lineno or node.lineno) - node.lineno + 1
                if length > MAX_FUNCTION_LINES:
                    too_long.append(f"{name}.{node.name}: {length} lines")
    assert too_long == []


def test_test_modules_have_names_of_their_own() -> None:
    # pytest imports test files by basename (no __init__.py): two of one name break the whole collection
    tests = Path(__file__).parents[1]
    seen: dict[str, list[str]] = {}
    for path in tests.glob("*/test_*.py"):
        seen.setdefault(path.name, []).append(str(path.relative_to(tests)))
    assert {name: where for name, where in seen.items() if len(where) > 1} == {}
