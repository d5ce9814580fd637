"""The inline-SVG plotting module: scales, ticks, CDFs, and a "no data" note instead of a crash."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from lossless.report import svg

NS = "{http://www.w3.org/2000/svg}"


@pytest.mark.parametrize(
    ("lo", "hi", "expected"),
    [
        (0, 10, [0, 2, 4, 6, 8, 10]),
        (3, 97, [0, 20, 40, 60, 80, 100]),
        (0.1, 0.35, [0.1, 0.15, 0.2, 0.25, 0.3, 0.35]),
        (-7, 7, [-10, -5, 0, 5, 10]),
        (1200, 1300, [1200, 1220, 1240, 1260, 1280, 1300]),
    ],
)
def test_nice_ticks_are_round_and_cover_the_data(lo: float, hi: float, expected: list[float]) -> None:
    ticks = svg.nice_ticks(lo, hi)
    assert ticks == pytest.approx(expected)
    assert ticks[0] <= lo and ticks[-1] >= hi


def test_degenerate_and_non_finite_intervals() -> None:
    assert len(svg.nice_ticks(5, 5)) >= 2  # one value still gets an axis
    with pytest.raises(ValueError):
        svg.nice_ticks(0, math.inf)


def test_log_ticks_powers_of_ten_and_between_for_narrow_spans() -> None:
    assert svg.log_ticks(1, 1000) == [1, 10, 100, 1000]
    assert svg.log_ticks(3, 40) == [2, 5, 10, 20, 50]


def test_scale_maps_ends_and_inverts_for_y() -> None:
    x = svg.Scale(0, 10, 100, 200)
    assert (x(0), x(5), x(10)) == (100, 150, 200)
    y = svg.Scale(0, 1, 300, 50).nice()  # pixels grow downwards
    assert y(0) == 300 and y(1) == 50 and y(0.5) == 175
    log = svg.Scale(1, 100, 0, 100, log=True).nice()
    assert log(10) == pytest.approx(50)


def test_cdf_is_sorted_steps_to_one_and_drops_nan() -> None:
    assert svg.cdf([3.0, 1.0, math.nan, 2.0]) == [(1.0, 1 / 3), (2.0, 2 / 3), (3.0, 1.0)]


def test_fmt() -> None:
    assert [svg.fmt(v) for v in (0, 0.25, 12.5, 1500, 25000)] == ["0", "0.25", "12.5", "1500", "25k"]


def _parse(text: str) -> ET.Element:
    return ET.fromstring(text)  # well-formed XML, as a browser's SVG parser needs


def test_render_draws_every_kind_with_legend_and_tooltips() -> None:
    chart = svg.Chart(
        "t <&> title",
        "x (ms)",
        "y",
        [
            svg.ChartSeries("a", svg.cdf([1, 2, 3]), kind="step"),
            svg.ChartSeries("b", [(1, 1), (2, 4)], kind="line"),
            svg.ChartSeries("c & d", [(1, 2)], kind="points", tips=["request #1: <2 ms>"]),
        ],
        refs=[("y", 0.5, "half")],
    )
    root = _parse(svg.render(chart))
    assert root.get("class") == "plot"
    assert len(root.findall(f"{NS}path")) == 2 and root.findall(f"{NS}circle")
    texts = [t.text for t in root.iter(f"{NS}text")]
    assert {"a", "b", "c & d", "t <&> title", "x (ms)", "half"} <= set(texts)
    tips = [t.text for t in root.iter(f"{NS}title")]
    assert "request #1: <2 ms>" in tips


@pytest.mark.parametrize(
    "series",
    [
        [],
        [svg.ChartSeries("a", [])],
        [svg.ChartSeries("a", [(math.nan, 1.0)])],
        [svg.ChartSeries("a", [(0.0, 1.0)])],
    ],
)
def test_no_data_is_a_note_not_a_crash(series: list[svg.ChartSeries]) -> None:
    root = _parse(svg.render(svg.Chart("empty", "x", "y", series, x_log=True)))
    assert root.get("class") == "plot empty"
    assert "no data" in [t.text for t in root.iter(f"{NS}text")]


def test_single_point_gets_an_axis() -> None:
    root = _parse(svg.render(svg.Chart("one", "x", "y", [svg.ChartSeries("a", [(5.0, 5.0)], kind="points")])))
    assert root.get("class") == "plot" and len(root.findall(f"{NS}circle")) == 1


def test_intervals_rows_reference_and_empty() -> None:
    rows = [svg.Row("ttft p50", 1.2, 1.1, 1.3, group="TTFT"), svg.Row("e2e p50", 0.9, group="E2E")]
    root = _parse(svg.intervals("ratios", "B / A", rows, refs=[(1.0, "same")]))
    assert len(root.findall(f"{NS}circle")) == 2
    assert {"ttft p50", "e2e p50", "same", "TTFT", "E2E"} <= {t.text for t in root.iter(f"{NS}text")}
    assert _parse(svg.intervals("none", "x", [])).get("class") == "plot empty"
