"""The package's shape, held by a test: layers one way, no import circle, small modules, honest maps.

A room is a top-level package or module of ``lossless`` (``bench/``, ``rundir.py``). The rooms stand in
``LAYERS``, top first: a module imports its own room, or rooms of lower layers, never a room of its own
layer or one above (inside ``engine/`` and ``server/``, their parts stand the same way in ``ENGINE`` and
``SERVER``). An import counts
wherever it stands (a lazy import inside a function too: it still ties the two modules together),
except under ``if TYPE_CHECKING:``, which never runs.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import lossless

ROOT = Path(lossless.__file__).parent
MAX_MODULE_LINES, MAX_FUNCTION_LINES = 400, 60

LAYERS: tuple[tuple[str, ...], ...] = (
    ("cli",),  # the command line: flags -> a command's options -> its run -> report
    ("demo",),  # the whole story in one command: bench, verify and their report
    ("report",),  # what a person sees of every command's result: tables, JSON, HTML
    # the commands; two stand on others: watch runs bench on a schedule, and inspect's precision claim
    # asks endpoints for log-probabilities as verify does (verify.collect, verify.detect)
    # sweep runs bench at each server configuration
    ("watch", "inspect", "advise", "probe", "draft", "sweep"),
    ("bench", "verify"),  # verify --tasks runs the tasks' agent loop
    ("tasks",),
    # shared machinery: the endpoints or the embedded model served; a run folder read and written
    ("provision", "rundir"),
    ("client", "analyze"),  # the only edge to the network; records -> numbers
    ("server",),  # the OpenAI-compatible server over the engine
    ("engine",),  # the model, its weights and kernels, speculative decoding
    ("models", "validate"),  # the ground: the model cache; checks of what a user gives
    ("console", "atomic", "records"),  # stderr for people; files written whole; one record per request
    ("lossless",),  # the package's face: its version and error types
    ("errors",),  # the one error tree
)
ENGINE: tuple[tuple[str, ...], ...] = (  # engine/'s parts, top first
    ("compile_cache",),  # an Engine's compiled graphs on disk, and made while it serves
    ("engine",),  # engine.py: the Engine the server drives
    ("batch",),  # continuous batching, speculating inside the batch
    ("speculate",),  # drafters and exact acceptance
    ("weights",),  # checkpoints read, int4 blocks and their kernels
    ("model",),  # the network, sampling, generation, the tokenizer
    ("cpu", "torch_thread"),  # what this CPU computes; torch work on threads that end with it
)
SERVER: tuple[tuple[str, ...], ...] = (  # server/'s parts, top first
    ("launch", "precompile"),  # the server inside another command; the compile child process
    ("main",),  # lossless serve: the model loaded, the socket bound, uvicorn run
    ("compiling",),  # --compile background|wait
    ("http",),  # the ASGI app, its limits, the queue and its worker thread, /metrics
    ("dialects",),  # the APIs translated into chat requests
    ("openai",),  # OpenAI's chat and completions
    ("jobs", "options"),  # a request's work for the engine thread; what lossless serve was asked
)


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
            for alias in node.names:  # `from lossless.report import html` imports a module
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


def _room(module: str, depth: int = 1) -> str:
    """``lossless.bench.loop`` -> ``bench``; ``lossless`` itself -> ``lossless``; with depth 2, the part
    of a room (``lossless.engine.model.sampling`` -> ``model``)."""
    parts = module.split(".")
    return parts[depth] if len(parts) > depth else parts[-1]


def _against_the_layers(
    graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...], depth: int = 1, inside: str = ""
) -> list[str]:
    """Every import from a room to one of its own layer or above, as "a -> b (room a, layer i -> room
    b, layer j)". ``inside``: only the modules of that package, their parts placed by ``layers``."""
    tier = {room: i for i, rooms in enumerate(layers) for room in rooms}
    wrong = []
    for a, targets in sorted(graph.items()):
        if not a.startswith(inside):
            continue
        for b in sorted(targets):
            if not b.startswith(inside):
                continue
            ra, rb = _room(a, depth), _room(b, depth)
            if ra != rb and tier[ra] >= tier[rb]:
                wrong.append(f"{a} -> {b} ({ra}, layer {tier[ra]} -> {rb}, layer {tier[rb]})")
    return wrong


def test_no_import_circles() -> None:
    assert _circles(_graph()) == []


def test_the_circle_finder_finds_a_circle() -> None:
    """The check above can fail: a circle of three, beside a module outside it."""
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    assert _circles(graph) == [["a", "b", "c"]]


def test_every_room_stands_in_one_layer() -> None:
    listed = [room for rooms in LAYERS for room in rooms]
    assert len(listed) == len(set(listed))
    assert {_room(m) for m in MODULES} == set(listed)
    engine = [part for parts in ENGINE for part in parts]
    assert {_room(m, 2) for m in MODULES if m.startswith("lossless.engine.")} == set(engine)
    server = [part for parts in SERVER for part in parts]
    assert {_room(m, 2) for m in MODULES if m.startswith("lossless.server.")} == set(server)


def test_imports_run_down_the_layers() -> None:
    graph = _graph()
    assert _against_the_layers(graph, LAYERS) == []
    assert _against_the_layers(graph, ENGINE, depth=2, inside="lossless.engine.") == []
    assert _against_the_layers(graph, SERVER, depth=2, inside="lossless.server.") == []


def test_an_import_up_or_sideways_is_caught() -> None:
    """The check above can fail: the engine importing the CLI, and two commands of one layer."""
    graph = {
        "lossless.engine.engine": {"lossless.cli.common", "lossless.errors"},
        "lossless.probe.run": {"lossless.inspect.run", "lossless.client.wire"},
        "lossless.engine.model.sampling": {"lossless.engine.speculate.spec"},
    }
    assert _against_the_layers(graph, LAYERS) == [
        "lossless.engine.engine -> lossless.cli.common (engine, layer 9 -> cli, layer 0)",
        "lossless.probe.run -> lossless.inspect.run (probe, layer 3 -> inspect, layer 3)",
    ]
    assert _against_the_layers(graph, ENGINE, depth=2, inside="lossless.engine.") == [
        "lossless.engine.model.sampling -> lossless.engine.speculate.spec "
        "(model, layer 5 -> speculate, layer 3)"
    ]


def test_lazy_imports_count_and_type_checking_ones_do_not() -> None:
    tree = ast.parse(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from lossless.bench import run\n"
        "def f():\n    from lossless.report import html\n"
    )
    assert _imported("lossless.cli.common", tree) == {"lossless.report.html"}


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


# --- package maps -------------------------------------------------------------------------------------

# a map's line: "name.py" or "name/" at the line's start, two spaces or more, then what it offers
_ENTRY = re.compile(r"^([a-z_0-9]+(?:\.py|/))\s{2,}(\S.*)$")
_NAMED = re.compile(r"``([A-Za-z_][A-Za-z_0-9]*)(?:\(\))?``")  # ``run()`` or ``BenchOptions``


def _defined(path: Path) -> set[str]:
    """The names a module defines or imports at its top level."""
    names: set[str] = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def map_problems(package: Path, where: str) -> list[str]:
    """What a package's ``__init__`` map gets wrong (``where``: the package's name in messages): a file or
    folder it lists that is not there, one that is there and not listed, a name it says a module offers
    that the module does not define."""
    doc = ast.get_docstring(ast.parse((package / "__init__.py").read_text())) or ""
    listed = {m.group(1): m.group(2) for line in doc.splitlines() if (m := _ENTRY.match(line))}
    present = {p.name for p in package.glob("*.py") if p.name != "__init__.py"}
    present |= {f"{p.name}/" for p in package.iterdir() if (p / "__init__.py").is_file()}
    problems = [f"{where}: lists {entry}, which is not there" for entry in sorted(set(listed) - present)]
    problems += [f"{where}: does not list {entry}" for entry in sorted(present - set(listed))]
    for entry, text in sorted(listed.items()):
        if entry.endswith(".py") and entry in present:
            missing = set(_NAMED.findall(text)) - _defined(package / entry)
            problems += [f"{where}/{entry}: offers no {name}" for name in sorted(missing)]
    return problems


def test_every_package_map_is_true_and_whole() -> None:
    packages = sorted(p.parent for p in ROOT.rglob("__init__.py"))
    assert len(packages) > 20
    assert [problem for p in packages for problem in map_problems(p, str(p.relative_to(ROOT.parent)))] == []


def test_a_wrong_map_is_caught(tmp_path: Path) -> None:
    """The check above can fail: a map naming a file that is gone and a name its module lacks, and
    silent about a file that is there."""
    (tmp_path / "__init__.py").write_text(
        '"""A probe.\n\nkept.py  ``kept()`` and ``gone``\nold.py  gone\n"""\n'
    )
    (tmp_path / "kept.py").write_text("def kept() -> None: ...\n")
    (tmp_path / "new.py").write_text("")
    assert map_problems(tmp_path, "probe") == [
        "probe: lists old.py, which is not there",
        "probe: does not list new.py",
        "probe/kept.py: offers no gone",
    ]


def test_test_modules_have_names_of_their_own() -> None:
    # pytest imports test files by basename (no __init__.py): two of one name break the whole collection
    tests = Path(__file__).parents[1]
    seen: dict[str, list[str]] = {}
    for path in tests.rglob("test_*.py"):
        seen.setdefault(path.name, []).append(str(path.relative_to(tests)))
    assert {name: where for name, where in seen.items() if len(where) > 1} == {}


# --- benchmarks ---------------------------------------------------------------------------------------

REPO = Path(__file__).parents[2]


def benchmark_problems(folder: Path, ours: set[str]) -> list[str]:
    """A benchmark imports ``lossless`` and ``support`` (benchmarks/support.py) of this repository, and
    leaves ``sys.path`` alone: each import of another of ``ours`` (the repository's module names), and
    each use of ``sys.path``, outside support.py."""
    problems = []
    for path in sorted(folder.glob("*.py")):
        if path.name == "support.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom):
                names = [node.module or "."] if not node.level else ["."]
            problems += [f"{path.name} imports {n}" for n in names if n.split(".")[0] in ours | {"."}]
            if isinstance(node, ast.Attribute) and node.attr == "path" and ast.unparse(node.value) == "sys":
                problems.append(f"{path.name} uses sys.path")
    return sorted(problems)


def test_benchmarks_import_lossless_and_their_support_only() -> None:
    ours = {p.stem for p in [*(REPO / "benchmarks").glob("*.py"), *(REPO / "tests" / "support").glob("*.py")]}
    assert benchmark_problems(REPO / "benchmarks", ours - {"support"}) == []


def test_a_benchmark_reaching_past_its_support_is_caught(tmp_path: Path) -> None:
    (tmp_path / "a.py").write_text("import sys\nsys.path.insert(0, 'x')\nfrom third_party import X\n")
    (tmp_path / "b.py").write_text(
        "import json\nimport support\nfrom lossless.models import resolve\nimport a\n"
    )
    assert benchmark_problems(tmp_path, {"a", "b", "third_party"}) == [
        "a.py imports third_party",
        "a.py uses sys.path",
        "b.py imports a",
    ]
