"""`lossless inspect`'s flags, options and card, without a server: bad input is one line and exit 2,
and a card renders for people and as strict JSON (an unbounded CI is null, not Infinity)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from lossless.cli.inspect import inspect
from lossless.client.endpoints import Endpoint
from lossless.errors import UsageError
from lossless.inspect import speculation
from lossless.inspect.identity import Identity
from lossless.inspect.options import InspectOptions
from lossless.inspect.run import Card, InspectResult
from lossless.report import inspect as report


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["http://127.0.0.1:9/v1"], "--model is required"),
        (["http://127.0.0.1:9/v1", "--model", "m", "--min-rounds", "6", "--max-rounds", "5"], "--min-rounds"),
        (["http://127.0.0.1:9/v1", "--model", "m", "--max-tokens", "4"], "--max-tokens"),
        (["http://127.0.0.1:9/v1", "--model", "m", "--budget", "nan"], "--budget"),
        (["http://127.0.0.1:9/v1", "--model", "m", "--reference", "fp16"], "--reference 'fp16'"),
        (["http://127.0.0.1:9/v1", "--model", "m", "--reference", "=http://127.0.0.1:9/v1"], "empty name"),
        (
            ["http://127.0.0.1:9/v1", "--model", "m", "--reference", "a=float32", "--reference", "a=int4"],
            "names must differ",
        ),
        # an unreachable reference is scored before any card: one line naming it
        (
            ["http://127.0.0.1:9/v1", "--model", "m", "--reference", "ref=http://127.0.0.1:9/v1"],
            "endpoint 'ref' (http://127.0.0.1:9/v1)",
        ),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: list[str], says: str) -> None:
    result = CliRunner().invoke(inspect, args)
    assert result.exit_code == 2 and says in result.stderr
    assert "Traceback" not in result.stderr and result.stdout == ""


def test_options_check_themselves() -> None:
    with pytest.raises(UsageError, match="min-rounds"):
        InspectOptions(min_rounds=9, max_rounds=8)
    assert InspectOptions().embedded.model is None


def _card() -> Card:
    spec = speculation.judge([])  # no records at all: every ratio "cannot tell"
    who = Identity("inconclusive", None, note="cannot tell: the server sends no usage.prompt_tokens")
    endpoint = Endpoint("e", "http://user:pw@127.0.0.1:9/v1?key=k", "m")
    served = {"declared_model": ["m"], "system_fingerprint": []}
    return Card(endpoint, spec, who, None, 0, "max rounds", 0, 0.5, served=served)


def test_a_card_with_nothing_measured_says_inconclusive_everywhere(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    result = InspectResult((_card(),))
    report.emit(result, Console(file=io.StringIO()), True, tmp_path)  # --json and --out
    doc = json.loads(capsys.readouterr().out)
    (card,) = doc["cards"]
    assert card["speculative_decoding"]["verdict"] == "inconclusive"
    assert card["speculative_decoding"]["ratios"][0]["ci95"] == [0.0, None]  # inf -> null
    assert card["precision"]["verdict"] == "inconclusive" and "not measured" in card["precision"]["note"]
    assert card["endpoint"]["base_url"] == "http://127.0.0.1:9/v1"  # no password, no query
    assert json.loads((tmp_path / "inspect.json").read_text()) == doc
    out = io.StringIO()
    report.render(result.cards[0], Console(file=out, width=200))
    text = out.getvalue()
    assert "1 speculative decoding" in text and "2 precision" in text and "3 identity" in text
    assert "pw" not in text and "key=k" not in text
