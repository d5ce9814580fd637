"""inspect.html and a bench report that links it, in a real headless browser (Debian's chromium through
playwright, as test_report_browser.py): the report shows an inspected endpoint's three words, its link
lands on that endpoint's card, and neither page asks the network for anything.

The card is from a real ``lossless inspect --out`` run against the embedded server (inspect_embedded.json;
a run takes ~75 s on 2 cores), moved to the scripted server's URL as if that had been inspected; the
bench run and both reports are real. Skipped ONLY when /usr/bin/chromium is missing and CI is not set.
"""

from __future__ import annotations

import copy
import json
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser import MARKS, chromium, watch
from click.testing import CliRunner
from scripted_server import ScriptedServer

from lossless.cli import main
from lossless.report.inspect_html import render

FIXTURE = Path(__file__).parent / "inspect_embedded.json"
pytestmark = MARKS
WORDS = ("not evident", "inconclusive", "evident")  # speculation, precision, identity: the real card's


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """inspect --out and bench --out into one folder: two cards (the second of the benched endpoint),
    then a real bench run of the scripted server with --html there, and ``lossless report``."""
    out = tmp_path_factory.mktemp("inspected") / "run"
    out.mkdir()
    real = json.loads(FIXTURE.read_text())["cards"][0]
    with ScriptedServer() as s:
        s.script({"steps": [[0.002, "content", 1]] * 8})
        other, benched = copy.deepcopy(real), copy.deepcopy(real)
        other["endpoint"].update(name="elsewhere", base_url="http://10.0.0.9:8000/v1")
        benched["endpoint"].update(name="scripted", base_url=s.url, model="m")
        doc = {"cards": [other, benched]}
        (out / "inspect.json").write_text(json.dumps(doc))
        (out / "inspect.html").write_text(render(doc))
        args = ["bench", s.url, "--model", "m", "--requests", "6", "--out", str(out)]
        result = CliRunner().invoke(main, [*args, "--html", str(out / "bench.html")])
    assert result.exit_code == 0, result.output
    report = CliRunner().invoke(main, ["report", str(out)])
    assert report.exit_code == 0, report.output
    return out


@pytest.fixture(scope="module")
def browser(run_dir: Path) -> Iterator[Any]:
    yield from chromium()


@pytest.mark.parametrize("name", ["report.html", "bench.html"])
def test_the_report_links_the_inspected_endpoint_to_its_card(browser: Any, run_dir: Path, name: str) -> None:
    page = browser.new_page(viewport={"width": 1280, "height": 500})
    errors, requests = watch(page)
    page.goto((run_dir / name).as_uri())
    row = page.locator("#inspected tbody tr")
    assert row.count() == 1  # the benched endpoint; the other card is of an endpoint not benched
    cells = row.locator("td").all_inner_texts()
    assert cells[1:4] == list(WORDS) and cells[4] == "card"
    assert page.locator("nav a[href='#inspected']").is_visible()
    row.locator("a").click()
    page.wait_for_load_state("load")
    target = run_dir / "inspect.html"
    assert page.url == target.as_uri() + "#card-scripted"
    card = page.locator("#card-scripted")
    assert card.is_visible()
    top = page.evaluate("document.getElementById('card-scripted').getBoundingClientRect().top")
    assert page.evaluate("window.scrollY") > 0 and abs(top) < 60  # scrolled to the card, not the first
    claims = card.locator("table").first.locator("tbody tr")
    names = ("speculative decoding", "precision / variant", "identity")
    for i, (claim, word) in enumerate(zip(names, WORDS, strict=True)):
        cells = claims.nth(i).locator("td").all_inner_texts()
        assert cells[:2] == [claim, word]
        assert claims.nth(i).locator(".badge").is_visible()
    assert "8,192 tokens (declared)" in card.inner_text() and "smollm2" in card.inner_text()
    assert errors == []
    assert requests == [(run_dir / name).as_uri(), target.as_uri()]  # nothing but the two files
    page.screenshot(path=str(run_dir / f"card-from-{name}.png"), full_page=True)
    shutil.copy(run_dir / f"card-from-{name}.png", f"/tmp/lossless-inspect-{name}.png")
    page.close()
