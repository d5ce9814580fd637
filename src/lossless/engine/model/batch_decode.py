"""Continuous batching of plain decoding: sequences join and leave a running batch at every step.

    TokenBatch   sequences in KV cache slots; a step is one forward (`batch_forward.forward_packed`) over
                 every decoding sequence's last token and a chunk of each newcomer's prompt, then one token
                 drawn for each sequence whose prompt is in, with its own parameters, grammar and generator
    DecodeBatch  a TokenBatch whose tokens become text deltas (`generate.TextAssembler`, as alone): what
                 the server steps

Exact under load: a sequence's tokens depend on its own prompt, parameters and seed, never on who shares
its steps. The forward is batch-invariant where the model's matmuls are (`batch_forward.row_invariant`:
our int4 and Q8_0 kernels; dense float32 and bfloat16 ones are not, and ``invariant`` says so); a prompt
is cut into chunks of ``chunk`` tokens from its start whatever else runs, so it is processed in the same
pieces in any batch (how many newcomers' chunks go into one step, ``prefill_budget``, changes when a
chunk runs, not what it computes); each sequence draws from its own generator, seeded as its request says
(`sampling.make_generator`).

Not the path of `generate.plain_tokens`: a prompt alone there runs in one piece and a decode step's norms
take another rounding (`batch_forward.rms_norm_rows`), so the same request may differ between a server
that batches and one that does not, as between an eager and a compiled one (``system_fingerprint`` names
the batch). Thread-confined: one thread steps a batch.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

from lossless.engine.model.batch_forward import SlotCache, Span, forward_packed, row_invariant
from lossless.engine.model.constrain import Constraint
from lossless.engine.model.generate import Accepted, Delta, TextAssembler, choose
from lossless.engine.model.sampling import SamplingParams, make_generator
from lossless.engine.model.tokenizer import Tokenizer
from lossless.engine.model.transformer import Transformer

K = TypeVar("K", bound=Hashable)  # what the caller names its sequences by (the server: its jobs)

PREFILL_CHUNK = 128  # a prompt's tokens per step: a long prompt holds a step up for one chunk at most
PREFILL_BUDGET = 256  # the newcomers' prompt tokens per step (the first waiting chunk always goes)


@dataclass(eq=False)
class _Sequence:
    slot: int
    prompt: list[int]
    params: SamplingParams
    generator: torch.Generator
    constraint: Constraint | None
    cached: int = 0  # positions in its slot: prompt tokens prefilled, then drawn tokens fed back
    pending: int | None = None  # the last token drawn: the next step feeds it

    def next_span(self, chunk: int) -> tuple[Span, list[int]]:
        """What it runs next: its pending token, or its prompt's next chunk."""
        if self.pending is not None:
            return Span(self.slot, self.cached, 1), [self.pending]
        n = min(chunk, len(self.prompt) - self.cached)
        return Span(self.slot, self.cached, n), self.prompt[self.cached : self.cached + n]


class TokenBatch(Generic[K]):
    """Up to ``slots`` sequences of up to ``positions`` tokens each (prompt and generated), stepped together.
    The caller ends a sequence (`remove`) before it outgrows its slot."""

    def __init__(
        self,
        model: Transformer,
        slots: int,
        positions: int,
        chunk: int = PREFILL_CHUNK,
        prefill_budget: int = PREFILL_BUDGET,
    ) -> None:
        self.model, self.chunk, self.prefill_budget = model, chunk, prefill_budget
        self.invariant = row_invariant(model)  # a sequence's numbers do not depend on who shares its steps
        self.cache = SlotCache(model, slots, positions)
        self._free = list(range(slots - 1, -1, -1))  # pop() takes the lowest free slot
        self.running: dict[K, _Sequence] = {}  # in the order they joined: the oldest prefills first

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
    ) -> None:
        assert key not in self.running and self._free, "a sequence joins once, into a free slot"
        assert 0 < len(prompt) <= self.cache.positions, "the caller fits prompts to the context"
        self.running[key] = _Sequence(self._free.pop(), list(prompt), params, generator, constraint)

    def remove(self, key: K) -> None:
        """The sequence leaves now (finished or cancelled): its slot is free for the next step."""
        self._free.append(self.running.pop(key).slot)

    @torch.inference_mode()
    def step(self) -> dict[K, Accepted]:
        """One forward over the planned spans -> the token each sequence drew this step (a newcomer whose
        prompt is not all in yet draws none)."""
        plan = self._plan()
        if not plan:
            return {}
        hidden = self._forward(plan)  # [N, dim]
        drawing, rows, offset = [], [], 0
        for key, seq, span, _ in plan:
            offset += span.length
            seq.cached = span.end
            if seq.cached == len(seq.prompt) or seq.pending is not None:
                drawing.append((key, seq))
                rows.append(offset - 1)  # the span's last token predicts the next
        logits = self.model.output(hidden[rows]).float()  # [R, V]: only the rows drawn from
        drawn = {}
        for (key, seq), row in zip(drawing, logits, strict=True):
            if seq.constraint is not None:
                row = seq.constraint.mask(row)
            token = choose(row, seq.params, seq.generator)
            if seq.constraint is not None:
                seq.constraint.advance(token)
            seq.pending = token
            drawn[key] = Accepted([token], row[None])
        return drawn

    def _plan(self) -> list[tuple[K, _Sequence, Span, list[int]]]:
        """Every decoding sequence's pending token, and newcomers' next chunks, oldest first, within the
        step's prompt budget; prompt chunks first (a float32 prompt twin runs them apart)."""
        chunks: list[tuple[K, _Sequence, Span, list[int]]] = []
        decodes: list[tuple[K, _Sequence, Span, list[int]]] = []
        budget = self.prefill_budget
        for key, seq in self.running.items():
            span, tokens = seq.next_span(self.chunk)
            assert span.end <= self.cache.positions, "a sequence outgrew its slot: the caller ends it first"
            if seq.pending is not None:
                decodes.append((key, seq, span, tokens))
            elif not chunks or span.length <= budget:
                chunks.append((key, seq, span, tokens))
                budget -= span.length
        return chunks + decodes

    def _forward(self, plan: list[tuple[K, _Sequence, Span, list[int]]]) -> torch.Tensor:
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
    stop sequence, max_tokens, the context), or when the caller cancels them."""

    def __init__(self, model: Transformer, tokenizer: Tokenizer, vocab_size: int, slots: int) -> None:
        self.tokens: TokenBatch[K] = TokenBatch(model, slots, model.max_seq_len)
        self.tokenizer, self.vocab_size = tokenizer, vocab_size
        self._texts: dict[K, TextAssembler] = {}

    @property
    def slots(self) -> int:
        return self.tokens.cache.slots

    @property
    def invariant(self) -> bool:
        """Each sequence's tokens are those it would get alone (`batch_forward.row_invariant`)."""
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
        self.tokens.add(key, prompt_ids, params, make_generator(params.seed), constraint)
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
        self.tokens.remove(key)
        return self._texts.pop(key).last()
