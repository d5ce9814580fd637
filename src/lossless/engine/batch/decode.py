"""Continuous batching: sequences join and leave a running batch at every step, each speculating as alone.

    TokenBatch   sequences in KV cache slots; a step is one forward (`forward.forward_packed`) over every
                 decoding sequence's last token (and its draft) and a chunk of each newcomer's prompt, then
                 each sequence whose prompt is in draws its tokens, with its own parameters, grammar,
                 generator and drafter
    DecodeBatch  a TokenBatch whose tokens become text deltas (`generate.TextAssembler`, as alone): what
                 the server steps

Exact under load: a sequence's greedy tokens depend on its own prompt and parameters, never on who shares
its steps, and its sampled tokens follow plain decoding's distribution. The forward is batch-invariant
where the model's matmuls are (`forward.row_invariant`: our int4 and Q8_0 kernels; dense float32 and
bfloat16 ones are not, and ``invariant`` says so). Where our kernels are built a prompt of up to
``ROWWISE_PROMPT`` tokens runs row by row, each row as a one-token step computes it, so how it is cut
into chunks (``chunk`` tokens, and how many newcomers' chunks go into one step, ``prefill_budget``)
changes when a row runs, not what it computes, and a prompt may start from the keys and values another
sequence cached for the same first tokens (`TokenBatch`); a longer prompt, or any prompt elsewhere, is cut
into chunks of ``chunk`` tokens from its start whatever else runs, so it is processed in the same pieces
in any batch; each
sequence draws from its own generator, seeded as its request says (`sampling.make_generator`). How long
its drafts are depends on the batch (`TokenBatch`): which tokens a step verifies changes, not what the
target computes for them, and the acceptance rule keeps each token the target's own (greedy) or its
distribution (sampled); a seeded sampled request's tokens may therefore differ with the load.

Not the path of `generate.plain_tokens`: a prompt alone there runs in one piece and a decode step's norms
take another rounding (`forward.rms_norm_rows`), so the same request may differ between a server that
batches and one that does not, as between an eager and a compiled one (``system_fingerprint`` names the
batch). Thread-confined: one thread steps a batch.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import replace
from typing import Generic, TypeVar

import torch
from torch import Tensor

from lossless.engine.batch.forward import SlotCache, Span, forward_packed, row_invariant, rows_kernel
from lossless.engine.batch.sequence import BatchSequence
from lossless.engine.model.constrain import Constraint
from lossless.engine.model.generate import Accepted, Delta, TextAssembler, choose
from lossless.engine.model.sampling import SamplingParams, make_generator
from lossless.engine.model.tokenizer import Tokenizer
from lossless.engine.model.transformer import Transformer
from lossless.engine.speculate.drafts import common_prefix
from lossless.engine.speculate.speculative import Drafter, judge_chain, judge_tree
from lossless.engine.speculate.stats import SpecStats

K = TypeVar("K", bound=Hashable)  # what the caller names its sequences by (the server: its jobs)

PREFILL_CHUNK = 128  # a prompt's tokens per step: a long prompt holds a step up for one chunk at most
PREFILL_BUDGET = 256  # the newcomers' prompt tokens per step (the first waiting chunk always goes)
DRAFT_ROWS = 8  # decoding tokens per step, pending and drafted, before the drafts are cut (see `TokenBatch`)
# beside other decoding sequences, a sequence drafts while its drafts lately yielded this many tokens a step
# (benchmarks/batch_drafts.py, eager, 2 cores: grounded answers' 2.7-3.3 paid at 2 clients, 1.28x; open
# chat's 1.7 cost 12% at 2 clients and 25% at 4, and paid only alone)
DRAFT_YIELD = 2.5
# a prompt of at most this many tokens goes row by row through our attention kernel, each row as a one-token
# step computes it (`Span.rows_apart`), so its keys and values are the same whatever came before or beside
# and a later prompt may start from them; a longer one runs in chunks through torch's attention, faster
# there (a row's kernel cost grows with what it sees; SmolLM2 int4 on 2 cores, a prompt alone, nothing
# cached, row by row against in chunks, 16 keys at a time in the kernel: 128 tokens 93-98 / 111-112 ms,
# 256 224 / 234-235, 512 540-543 / 521-531, 1024 1475-1545 / 1339-1347; one key at a time it was 702 / 429
# at 512)
ROWWISE_PROMPT = 512


class TokenBatch(Generic[K]):
    """Up to ``slots`` sequences of up to ``positions`` tokens each (prompt and generated), stepped together.
    The caller ends a sequence (`remove`) before it outgrows its slot.

    A sequence given a drafter speculates inside the batch: its step feeds the pending token and a draft,
    the forward scores them with everyone else's tokens, and the same rule as alone (`speculative`:
    rejection sampling for a chain, the walk for a tree) accepts a prefix, so it draws 1 to k + 1 tokens
    a step, distributed exactly as plain decoding's. Its cache rolls back by its count of positions (a
    tree's path is moved into place). Drafts pay while a step's forward is bound by reading the weights
    and cost more than they save once the batch's rows make it compute-bound: a step's drafts are cut to
    ``draft_rows`` decoding tokens in all, shared equally (each sequence may draft draft_rows // decoding
    - 1 tokens: none at all once more than draft_rows / 2 sequences decode), and beside other decoding
    sequences only a sequence whose recent drafts yielded ``DRAFT_YIELD`` tokens a step or more drafts
    (copying text, not open chat; one that stopped drafting under load resumes when it decodes alone).

    Where every row is computed from itself alone (our kernels built, the matmuls row-invariant: ``rowwise``),
    a position's keys and values depend on the tokens up to it and nothing else, so a newcomer whose prompt
    begins as another sequence's context does starts from that sequence's cached positions instead of
    computing them again: the same numbers (a prefix cache without a second copy of the numerics). Its slot
    is the free one holding the longest such prefix; before each chunk of its prompt, a longer one that a
    running sequence's slot holds is copied in."""

    def __init__(
        self,
        model: Transformer,
        slots: int,
        positions: int,
        chunk: int = PREFILL_CHUNK,
        prefill_budget: int = PREFILL_BUDGET,
        draft_rows: int = DRAFT_ROWS,
    ) -> None:
        self.model, self.chunk, self.prefill_budget = model, chunk, prefill_budget
        self.draft_rows = draft_rows
        self.invariant = row_invariant(model)  # a sequence's numbers do not depend on who shares its steps
        dtype = model.output.weight.dtype
        self.rowwise = self.invariant and model.prompt_model is None and rows_kernel(dtype)
        self.cache = SlotCache(model, slots, positions)
        self._free = list(range(slots - 1, -1, -1))
        # per slot: what the sequence that left it held as alone computes it (`BatchSequence.exact_prefix`)
        self._held: list[list[int]] = [[] for _ in range(slots)]
        self.running: dict[K, BatchSequence] = {}  # in the order they joined: the oldest prefills first

    def free(self) -> int:
        return len(self._free)

    def positions_in_use(self) -> int:
        return sum(seq.cached for seq in self.running.values())

    def add(
        self,
        key: K,
        prompt: list[int],
        params: SamplingParams,
        generator: torch.Generator,
        constraint: Constraint | None = None,
        drafter: Drafter | None = None,
        k_max: int = 0,
        budget: int | None = None,
    ) -> None:
        """``key`` joins at the next step; ``drafter`` (one of its own) makes it speculate, ``k_max`` tokens
        a draft at most; ``budget``: the tokens it will draw at most (None: to the end of its slot)."""
        assert key not in self.running and self._free, "a sequence joins once, into a free slot"
        assert 0 < len(prompt) <= self.cache.positions, "the caller fits prompts to the context"
        budget = self.cache.positions - len(prompt) if budget is None else budget
        rowwise = self.rowwise and len(prompt) <= ROWWISE_PROMPT
        slot, reused = self._slot_for(prompt) if rowwise else (self._free[-1], 0)
        self._free.remove(slot)
        self._held[slot] = []  # overwritten from its reused positions on
        seq = BatchSequence(slot, list(prompt), params, generator, constraint, budget, drafter)
        seq.rowwise, seq.cached, seq.reused = rowwise, reused, reused
        if drafter is not None:
            drafter.begin(prompt)
            seq.stats = SpecStats(k_max)
        self.running[key] = seq

    def remove(self, key: K) -> None:
        """The sequence leaves now (finished or cancelled): its slot is free for the next step, its cached
        prefix kept for a newcomer whose prompt begins with it."""
        seq = self.running.pop(key)
        self._held[seq.slot] = seq.exact_prefix()
        self._free.append(seq.slot)

    def reused(self, key: K) -> int:
        """How many of the sequence's prompt tokens it found cached (`TokenBatch`)."""
        return self.running[key].reused

    def _slot_for(self, prompt: list[int]) -> tuple[int, int]:
        """A free slot for a row-wise ``prompt`` -> it and how many of the prompt's first tokens it holds:
        the free slot kept with the longest prefix of it. The last prompt token always runs (its hidden
        state draws the first token)."""
        limit = len(prompt) - 1
        slot = max(self._free, key=lambda s: (common_prefix(self._held[s], prompt, limit), -s))
        return slot, common_prefix(self._held[slot], prompt, limit)

    def _catch_up(self, seq: BatchSequence) -> None:
        """Before a row-wise prompt's next chunk: the longest prefix of it that another sequence's slot
        holds beyond what its own does, copied in (one that joined beside it in a burst finds what the
        first of them computed a step before)."""
        limit, source = len(seq.prompt) - 1, None
        reach = seq.cached
        for other in self.running.values():
            if other is not seq and (n := other.shares(seq.prompt, limit)) > reach:
                source, reach = other, n
        if source is not None:
            self.cache.copy(source.slot, seq.slot, seq.cached, reach)
            seq.reused += reach - seq.cached
            seq.cached = reach

    def stats(self, key: K) -> SpecStats | None:
        """A speculating sequence's acceptance figures so far."""
        return self.running[key].stats

    @torch.inference_mode()
    def step(self) -> dict[K, Accepted]:
        """One forward over the planned spans -> the tokens each sequence drew this step (a newcomer whose
        prompt is not all in yet draws none; a speculating one 1 to k + 1)."""
        plan = self._plan()
        if not plan:
            return {}
        hidden = self._forward(plan)  # [N, dim]
        drawing: list[tuple[K, BatchSequence, Span, int]] = []  # and the first of its rows in hidden
        rows: list[int] = []
        offset = 0
        for key, seq, span, _ in plan:
            offset += span.length
            if seq.pending is not None:  # its pending token and draft: every row is judged
                drawing.append((key, seq, span, offset - span.length))
                rows.extend(range(offset - span.length, offset))
                continue
            seq.cached = span.end
            if seq.drafter is not None:
                seq.hidden.append(hidden[offset - span.length : offset].clone())
            if seq.cached == len(seq.prompt):  # its prompt is in: the last row predicts the first token
                drawing.append((key, seq, span, offset - 1))
                rows.append(offset - 1)
        logits = self.model.output(hidden[rows]).float()  # [R, V]: only the rows drawn from
        # every row's greedy token in one call (argmax's first maximum, as a row alone): 16 rows' argmax
        # one by one took 3% of a 16-sequence step
        best = logits.argmax(-1).tolist()
        drawn, row = {}, 0
        for key, seq, span, first in drawing:
            n = span.length if seq.pending is not None else 1
            drawn[key] = self._draw(seq, span, logits[row : row + n], hidden[first : first + n], best[row])
            row += n
        return drawn

    def _draw(self, seq: BatchSequence, span: Span, logits: Tensor, hidden: Tensor, best: int) -> Accepted:
        """``seq``'s tokens from its rows' logits [n, V] and hidden states [n, dim] (``best``: the first
        row's argmax): the first token after its prompt, or its pending token's successor and whatever of
        its draft is accepted."""
        if seq.draft is None:  # the first token, or a plain step: one token, as plain decoding draws it
            row = logits[0] if seq.constraint is None else seq.constraint.mask(logits[0])
            plain_greedy = seq.constraint is None and seq.params.greedy
            token = best if plain_greedy else choose(row, seq.params, seq.generator)
            if seq.constraint is not None:
                seq.constraint.advance(token)
            accepted = Accepted([token], row[None])
            seq.cached = span.end
        elif seq.draft.parents is None:
            accepted = judge_chain(logits, seq.draft, seq.params, seq.generator, constraint=seq.constraint)
            seq.cached = span.start + len(accepted.token_ids)
        else:
            accepted, path = judge_tree(logits, seq.draft, seq.params, seq.generator, seq.constraint)
            if path[1:] != list(range(1, len(path))):
                self.cache.keep(seq.slot, [span.start + r for r in path[1:]], span.start + 1)
            seq.cached = span.start + len(path)
            hidden = hidden[path]
        if seq.pending is not None and seq.drafter is not None and seq.stats is not None:
            n, draft = len(accepted.token_ids), seq.draft
            seq.stats.record(draft.depth() if draft else 0, n - 1)
            seq.drafter.observe(len(draft.tokens) if draft else 0, n - 1)
            if draft is not None:
                seq.yields = n if seq.yields is None else 0.75 * seq.yields + 0.25 * n
            seq.hidden.append(hidden[:n].clone())  # not a view of the step's rows
        seq.draft = None
        seq.drawn += accepted.token_ids
        seq.pending = accepted.token_ids[-1]
        return accepted

    def _plan(self) -> list[tuple[K, BatchSequence, Span, list[int]]]:
        """Every decoding sequence's pending token (and draft), and newcomers' next chunks, oldest first,
        within the step's prompt budget; prompt chunks first (a float32 prompt twin runs them apart)."""
        chunks: list[tuple[K, BatchSequence, Span, list[int]]] = []
        decodes: list[tuple[K, BatchSequence, Span, list[int]]] = []
        budget = self.prefill_budget
        decoding = sum(seq.pending is not None for seq in self.running.values())
        limit = self.draft_rows // decoding - 1 if decoding else 0
        for key, seq in self.running.items():
            if seq.pending is not None and seq.drafter is not None:
                paying = decoding == 1 or seq.yields is None or seq.yields >= DRAFT_YIELD
                seq.plan_draft(limit if paying else 0, self.cache.positions)
            if seq.pending is None and seq.rowwise:
                self._catch_up(seq)
            span, tokens = seq.next_span(self.chunk)
            assert span.end <= self.cache.positions, "a sequence outgrew its slot: the caller ends it first"
            if seq.pending is not None:
                decodes.append((key, seq, span, tokens))
            elif not chunks or span.length <= budget:
                chunks.append((key, seq, span, tokens))
                budget -= span.length
        return chunks + decodes

    def _forward(self, plan: list[tuple[K, BatchSequence, Span, list[int]]]) -> torch.Tensor:
        """The plan's tokens -> hidden states [N, dim] in the model's dtype. Prompt chunks run through the
        float32 prompt twin where the model has one, as a prompt alone does (`Transformer.forward`), each
        chunk in a pass of its own: the twin's matmuls are dense float32, whose sums change with the rows
        beside them, so a chunk is never packed with another."""
        twin, dtype = self.model.prompt_model, self.model.output.weight.dtype
        groups = [plan]
        if twin is not None:
            chunks = [[part] for part in plan if part[1].pending is None]
            groups = [*chunks, plan[len(chunks) :]]
        parts = []
        for group in groups:
            if group:
                model = twin if twin is not None and group[0][1].pending is None else self.model
                tokens = [t for _, _, _, toks in group for t in toks]
                hidden = forward_packed(model, self.cache, tokens, [span for _, _, span, _ in group])
                parts.append(hidden.to(dtype))
        return torch.cat(parts) if len(parts) > 1 else parts[0]


class DecodeBatch(Generic[K]):
    """Requests in, text deltas out: a TokenBatch whose sequences each end as alone they would (eos, a
    stop sequence, max_tokens, the context), or when the caller cancels them. With ``drafter`` (a new
    drafter for each sequence) every sequence speculates, ``k_max`` tokens a draft at most, and its last
    delta carries its acceptance figures, as alone."""

    def __init__(
        self,
        model: Transformer,
        tokenizer: Tokenizer,
        vocab_size: int,
        slots: int,
        drafter: Callable[[], Drafter] | None = None,
        k_max: int = 0,
    ) -> None:
        self.tokens: TokenBatch[K] = TokenBatch(model, slots, model.max_seq_len)
        self.tokenizer, self.vocab_size = tokenizer, vocab_size
        self.drafter, self.k_max = drafter, k_max
        self._texts: dict[K, TextAssembler] = {}

    @property
    def slots(self) -> int:
        return self.tokens.cache.slots

    @property
    def invariant(self) -> bool:
        """Each sequence's tokens are those it would get alone (`batch.forward.row_invariant`)."""
        return self.tokens.invariant

    def running(self) -> int:
        return len(self._texts)

    def free(self) -> int:
        return self.tokens.free()

    def add(self, key: K, prompt_ids: list[int], params: SamplingParams) -> None:
        """``key`` joins at the next step (a free slot must be left: `free`)."""
        budget = min(params.max_tokens, self.tokens.cache.positions - len(prompt_ids))
        constraint = None
        if params.grammar is not None:
            constraint = Constraint(params.grammar, self.tokenizer, self.vocab_size)
        drafter = self.drafter() if self.drafter is not None else None
        generator = make_generator(params.seed)
        self.tokens.add(key, prompt_ids, params, generator, constraint, drafter, self.k_max, budget)
        self._texts[key] = TextAssembler(self.tokenizer, params, budget)

    def cancel(self, key: K) -> Delta:
        """``key`` leaves now; its last delta, finish_reason "cancelled"."""
        text = self._texts[key]
        text.finish = "cancelled"
        return self._end(key)

    def step(self) -> list[tuple[K, Delta]]:
        """One step of every running sequence -> the deltas it made, in order; a sequence's last delta
        (finish_reason set) means it has left the batch."""
        out = [(key, self._end(key)) for key, text in list(self._texts.items()) if text.finish is not None]
        for key, accepted in self.tokens.step().items():
            text = self._texts[key]
            if (delta := text.add(accepted)) is not None:
                out.append((key, delta))
            if text.finish is not None:
                out.append((key, self._end(key)))
        return out

    def _end(self, key: K) -> Delta:
        stats, reused = self.tokens.stats(key), self.tokens.reused(key)
        self.tokens.remove(key)
        last = self._texts.pop(key).last()
        figures = {**last.stats, "cached_prompt_tokens": reused}
        return replace(last, stats=figures if stats is None else {**figures, **stats.as_dict()})
