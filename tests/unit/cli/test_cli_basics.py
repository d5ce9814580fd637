"""The CLI's contract with people and scripts: help works, torch stays out of the client's start-up."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import fields

import click
import pytest
from click.testing import CliRunner

from lossless.bench.options import BenchOptions
from lossless.bench.phases import Window, parse_window
from lossless.cli import main
from lossless.demo.options import DemoOptions
from lossless.inspect.options import InspectOptions
from lossless.probe.options import ProbeOptions
from lossless.server.options import ServeOptions
from lossless.tasks.options import TasksOptions
from lossless.verify.budget import Budget, parse_budget
from lossless.verify.options import VerifyOptions


def test_help_lists_commands() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    for command in ("serve", "models"):
        assert command in result.output


def test_importing_the_cli_does_not_import_torch() -> None:
    # Benchmarking a remote endpoint must not pay torch's import time (seconds on a small machine).
    code = "import sys, lossless.cli; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "False"


def _commands(group: click.Group, path: tuple[str, ...] = ()) -> list[tuple[tuple[str, ...], click.Command]]:
    found = []
    for name, command in sorted(group.commands.items()):
        found.append(((*path, name), command))
        if isinstance(command, click.Group):
            found += _commands(command, (*path, name))
    return found


def test_every_command_has_help() -> None:
    commands = _commands(main)
    names = {" ".join(path) for path, _ in commands}
    assert {
        "bench",
        "probe",
        "verify",
        "demo",
        "serve",
        "report",
        "compare",
        "models pull",
        "draft train",
    } <= names
    for path, command in commands:
        result = CliRunner().invoke(main, [*path, "--help"], prog_name="lossless")
        assert result.exit_code == 0, (path, result.output)
        assert f"lossless {' '.join(path)}" in result.output
        assert (command.help or "").split("\n")[0][:40] in " ".join(result.output.split())


NO_DEFAULT = click.Option(["--x"]).default  # what click holds for an option given no default
OPTIONS = {
    "bench": BenchOptions(),
    "probe": ProbeOptions(),
    "verify": VerifyOptions(),
    "serve": ServeOptions(),
    "demo": DemoOptions(),
    "tasks": TasksOptions(),
    "inspect": InspectOptions(),
}


@pytest.mark.parametrize("name", list(OPTIONS))
def test_help_defaults_are_the_options_own(name: str) -> None:
    """A flag's default is its options field's, never retyped: what --help shows is what runs."""
    defaults = OPTIONS[name]
    known = {f.name: getattr(defaults, f.name) for f in fields(defaults)}
    if isinstance(defaults, DemoOptions):
        known |= {"dtype": defaults.embedded.dtype, "out_dir": defaults.out_dir}
    compared = 0
    command = main.commands[name]
    for param in command.params:
        if not isinstance(param, click.Option) or param.name not in known or param.is_flag:
            continue
        if param.default in (None, NO_DEFAULT):
            continue
        given = param.type_cast_value(click.Context(command), param.default)
        if isinstance(known[param.name], Budget):  # given by name
            given = parse_budget(given)
        if isinstance(known[param.name], Window):  # a count of requests, or seconds
            given = parse_window(given, param.name)
        assert given == known[param.name], param.name
        compared += 1
    assert compared >= 2
