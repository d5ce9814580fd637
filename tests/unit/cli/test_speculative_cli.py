"""`lossless serve --speculative ...`: a bad drafter spec is one line on stderr and exit code 2,
before any model is loaded."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from lossless.cli import main


@pytest.mark.parametrize(
    "args,needle",
    [
        (["--speculative", "eagle"], "expected auto (dspark for the embedded"),
        (["--speculative", "draft:/no/such.gguf"], "no such file"),
        (["--speculative", "ngram", "--spec-k", "0"], "--spec-k"),
        (["--speculative", "draft:/", "--spec-threshold", "2"], "--spec-threshold"),
        (["--speculative", "dspark:/no/such/head"], "no such file"),
        (["--speculative", "ngram:/tmp"], "expected auto (dspark for the embedded"),
        (["--speculative", "ngram", "--spec-tree", "4"], "--spec-tree"),
    ],
)
def test_bad_speculative_options_fail_in_one_line(args: list[str], needle: str) -> None:
    result = CliRunner().invoke(main, ["serve", "--model", "/no/model.gguf", *args])
    assert result.exit_code == 2
    assert needle in result.stderr and result.stderr.count("\n") == 1
    assert result.stdout == ""


def test_a_head_that_does_not_fit_the_model_is_refused_in_one_line(tmp_path, tiny_checkpoint) -> None:  # type: ignore[no-untyped-def]
    """The shipped head is for SmolLM2-135M; the tiny test model's embedding has another shape."""
    from lossless.errors import CheckpointError
    from lossless.server.main import load_model
    from lossless.server.options import ServeOptions

    with pytest.raises(CheckpointError, match="embedding"):
        load_model(ServeOptions(model=str(tiny_checkpoint), speculative="dspark"))
