"""A sequence in a continuous batch (`decode.TokenBatch`): its slot, prompt, parameters and drafter, how far
its slot is filled, and what it runs next (its pending token and draft, or its prompt's next chunk)."""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import chain

import torch
from torch import Tensor

from lossless.engine.batch.forward import Span
from lossless.engine.model.constrain import Constraint
from lossless.engine.model.sampling import SamplingParams
from lossless.engine.speculate.drafts import common_prefix
from lossless.engine.speculate.speculative import Draft, Drafter, tree_mask
from lossless.engine.speculate.stats import SpecStats

HIDDEN_KEPT = 64  # steps of a sequence's hidden states kept for its drafter while it does not draft


@dataclass(eq=False)
class BatchSequence:
    slot: int
    prompt: list[int]
    params: SamplingParams
    generator: torch.Generator
    constraint: Constraint | None
    budget: int  # tokens it may draw in all: drafts are cut so that no step draws more
    drafter: Drafter | None = None
    stats: SpecStats | None = None
    cached: int = 0  # positions in its slot: prompt tokens prefilled, then drawn tokens fed back
    pending: int | None = None  # the last token drawn: the next step feeds it
    drawn: list[int] = field(default_factory=list)  # every token drawn so far (pending the last)
    hidden: list[Tensor] = field(default_factory=list)  # the target's states the drafter has not seen
    draft: Draft | None = None  # what this step verifies after the pending token
    yields: float | None = None  # tokens its recent drafting steps drew (a moving average; None: none yet)
    rowwise: bool = False  # its prompt runs row by row: every position of its slot is as alone computes it
    reused: int = 0  # its prompt's first tokens whose keys and values it found cached

    def context(self) -> list[int]:
        return self.prompt + self.drawn

    def next_span(self, chunk: int) -> tuple[Span, list[int]]:
        """What it runs next: its pending token and draft, or its prompt's next chunk."""
        if self.pending is not None:
            draft = self.draft.tokens if self.draft is not None else []
            tree = (
                tree_mask(self.draft) if self.draft is not None and self.draft.parents is not None else None
            )
            # each token as a one-token step (`Span.rows_apart`): greedy tokens must not depend on the draft's
            # length, and our attention kernel computes every decoding row in one call a layer
            span = Span(self.slot, self.cached, 1 + len(draft), tree, rows_apart=True)
            return span, [self.pending, *draft]
        n = min(chunk, len(self.prompt) - self.cached)
        span = Span(self.slot, self.cached, n, rows_apart=self.rowwise)
        return span, self.prompt[self.cached : self.cached + n]

    def exact_prefix(self) -> list[int]:
        """The tokens whose keys and values its slot holds as alone computes them (positions 0..n - 1)."""
        return self.context()[: self.cached] if self.rowwise else []

    def shares(self, prompt: list[int], limit: int) -> int:
        """How many first tokens of ``prompt``, at most ``limit``, its slot holds as alone computes them
        (`exact_prefix`, without copying its context)."""
        return (
            common_prefix(chain(self.prompt, self.drawn), prompt, min(limit, self.cached))
            if self.rowwise
            else 0
        )

    def plan_draft(self, limit: int, positions: int) -> None:
        """Its draft for this step: at most ``limit`` tokens, none past its budget or its slot. With a
        limit of 0 the drafter is not asked (at 16 clients asking every drafter for nothing each step cost
        4-6%): the target's hidden states wait for it, the latest ``HIDDEN_KEPT`` steps' of them."""
        assert self.drafter is not None and self.stats is not None
        if limit <= 0:
            self.draft = None
            del self.hidden[:-HIDDEN_KEPT]
            return
        context = self.context()
        room = min(self.budget - len(self.drawn) - 1, positions - len(context))
        hidden = torch.cat(self.hidden) if self.hidden else None
        self.hidden = []
        draft = self.drafter.propose(
            context, max(0, min(self.stats.k_max, limit, room)), self.params, self.generator, hidden
        )
        if draft.parents is not None:  # a tree's nodes need positions too (parents first: a prefix is a tree)
            room = positions - len(context)
            q = None if draft.q is None else draft.q[:room]
            draft = Draft(draft.tokens[:room], q, draft.parents[:room])
        self.draft = draft if draft.tokens else None
