"""``verify --tasks SET``: a task set (any of ``lossless tasks``' sets, or a task file) as verify's task
evidence, in place of the bundled questions.

Every task runs greedily (temperature 0) through the task runner (tasks/runner.py: the agent loop, tool
results and checks included) on the baseline, on the baseline again and on the candidate. The baseline's
and the candidate's successes pair for the accuracy test (McNemar, TOST). Where the tasks offer tools,
tool-call parity as the K2 Vendor Verifier measures it, calibrated by the baseline's repeat (A/A):

- *trigger*: whether a run's first answer calls a tool. F1 of the candidate's triggers against the
  baseline's, beside the repeat's F1 against the baseline. Tested: per task, does the candidate agree
  with the baseline, does the repeat (exact McNemar on the pairs); a difference only when the candidate
  disagrees more often.
- *schema accuracy*: the share of a side's tool calls whose arguments the function's parameters schema
  accepts. Tested: Fisher's exact test of baseline against candidate; a difference only when the
  candidate's share is the lower.

Both p-values join the verdict's A/B family (Holm), so they cost the other tests nothing when equal.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

from scipy import stats

from lossless.analyze.paired import paired_accuracy
from lossless.client.endpoints import Endpoint
from lossless.tasks.result import TaskRun
from lossless.tasks.run import run_endpoint
from lossless.tasks.runner import RunnerConfig
from lossless.tasks.task import Task


@dataclass(frozen=True)
class ToolParity:
    tasks: int  # tasks with tools that all three runs answered
    trigger_f1: float | None  # candidate's triggers against the baseline's; None: no side ever called
    trigger_f1_aa: float | None  # the baseline's repeat against the baseline
    disagree: int  # tasks whose candidate trigger differs from the baseline's
    disagree_aa: int  # ... whose repeat's trigger differs
    p_trigger: float  # exact McNemar of the paired agreements (1.0 when the candidate agrees more)
    calls: tuple[int, int, int]  # tool calls made: baseline, its repeat, candidate
    schema_valid: tuple[float | None, float | None, float | None]  # the share of them the schema accepts
    p_schema: float  # Fisher's exact test, baseline against candidate (1.0 when the candidate's is higher)

    def findings(self) -> list[tuple[str, float]]:
        """(what a rejection would mean, p-value): the verdict's A/B family takes both."""
        f1, f1_aa = (f"{v:.2f}" if v is not None else "-" for v in (self.trigger_f1, self.trigger_f1_aa))
        b, _, c = (f"{v:.0%}" if v is not None else "-" for v in self.schema_valid)
        return [
            (
                f"tool-call triggers disagree with the baseline's on {self.disagree} of {self.tasks} tasks "
                f"(A/A {self.disagree_aa}; trigger F1 {f1}, A/A {f1_aa})",
                self.p_trigger,
            ),
            (
                f"tool-call arguments valid against their schema {c} of {self.calls[2]} (baseline {b} of "
                f"{self.calls[0]})",
                self.p_schema,
            ),
        ]


@dataclass(frozen=True)
class TaskEvidence:
    solved: tuple[list[bool | None], list[bool | None]]  # baseline, candidate per task; None: a call failed
    parity: ToolParity | None  # None: no task offers tools


async def run_tasks(
    baseline: Endpoint,
    candidate: Endpoint,
    tasks: tuple[Task, ...],
    concurrency: int,
    timeout: float,
    api: str = "chat",
) -> TaskEvidence:
    config = RunnerConfig(api=api, temperature=0.0, call_timeout=timeout)
    with_tools = any(t.tools for t in tasks)
    sides = (baseline, baseline, candidate) if with_tools else (baseline, candidate)
    each = max(1, concurrency // len(sides))
    runs = await asyncio.gather(*(run_endpoint(e, tasks, config, concurrency=each) for e in sides))
    solved = (_solved(runs[0]), _solved(runs[-1]))
    if not with_tools:
        return TaskEvidence(solved, None)
    offered = [bool(t.tools) for t in tasks]
    return TaskEvidence(solved, parity(*(_keep(r, offered) for r in runs)))


def _solved(runs: Sequence[TaskRun]) -> list[bool | None]:
    return [None if r.end == "error" else r.success for r in runs]


def _keep(runs: Sequence[TaskRun], offered: Sequence[bool]) -> list[TaskRun]:
    return [r for r, keep in zip(runs, offered, strict=True) if keep]


def triggered(run: TaskRun) -> bool | None:
    """Whether the run's first answer called a tool; None when no call was answered."""
    first = next((c for c in run.calls if c.error_kind is None), None)
    return None if first is None else first.tool_calls > 0 or first.finish_reason == "tool_calls"


def f1(reference: Sequence[bool], other: Sequence[bool]) -> float | None:
    """F1 of ``other``'s positives against ``reference``'s; None when neither has any."""
    tp = sum(a and b for a, b in zip(reference, other, strict=True))
    wrong = sum(a != b for a, b in zip(reference, other, strict=True))
    return 2 * tp / (2 * tp + wrong) if tp or wrong else None


def parity(base: Sequence[TaskRun], again: Sequence[TaskRun], cand: Sequence[TaskRun]) -> ToolParity:
    trios = [
        (x, y, z)
        for x, y, z in (
            (triggered(a), triggered(b), triggered(c)) for a, b, c in zip(base, again, cand, strict=True)
        )
        if x is not None and y is not None and z is not None
    ]
    b, b2, c = (list(col) for col in zip(*trios, strict=True)) if trios else ([], [], [])
    agree_aa = [x == y for x, y in zip(b, b2, strict=True)]
    agree_ab = [x == z for x, z in zip(b, c, strict=True)]
    p_trigger = paired_accuracy(agree_aa, agree_ab, 0.1).p_mcnemar if trios else 1.0
    disagree, disagree_aa = agree_ab.count(False), agree_aa.count(False)
    calls = tuple(sum(r.tool_calls for r in side) for side in (base, again, cand))
    valid = tuple(sum(r.tool_calls - r.schema_invalid for r in side) for side in (base, again, cand))
    share = tuple(v / n if n else None for v, n in zip(valid, calls, strict=True))
    p_schema = 1.0
    if calls[0] and calls[2] and (share[2] or 0.0) < (share[0] or 0.0):
        table = [[valid[0], calls[0] - valid[0]], [valid[2], calls[2] - valid[2]]]
        p_schema = float(stats.fisher_exact(table).pvalue)
    return ToolParity(
        len(trios),
        f1(b, c),
        f1(b, b2),
        disagree,
        disagree_aa,
        p_trigger if disagree > disagree_aa else 1.0,
        (calls[0], calls[1], calls[2]),
        (share[0], share[1], share[2]),
        p_schema,
    )
