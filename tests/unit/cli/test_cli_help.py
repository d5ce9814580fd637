"""Every command's --help is complete: each option described (defaults shown by click, not typed into
the text), examples at the end, and no range shown that says nothing; docs/cli.md is that help."""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from lossless.cli import main
from lossless.cli.reference import commands, reference_markdown

DOCS = Path(__file__).parents[3] / "docs" / "cli.md"


def _leaves() -> list[tuple[str, click.Command]]:
    return list(commands(main))


def test_every_command_is_found() -> None:
    names = {name for name, _ in _leaves()}
    assert {"bench", "probe", "verify", "inspect", "tasks", "advise", "watch", "history", "report"} <= names
    assert {"compare", "demo", "serve", "models pull", "models list", "draft train"} <= names


@pytest.mark.parametrize(("name", "command"), _leaves(), ids=[n for n, _ in _leaves()])
def test_every_option_is_described_and_every_command_has_examples(name: str, command: click.Command) -> None:
    undescribed = [
        p.opts[0]
        for p in command.params
        if isinstance(p, click.Option) and not p.hidden and p.name != "help" and not (p.help or "").strip()
    ]
    assert undescribed == [], f"{name}: options without a description"
    assert "Examples:" in (command.epilog or ""), f"{name}: no examples"
    text = CliRunner().invoke(main, [*name.split(), "--help"]).output
    assert "x<=None" not in text
    # a default is click's to show, from the options object: never a number typed into the text
    hints = [(p.opts[0], getattr(p, "help", "") or "") for p in command.params]
    typed = [opt for opt, text in hints if re.search(r"\[default: [\d.]", text)]
    assert typed == [], f"{name}: defaults typed into the help"


def test_docs_cli_md_is_the_help_of_every_command() -> None:
    """docs/cli.md is generated: `python -m lossless.cli.reference > docs/cli.md` after changing a flag."""
    stale = "docs/cli.md is stale: run python -m lossless.cli.reference > docs/cli.md"
    assert DOCS.read_text() == reference_markdown(main), stale
