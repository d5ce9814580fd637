"""`lossless demo`'s choice of drafter and dtype: the trained head where it fits, n-gram elsewhere, the
dtype as every command serves the embedded model (``provision.embedded.Embedded``); and its budget flags."""

from __future__ import annotations

from pathlib import Path

from lossless import models
from lossless.demo import run as demo
from lossless.demo.options import DEMO_BUDGET, QUICK_BUDGET
from lossless.provision.embedded import Embedded
from lossless.report.demo import DemoResult, summary_lines
from lossless.verify.budget import BUDGETS


def test_the_embedded_model_is_demonstrated_with_its_head_as_every_command_serves_it() -> None:
    options = demo.demo_options(Path("out"))
    assert options.drafter == "dspark"
    assert options.embedded == Embedded() and options.embedded.dtype == "auto"
    assert demo.demo_options(Path("out"), model=models.DEFAULT_MODEL).drafter == "dspark"


def test_a_budget_given_as_pxsxt_changes_the_demos_own_budget() -> None:
    """6x14x16 is the demo's default budget: given as such it must change nothing (it used to take
    verify's default's task and repeat counts)."""
    assert demo.demo_options(Path("out"), verify_budget=DEMO_BUDGET.label).budget == DEMO_BUDGET
    quick = demo.demo_options(Path("out"), quick=True, verify_budget="3x5x8").budget
    assert (quick.tasks, quick.permutations) == (QUICK_BUDGET.tasks, QUICK_BUDGET.permutations)
    assert demo.demo_options(Path("out"), verify_budget="small").budget == BUDGETS["small"]


def test_another_model_gets_ngram_drafts_unless_told_otherwise() -> None:
    assert demo.demo_options(Path("out"), model="/models/other.gguf").drafter == "ngram"
    told = demo.demo_options(Path("out"), model="/models/other.gguf", speculative="draft:/models/small.gguf")
    assert told.drafter == "draft:/models/small.gguf"
    assert demo.demo_options(Path("out"), speculative="ngram", dtype="float32").drafter == "ngram"


def test_the_summary_names_the_drafter() -> None:
    result = DemoResult("m", "dspark", 3, None, None, {}, 0.4, "equivalent", Path("r.html"), 1.0)
    first = summary_lines(result)[0]
    assert "DSpark draft head" in first and "n-gram" not in first
    result = DemoResult("m", "ngram", 3, None, None, {}, 0.4, "equivalent", Path("r.html"), 1.0)
    assert "n-gram prompt lookup" in summary_lines(result)[0]
