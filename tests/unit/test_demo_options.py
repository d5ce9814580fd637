"""`lossless demo`'s choice of drafter and dtype: the trained head where it fits, n-gram elsewhere."""

from __future__ import annotations

from pathlib import Path

from lossless import demo, models


def test_the_embedded_model_is_demonstrated_with_its_head_in_bfloat16() -> None:
    options = demo.demo_options(Path("out"))
    assert (options.drafter, options.dtype) == ("dspark", "bfloat16")
    assert demo.demo_options(Path("out"), model=models.DEFAULT_MODEL).drafter == "dspark"


def test_another_model_gets_ngram_drafts_unless_told_otherwise() -> None:
    assert demo.demo_options(Path("out"), model="/models/other.gguf").drafter == "ngram"
    told = demo.demo_options(Path("out"), model="/models/other.gguf", speculative="draft:/models/small.gguf")
    assert told.drafter == "draft:/models/small.gguf"
    assert demo.demo_options(Path("out"), speculative="ngram", dtype="float32").drafter == "ngram"


def test_the_summary_names_the_drafter() -> None:
    result = demo.DemoResult("m", "dspark", 3, None, None, {}, 0.4, "equivalent", Path("r.html"), 1.0)
    first = demo.summary_lines(result)[0]
    assert "DSpark draft head" in first and "n-gram" not in first
    result = demo.DemoResult("m", "ngram", 3, None, None, {}, 0.4, "equivalent", Path("r.html"), 1.0)
    assert "n-gram prompt lookup" in demo.summary_lines(result)[0]
