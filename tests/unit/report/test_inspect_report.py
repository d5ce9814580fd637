"""inspect's page and the bench report's links to it (``report/inspect_html.py``, ``report/inspect.py``):
edge cases of the cards as JSON - a claim missing, today's and the rebuilt precision shape, names that
need escaping - and which bench endpoints a card links to."""

from __future__ import annotations

import copy
import io
import json
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console
from rich.table import Table

from lossless.client.endpoints import Endpoint
from lossless.inspect.identity import Identity
from lossless.inspect.run import Card, InspectResult
from lossless.inspect.speculation import Speculation
from lossless.report import inspect as report
from lossless.report.inspect_html import anchors, context_text, links, render, words

FIXTURE = Path(__file__).parents[2] / "e2e" / "inspect_embedded.json"
PRECISION = {
    "verdict": "evident",
    "nearest": "bf16",
    "note": "nearest bf16, 6x the A/A floor from fp32",
    "floor": 0.0021,
    "bit_identical": True,
    "method": "teacher-forced log-probabilities",
    "texts": 8,
    "tokens": 512,
    "distances": [
        {"reference": "fp32", "distance": 0.013, "ci": [0.011, 0.015]},
        {"reference": "bf16", "distance": 0.0019, "ci": [0.0015, 0.0024]},
    ],
}


@pytest.fixture
def doc() -> dict[str, Any]:
    """A card from a real ``lossless inspect`` run against the embedded server."""
    return dict(json.loads(FIXTURE.read_text()))


def test_the_page_has_a_section_per_card_with_the_three_words(doc: dict[str, Any]) -> None:
    second = copy.deepcopy(doc["cards"][0])
    second["speculative_decoding"]["verdict"] = "evident"
    html = render({"cards": [doc["cards"][0], second]})
    assert html.count("<section ") == 2
    assert 'id="card-embedded"' in html and 'id="card-embedded-2"' in html  # a repeated name
    assert html.count('class="badge not-evident"') >= 1 and 'class="badge evident"' in html
    assert "not measured" in html  # today's precision: a bare note
    assert "8,192 tokens (declared)" in html and "smollm2" in html and "uvicorn" in html
    assert "<script" not in html and "http-equiv" in html  # the shared page: self-contained


def test_the_rebuilt_precision_shows_its_distances(doc: dict[str, Any]) -> None:
    card = doc["cards"][0]
    card["precision"] = PRECISION
    html = render(doc)
    assert "bf16 (nearest)" in html and "fp32 (nearest)" not in html
    assert "0.0015-0.0024" in html and "0.0021" in html  # the CI and the floor
    assert "repeats bit-identical" in html and ">yes<" in html
    assert words(card)[1] == ("precision / variant", "evident")


def test_a_precision_without_references_has_no_table(doc: dict[str, Any]) -> None:
    card = doc["cards"][0]
    card["precision"] = {
        **PRECISION,
        "verdict": "inconclusive",
        "nearest": None,
        "floor": None,
        "bit_identical": None,
        "distances": [],
    }
    html = render(doc)
    assert "distance</th>" not in html and "(nearest)" not in html
    assert "nearest reference" not in html and "repeats bit-identical" not in html  # empty: not shown
    assert "method" in html and "texts" in html  # said, so shown


def test_missing_or_odd_claims_read_inconclusive(doc: dict[str, Any]) -> None:
    card = doc["cards"][0]
    del card["precision"]
    card["identity"]["verdict"] = "maybe"  # not one of the three words: shown, styled as inconclusive
    card["endpoint"]["name"] = "<b>&</b>"
    assert [w for _, w in words(card)] == ["not evident", "inconclusive", "maybe"]
    html = render(doc)
    assert "<b>&</b>" not in html and "&lt;b&gt;&amp;&lt;/b&gt;" in html
    assert 'class="badge inconclusive">maybe<' in html
    assert 'id="card-b-b"' in html


def test_no_cards_is_a_page_saying_so() -> None:
    assert "No endpoint was inspected" in render({"cards": []})
    assert anchors([{}, {"endpoint": {"name": "!!"}}]) == ["card-endpoint", "card-endpoint-2"]


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (None, "not declared (not measured)"),
        (8192, "8,192 tokens (declared)"),
        (
            {"status": "measured", "limit": 3000, "note": "a 2,990-token prompt answered"},
            "3,000 tokens (measured): a 2,990-token prompt answered",
        ),
        ({"status": "refused at 4,096", "limit": None, "note": ""}, "refused at 4,096"),
    ],
)
def test_the_context_limit_declared_or_measured(value: Any, shown: str) -> None:
    assert context_text(value) == shown


def _folder(tmp_path: Path, doc: dict[str, Any], page: bool = True) -> Path:
    (tmp_path / "inspect.json").write_text(json.dumps(doc))
    if page:
        (tmp_path / "inspect.html").write_text(render(doc))
    return tmp_path


def test_a_bench_endpoint_links_its_card_by_url_and_model(doc: dict[str, Any], tmp_path: Path) -> None:
    card = doc["cards"][0]["endpoint"]
    card.update(name="a", base_url="http://h:1/v1")
    benched = [
        {"name": "A", "base_url": "http://h:1/v1/", "model": card["model"]},
        {"name": "B", "base_url": "http://h:2/v1", "model": card["model"]},
        {"name": "C", "base_url": "http://h:1/v1", "model": "other"},
    ]
    found, notes = links(benched, [_folder(tmp_path, doc)], tmp_path)
    assert notes == [] and [f.endpoint for f in found] == ["A"]
    assert found[0].href == "inspect.html#card-a"
    assert found[0].words == (
        ("speculative decoding", "not evident"),
        ("precision / variant", "inconclusive"),
        ("identity", "evident"),
    )
    elsewhere = tmp_path / "pages"
    elsewhere.mkdir()
    assert links(benched, [tmp_path], elsewhere)[0][0].href == "../inspect.html#card-a"


def test_the_embedded_model_matches_whatever_its_port(doc: dict[str, Any], tmp_path: Path) -> None:
    model = doc["cards"][0]["endpoint"]["model"]
    benched = [{"name": "embedded", "base_url": "http://127.0.0.1:9/v1", "model": model}]
    found, _ = links(benched, [_folder(tmp_path, doc, page=False)], tmp_path)
    assert found[0].endpoint == "embedded" and found[0].href is None  # no inspect.html: words only
    assert links([{**benched[0], "model": "x"}], [tmp_path], tmp_path) == ([], [])


def test_an_unreadable_inspect_json_is_a_note_not_a_failure(tmp_path: Path) -> None:
    (tmp_path / "inspect.json").write_text("{not json")
    found, notes = links([{"name": "e", "base_url": "u", "model": "m"}], [tmp_path], tmp_path)
    assert found == [] and "inspect.json was not read" in notes[0]
    assert links([], [tmp_path / "none"], tmp_path) == ([], [])
    (tmp_path / "inspect.json").write_text('{"cards": [{"endpoint": "odd"}, {}]}')  # shapes of no card
    assert links([{"name": "e"}, "odd"], [tmp_path], tmp_path) == ([], [])  # type: ignore[list-item]


def _card() -> Card:
    spec = Speculation("not evident", None, 1.0, (), (), note="flat")
    who = Identity("evident", "smollm2", note="")
    return Card(Endpoint("e", "http://h:1/v1", "m"), spec, who, 8192, 4, "settled", 100, 12.0)


def test_write_puts_the_page_beside_the_json(tmp_path: Path) -> None:
    report.emit(InspectResult((_card(),)), Console(file=io.StringIO()), False, tmp_path)
    doc = json.loads((tmp_path / "inspect.json").read_text())
    page = (tmp_path / "inspect.html").read_text()
    assert doc["cards"][0]["endpoint"]["name"] == "e" and 'id="card-e"' in page


def test_the_terminal_shows_precision_nearest_and_floor() -> None:
    console = Console(record=True, width=200)
    report.render(_card(), console)
    text = console.export_text()
    assert "2 precision / variant" in text and "inconclusive" in text and "8,192 tokens (declared)" in text
    assert "nearest reference" not in text  # not measured: no line of empty fields
    table = Table()
    table.add_column("a"), table.add_column("b"), table.add_column("c")
    report._precision(table, PRECISION)
    console.print(table)
    assert "bf16, distance 0.0019; A/A floor 0.0021" in console.export_text()
