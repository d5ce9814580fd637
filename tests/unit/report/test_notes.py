"""The token-exact note: what the server counted, and saying so when it counted nothing (llama.cpp's server
sends no usage in streams: '0/4 counted as asked (largest difference 0)' read as a miss by 0 tokens)."""

from __future__ import annotations

from lossless.analyze.summary import LengthCheck
from lossless.report.notes import lengths_note


def test_counts_compared_when_the_server_reported_them() -> None:
    note = lengths_note(
        LengthCheck(requests=4, input_exact=3, input_off_most=2, output_asked=4, output_exact=1)
    )
    assert note == (
        "token-exact: 3/4 prompts counted as asked by the server (largest difference 2); "
        "1/4 outputs at the asked length"
    )
    assert "largest difference 0" in lengths_note(LengthCheck(4, 4, 0, 0, 0))


def test_no_counts_are_not_reported_as_a_difference_of_zero() -> None:
    note = lengths_note(
        LengthCheck(requests=4, input_exact=0, input_off_most=0, output_asked=4, output_exact=1)
    )
    assert note == (
        "token-exact: the server reported no prompt token counts (usage) for the 4 requests; "
        "1/4 outputs at the asked length"
    )
