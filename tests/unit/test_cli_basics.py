"""The CLI's contract with people and scripts: help works, torch stays out of the client's start-up."""

from __future__ import annotations

import subprocess
import sys

from click.testing import CliRunner

from lossless.cli import main


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
