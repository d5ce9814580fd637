"""`lossless serve --speculative ...`: a bad drafter spec is one line on stderr and exit code 2,
before any model is loaded."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from lossless.cli import main


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--speculative", "eagle"], "expected ngram, draft:PATH"),
        (["--speculative", "draft:/no/such.gguf"], "no such file"),
        (["--speculative", "ngram", "--spec-k", "0"], "--spec-k"),
        (["--speculative", "draft:/", "--spec-threshold", "2"], "--spec-threshold"),
    ],
)
def test_bad_speculative_options_fail_in_one_line(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(main, ["serve", "--model", "/no/model.gguf", *args])
    assert result.exit_code == 2
    assert needle in result.stderr and result.stderr.count("\n") == 1
    assert result.stdout == ""
