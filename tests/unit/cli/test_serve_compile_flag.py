"""``serve --compile``: a mode (off, background, wait), background by default; a bare ``--compile`` still
means what it meant before it took a mode (compile, then serve), and ``--no-compile`` still means off."""

from __future__ import annotations

import pytest

from lossless.cli.serving import serve


@pytest.mark.parametrize(
    ("argv", "mode", "no_compile"),
    [
        ([], "background", False),
        (["--compile"], "wait", False),
        (["--compile", "--port", "5"], "wait", False),
        (["--compile", "off"], "off", False),
        (["--compile", "background"], "background", False),
        (["--compile", "wait"], "wait", False),
        (["--no-compile"], "background", True),  # serve() turns it into off
    ],
)
def test_compile_modes(argv: list[str], mode: str, no_compile: bool) -> None:
    params = serve.make_context("serve", argv).params
    assert (params["compile"], params["no_compile"]) == (mode, no_compile)


def test_an_unknown_mode_is_a_usage_error() -> None:
    from click.testing import CliRunner

    result = CliRunner().invoke(serve, ["--compile", "later"])
    assert result.exit_code == 2
    assert "'later' is not one of 'off', 'background', 'wait'" in result.output
