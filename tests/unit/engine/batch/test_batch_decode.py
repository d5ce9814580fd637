"""Continuous batching (`engine.batch.decode`) is exact: a sequence's tokens do not depend on who shares
its steps. Greedy and seeded sampled tokens of each sequence in a mixed batch (prompts of several lengths,
some cut into several chunks, arriving at different steps, with other budgets, in fewer slots than
sequences so that slots are reused) equal the same sequence's alone, and so do the logits, bit for bit, in
the served numerics (int4 on our kernel, with and without a float32 prompt twin); dense matmuls, which are
not invariant, are not taken for it; sampled tokens follow the exactly enumerated distribution
(chi-square), and a batch whose attention reads another slot fails that test. The norm that makes the
pass batch-invariant is tested against the one it replaces (on this tiny model the int8 rounding of our
kernel hides the plain norm's last bits; on SmolLM2 they changed 3 of 4 greedy answers); the text each
sequence gets is what `generate_text` makes of its tokens (stops, budgets, logprobs), and a grammar holds
inside a batch.

Speculating inside the batch keeps all of it: greedy sequences drafting n-gram chains or trees (whose
accepted paths move in their slots) get plain decoding's tokens alone, from the same logits to the bit;
sampled ones drafting a draft model's chains or trees follow the exact distribution, and skipping the
residual fails that test; no draft runs past a budget; drafts shrink as more sequences decode; the last
delta carries the acceptance figures.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path

import pytest
import torch
from exact_models import (
    ALPHA,
    NEW,
    accept_no_residual,
    chi_square_pvalue,
    micro_pair,
    tiny,
    transformer_truth,
)
from tiny_gguf import Q, write_gguf
from tiny_grammar import PRINTABLE, char_tokenizer

from lossless.engine.batch import decode, forward as batch_forward, sequence
from lossless.engine.batch.decode import DecodeBatch, TokenBatch
from lossless.engine.batch.forward import Span, rms_norm_rows, row_invariant
from lossless.engine.engine import Engine
from lossless.engine.model.constrain import json_schema_grammar
from lossless.engine.model.generate import Accepted, Delta, generate_text
from lossless.engine.model.sampling import SamplingParams, make_generator
from lossless.engine.model.transformer import RMSNorm, Transformer
from lossless.engine.speculate.drafts import ModelDrafter, ngram_lookup
from lossless.engine.speculate.spec import parse_drafter_spec
from lossless.engine.speculate.speculative import Draft, Drafter, judge_chain
from lossless.engine.speculate.stats import SpecStats

pytestmark = pytest.mark.usefixtures("torch_one_thread")  # tiny tensors: a second thread only waits

GREEDY = SamplingParams(temperature=0.0)
SAMPLED = SamplingParams(temperature=0.8, top_k=20, top_p=0.9)
LENGTHS = (3, 40, 7, 75, 12, 33, 1, 5)  # 40, 75 and 33 take several chunks of 16
BUDGETS = (12, 30, 5, 20, 25, 9, 30, 16)  # tokens each generates, then leaves


def prompts(vocab: int) -> list[list[int]]:
    gen = torch.Generator().manual_seed(0)
    return [torch.randint(0, vocab, (n,), generator=gen).tolist() for n in LENGTHS]


def run_batch(
    model: Transformer,
    requests: list[tuple[list[int], SamplingParams, int | None]],
    slots: int,
    arrivals: list[int],
    budgets: tuple[int, ...] = BUDGETS,
    drafter: Callable[[], Drafter] | None = None,
) -> list[list[int]]:
    """Each request (prompt, params, seed) joins at its arrival step, or the first step after with a free
    slot, and leaves after its budget of tokens: the tokens each drew, and (in ``LOGITS``, by request) the
    logits it drew them from. With ``drafter``, each speculates with one of its own (3 tokens a draft at
    most, drafts never cut by the batch's size)."""
    batch: TokenBatch[int] = TokenBatch(model, slots, 128, chunk=16, prefill_budget=24, draft_rows=64)
    out: list[list[int]] = [[] for _ in requests]
    LOGITS.clear()
    STATS.clear()
    REUSED.clear()
    waiting = sorted(range(len(requests)), key=lambda i: arrivals[i])
    for step in range(1000):
        while waiting and arrivals[waiting[0]] <= step and batch.free():
            i = waiting.pop(0)
            prompt, params, seed = requests[i]
            mine = drafter() if drafter is not None else None
            batch.add(i, prompt, params, make_generator(seed), drafter=mine, k_max=3, budget=budgets[i])
        if not waiting and not batch.running:
            return out
        for i, accepted in batch.step().items():
            out[i] += accepted.token_ids
            LOGITS.setdefault(i, []).append(accepted.logits)
            assert len(out[i]) <= budgets[i], "a draft ran past the budget"
            if len(out[i]) == budgets[i]:
                STATS[i] = batch.stats(i)
                REUSED[i] = batch.reused(i)
                batch.remove(i)
    raise AssertionError("the batch did not finish")


LOGITS: dict[int, list[torch.Tensor]] = {}
STATS: dict[int, SpecStats | None] = {}
REUSED: dict[int, int] = {}  # by request: its prompt tokens found cached (`TokenBatch.reused`)


def alone_and_mixed(
    model: Transformer,
    params: SamplingParams,
    seeds: list[int | None],
    drafts_from: Callable[[dict[tuple[int, ...], list[int]]], Callable[[], Drafter]] | None = None,
) -> tuple[list[list[int]], list[list[int]]]:
    """Each request's tokens alone (plain decoding) and in the mixed batch (speculating, where given, with
    the drafter ``drafts_from`` makes of each prompt's answer alone); the logits they were drawn from must
    be the same to the bit (a stronger check than the tokens: a tiny random model's argmax rarely flips)."""
    requests = [(p, params, s) for p, s in zip(prompts(model.args.vocab_size), seeds, strict=True)]
    alone, logits = [], []
    for i, request in enumerate(requests):
        alone.append(run_batch(model, [request], 1, [0], (BUDGETS[i],))[0])
        logits.append(torch.cat(LOGITS[0]))
    answers = {tuple(r[0]): a for r, a in zip(requests, alone, strict=True)}
    drafter = drafts_from(answers) if drafts_from is not None else None
    mixed = run_batch(model, requests, 3, [0, 0, 2, 3, 3, 9, 10, 30], drafter=drafter)
    moved = [i for i in range(len(requests)) if not torch.equal(torch.cat(LOGITS[i]), logits[i])]
    assert moved == [], f"requests whose logits moved in the batch: {moved}"
    return alone, mixed


@pytest.fixture(scope="module")
def q4_gguf(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny model as llama.cpp writes SmolLM2: Q4_1 layers, a Q8_0 output layer."""
    return write_gguf(
        tiny_checkpoint, tmp_path_factory.mktemp("q4") / "tiny-q4_1.gguf", Q.Q4_1, output=Q.Q8_0
    )


def int4_model(path: Path, float32_prompts: bool) -> Transformer:
    """The served numerics (int4 on our kernel, the output layer on the file's Q8_0 blocks), with or without
    the float32 prompt twin a CPU without bfloat16 instructions gets; skipped where our kernels are not."""
    model = Engine.load(path, dtype="int4", float32_prompts=float32_prompts).model
    if not row_invariant(model):
        pytest.skip("our int4 and 8-bit kernels are not built here (AVX-512 VNNI)")
    assert (model.prompt_model is not None) == float32_prompts
    return model


@pytest.mark.parametrize("float32_prompts", [False, True], ids=["int4", "int4, float32 prompts"])
def test_greedy_tokens_in_a_mixed_batch_equal_each_alone(q4_gguf: Path, float32_prompts: bool) -> None:
    model = int4_model(q4_gguf, float32_prompts)
    alone, mixed = alone_and_mixed(model, GREEDY, [None] * len(LENGTHS))
    assert [len(t) for t in mixed] == list(BUDGETS)
    assert mixed == alone
    assert len({tuple(t[:5]) for t in alone}) > 4  # the prompts lead somewhere different


def test_seeded_samples_in_a_mixed_batch_equal_each_alone(q4_gguf: Path) -> None:
    """Each sequence draws from its own generator: its seed decides its tokens, whoever shares its steps."""
    model = int4_model(q4_gguf, float32_prompts=False)
    alone, mixed = alone_and_mixed(model, SAMPLED, list(range(len(LENGTHS))))
    assert mixed == alone
    again, _ = alone_and_mixed(model, SAMPLED, list(range(1, len(LENGTHS) + 1)))
    assert again != alone  # other seeds, other tokens: the seed is what decides


def shared_prefixes(
    model: Transformer,
) -> tuple[list[tuple[list[int], SamplingParams, None]], tuple[int, ...]]:
    """Requests whose prompts begin alike: three on a 20-token head, then the first prompt again, then the
    second prompt followed by the first 4 tokens it answers alone (its slot holds them after it leaves)."""
    gen = torch.Generator().manual_seed(5)
    head = torch.randint(0, model.args.vocab_size, (20,), generator=gen).tolist()
    tails = [torch.randint(0, model.args.vocab_size, (n,), generator=gen).tolist() for n in (6, 9, 3)]
    first = [head + tail for tail in tails]
    answer = run_batch(model, [(first[1], GREEDY, None)], 1, [0], (12,))[0]
    prompts = [*first, first[0], first[1] + answer[:4]]
    return [(p, GREEDY, None) for p in prompts], (12, 12, 8, 6, 6)


def moved_by_reuse(model: Transformer) -> tuple[list[int], list[int], list[int]]:
    """`shared_prefixes`' requests each in a fresh batch (nothing cached), then together in 3 slots, arriving
    so that each kind of reuse happens -> the requests whose logits moved, how many prompt tokens each found
    cached together, and the prompts' lengths."""
    requests, budgets = shared_prefixes(model)
    alone = []
    for i, request in enumerate(requests):
        run_batch(model, [request], 1, [0], (budgets[i],))
        assert REUSED[0] == 0  # a fresh batch has nothing cached
        alone.append(torch.cat(LOGITS[0]))
    run_batch(model, requests, 3, [0, 0, 3, 40, 40], budgets)
    moved = [i for i in range(len(requests)) if not torch.equal(torch.cat(LOGITS[i]), alone[i])]
    return moved, [REUSED[i] for i in range(len(requests))], [len(p) for p, _, _ in requests]


def test_a_prompt_starts_from_what_another_sequence_cached_with_the_same_numbers(q4_gguf: Path) -> None:
    """Rows computed each from itself alone make a position's keys and values a function of the tokens up
    to it: a newcomer starts from the longest prefix of its prompt that a running sequence's slot holds
    (copied) or a free slot kept (in place), and its logits are bit for bit those of the same prompt in a
    fresh batch. Prompts through torch's attention in chunks (not row by row) would not be: with them the
    same reuse moves the logits."""
    model = int4_model(q4_gguf, float32_prompts=False)
    assert TokenBatch(model, 1, 8).rowwise
    moved, reused, lengths = moved_by_reuse(model)
    assert moved == []
    # 0 and 1 join together: 0's first chunk of 16 runs alone (the step's prompt budget is 24), and 1 copies
    # it before its own; 2 copies the head from a running slot; 3 finds all of its prompt but the last
    # token in 0's free slot, 4 all of 1's prompt and answer but its last token in 1's
    assert reused == [0, 16, 20, lengths[3] - 1, lengths[4] - 1]


def test_reused_positions_are_exact_only_where_prompts_go_row_by_row(
    q4_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The mutation the test above must catch: the same reuse over prompts run through torch's attention
    in one piece (whose sums for a row depend on the rows beside it) moves a newcomer's logits."""
    model = int4_model(q4_gguf, float32_prompts=False)
    next_span = sequence.BatchSequence.next_span

    def in_one_piece(seq: sequence.BatchSequence, chunk: int) -> tuple[Span, list[int]]:
        span, tokens = next_span(seq, chunk)
        return (span if seq.pending is not None else Span(span.slot, span.start, span.length)), tokens

    monkeypatch.setattr(sequence.BatchSequence, "next_span", in_one_piece)
    moved, _, _ = moved_by_reuse(model)
    assert any(i in moved for i in range(2, 5))


def test_dense_matmuls_are_not_taken_for_batch_invariant(tiny_checkpoint: Path, q4_gguf: Path) -> None:
    """float32 and bfloat16 weights run on MKL's and oneDNN's matmuls, whose sums for a row change with
    the rows beside it: their batch says so (``-variant`` in system_fingerprint); so does int4 on torch's
    kernel, which nothing has shown to be invariant."""
    assert not row_invariant(Engine.load(tiny_checkpoint, dtype="float32").model)
    assert not row_invariant(Engine.load(tiny_checkpoint, dtype="bfloat16").model)
    assert not row_invariant(Engine.load(q4_gguf, dtype="int4", int4_kernel="torch").model)
    float32 = Engine.load(tiny_checkpoint, dtype="float32").model
    with pytest.raises(AssertionError, match="logits moved"):  # measured here: MKL's float32 sums move
        alone_and_mixed(float32, GREEDY, [None] * len(LENGTHS))


@pytest.mark.parametrize("ours", [True, False], ids=["our kernel", "torch's ops"])
def test_the_norm_is_the_same_for_a_row_in_any_batch(ours: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """`rms_norm_rows` against `RMSNorm.forward` it replaces in the batch: the plain norm's rsqrt of the
    [N, 1] column takes SIMD or scalar instructions by the row's place in the batch (its last bits
    differ); the batch's gives every row the same result in a batch of any size, in our kernel
    (`block_kernels.norm_rows`) and in torch's ops where the kernel is not built."""
    if ours and not batch_forward.rows_kernel(torch.bfloat16):
        pytest.skip("our kernels are not built here")
    if not ours:
        monkeypatch.setattr(batch_forward, "rows_kernel", lambda *dtypes: False)
    norm = RMSNorm(576, 1e-5).bfloat16()
    rows = (torch.randn(80, 576, generator=torch.Generator().manual_seed(0)) * 3).bfloat16()
    moved = {"plain": 0, "rows": 0}
    for n in range(1, 80):
        for name, fn in (("plain", norm), ("rows", lambda x: rms_norm_rows(norm, x))):
            together = fn(rows[:n])
            moved[name] += sum(not torch.equal(fn(rows[r : r + 1]), together[r : r + 1]) for r in range(n))
    assert moved["rows"] == 0
    if moved["plain"] == 0:
        pytest.skip("this CPU's rsqrt gives the same bits on both paths: the plain norm is invariant here")


def test_sampled_sequences_in_a_mixed_batch_follow_the_exact_distribution() -> None:
    target, _ = micro_pair()
    assert chi_square_pvalue(micro_samples(target)[0], micro_truth(target)) > ALPHA


def test_a_batch_whose_attention_reads_another_slot_fails_the_same_test(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target, _ = micro_pair()

    def slot_zero(cache: torch.Tensor, span: Span) -> torch.Tensor:  # cross-talk between sequences
        return cache[0:1, :, : span.end]

    monkeypatch.setattr(batch_forward, "span_cache", slot_zero)
    assert chi_square_pvalue(micro_samples(target)[0], micro_truth(target)) < ALPHA


MICRO_PROMPT, MICRO_PARAMS, MICRO_SAMPLES = [1, 5, 2, 7, 3], SamplingParams(temperature=0.9, top_k=4), 2000


def micro_truth(target: Transformer) -> dict:
    return transformer_truth(target, MICRO_PROMPT, MICRO_PARAMS)


def micro_samples(
    target: Transformer, drafter: Callable[[], Drafter] | None = None
) -> tuple[list[tuple[int, ...]], SpecStats]:
    """MICRO_SAMPLES continuations of the prompt, each a sequence of its own (seed i), sharing a batch of
    6 slots with sequences of other prompts, lengths and parameters that join in between; with
    ``drafter``, every sequence speculates (3 tokens a draft at most): the samples and the acceptance
    figures of them all."""
    batch: TokenBatch[int] = TokenBatch(target, 6, 64, chunk=4, prefill_budget=6, draft_rows=64)
    for t in batch.cache.k + batch.cache.v:  # a mutation may read unwritten positions: zeros, not garbage
        t.zero_()
    others = [
        ([3, 1, 4, 1, 5, 2, 6][: 1 + i % 7], SamplingParams(temperature=0.5 + i % 3 / 2)) for i in range(50)
    ]
    got: dict[int, list[int]] = {}
    total = SpecStats(3)
    queue = [(i, MICRO_PROMPT, MICRO_PARAMS) for i in range(MICRO_SAMPLES)]
    for j, (prompt, params) in enumerate(others):  # a distractor every 40 samples, each for 9 tokens
        queue.insert(40 * j + j, (-1 - j, prompt, params))
    while queue or batch.running:
        while queue and batch.free():
            key, prompt, params = queue.pop(0)
            mine = drafter() if drafter is not None else None
            budget = NEW if key >= 0 else 9
            batch.add(key, prompt, params, make_generator(key), drafter=mine, k_max=3, budget=budget)
            got[key] = []
        for key, accepted in batch.step().items():
            got[key] += accepted.token_ids
            if len(got[key]) == (NEW if key >= 0 else 9):
                if (stats := batch.stats(key)) is not None:
                    total.drafted, total.accepted = (
                        total.drafted + stats.drafted,
                        total.accepted + stats.accepted,
                    )
                batch.remove(key)
    return [tuple(got[i]) for i in range(MICRO_SAMPLES)], total


class LookupTree:
    """Prompt lookup's chain with a random decoy beside each of its nodes, listed first: a tree whose
    accepted path is never where its first-listed nodes were, so the batch moves its cache entries."""

    def __init__(self, vocab: int) -> None:
        self.vocab, self.rng = vocab, torch.Generator().manual_seed(0)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        pass

    def propose(self, context, k, params, generator, hidden):  # type: ignore[no-untyped-def]
        tokens: list[int] = []
        parents: list[int] = []
        parent = -1
        for token in ngram_lookup(context, k, 3, 1):
            tokens += [int(torch.randint(self.vocab, (), generator=self.rng)), token]
            parents += [parent, parent]
            parent = len(tokens) - 1
        return Draft(tokens, None, parents) if tokens else Draft([], None)

    def observe(self, drafted: int, accepted: int) -> None:
        pass


def model_drafts(draft: Transformer) -> Callable[[], Drafter]:
    """A draft model's sampled chains, with a copy of the model for each sequence (its KV cache holds one)."""
    return lambda: ModelDrafter(copy.deepcopy(draft), threshold=0.0)


class Replay:
    """Drafts the answer the request got alone, a token in four replaced by a random one: long accepted
    runs and rejections in every step's position. ``tree``: each drafted token with a random decoy beside
    it, listed first, so that an accepted path is never where its first-listed nodes were."""

    def __init__(self, answers: dict[tuple[int, ...], list[int]], vocab: int, tree: bool) -> None:
        self.answers, self.vocab, self.tree = answers, vocab, tree
        self.rng = torch.Generator().manual_seed(0)

    def begin(self, prompt_ids: Sequence[int]) -> None:
        self.prompt, self.answer = len(prompt_ids), self.answers[tuple(prompt_ids)]

    def _random(self) -> int:
        return int(torch.randint(self.vocab, (), generator=self.rng))

    def propose(self, context, k, params, generator, hidden):  # type: ignore[no-untyped-def]
        done = len(context) - self.prompt
        chain = [
            t if float(torch.rand((), generator=self.rng)) > 0.25 else self._random()
            for t in self.answer[done : done + k]
        ]
        if not self.tree:
            return Draft(chain, None)
        tokens: list[int] = []
        parents: list[int] = []
        for token in chain:
            parent = len(tokens) - 1 if tokens else -1
            tokens += [self._random(), token]
            parents += [parent, parent]
        return Draft(tokens, None, parents) if tokens else Draft([], None)

    def observe(self, drafted: int, accepted: int) -> None:
        pass


@pytest.mark.parametrize("tree", [False, True], ids=["chains", "trees"])
def test_greedy_sequences_speculating_in_a_mixed_batch_get_plain_decoding_s_tokens_alone(
    q4_gguf: Path, tree: bool
) -> None:
    """Every token is the target's own, from the same logits to the bit, whatever its step verified beside
    it (drafts, decoys, other sequences), and the budgets hold (`run_batch`)."""
    model = int4_model(q4_gguf, float32_prompts=False)
    vocab = model.args.vocab_size
    alone, mixed = alone_and_mixed(
        model, GREEDY, [None] * len(LENGTHS), lambda answers: functools.partial(Replay, answers, vocab, tree)
    )
    assert mixed == alone
    stats = [s for s in STATS.values() if s is not None]
    assert sum(s.accepted for s in stats) > 40 and sum(s.drafted - s.accepted for s in stats) > 10


def test_a_decoding_step_s_layers_in_one_call_give_the_bits_of_op_by_op(
    q4_gguf: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step of decoding rows only (trees of drafts, other sequences beside) runs every layer in one call
    of our kernels (`block_kernels.decode_layers`); the same batch with each layer op by op in Python gives
    every request the same logits, to the bit."""
    model = int4_model(q4_gguf, float32_prompts=False)
    requests = [(p, GREEDY, None) for p in prompts(model.args.vocab_size)]
    answers = {
        tuple(r[0]): run_batch(model, [r], 1, [0], (b,))[0] for r, b in zip(requests, BUDGETS, strict=True)
    }
    replay = functools.partial(Replay, answers, model.args.vocab_size, True)
    calls = []
    in_one = batch_forward.block_kernels.decode_layers
    monkeypatch.setattr(
        batch_forward.block_kernels, "decode_layers", lambda *a: calls.append(a) or in_one(*a)
    )
    run_batch(model, requests, 3, [0, 0, 2, 3, 3, 9, 10, 30], drafter=replay)
    one_call = {i: torch.cat(logits) for i, logits in LOGITS.items()}
    assert len(calls) > 20 and max(len(a[0]) for a in calls) > 3  # steps of several sequences and drafts
    monkeypatch.setattr(batch_forward, "layer_stack", lambda model: None)
    steps = len(calls)
    run_batch(model, requests, 3, [0, 0, 2, 3, 3, 9, 10, 30], drafter=replay)
    assert len(calls) == steps
    assert [i for i in range(len(requests)) if not torch.equal(one_call[i], torch.cat(LOGITS[i]))] == []


@pytest.mark.parametrize("kind", ["draft model chains", "trees"])
def test_sampled_sequences_speculating_in_a_mixed_batch_follow_the_exact_distribution(kind: str) -> None:
    target, draft = micro_pair()
    drafter = (
        model_drafts(draft)
        if kind == "draft model chains"
        else functools.partial(LookupTree, target.args.vocab_size)
    )
    samples, stats = micro_samples(target, drafter)
    assert 0 < stats.accepted < stats.drafted  # drafts were accepted, and rejected
    assert chi_square_pvalue(samples, micro_truth(target)) > ALPHA


def test_a_batch_that_skips_the_residual_fails_the_same_test(monkeypatch: pytest.MonkeyPatch) -> None:
    target, draft = micro_pair()
    monkeypatch.setattr(decode, "judge_chain", functools.partial(judge_chain, accept=accept_no_residual))
    samples, _ = micro_samples(target, model_drafts(draft))
    assert chi_square_pvalue(samples, micro_truth(target)) < ALPHA


class Asked:
    """Drafts nothing; remembers the draft lengths it was allowed."""

    def __init__(self) -> None:
        self.asked: list[int] = []

    def begin(self, prompt_ids: Sequence[int]) -> None:
        pass

    def propose(self, context, k, params, generator, hidden):  # type: ignore[no-untyped-def]
        self.asked.append(k)
        return Draft([], None)

    def observe(self, drafted: int, accepted: int) -> None:
        pass


@pytest.mark.parametrize(("decoding", "allowed"), [(1, 7), (2, 3), (3, 1), (4, 1), (5, 0), (8, 0)])
def test_drafts_shrink_as_more_sequences_decode(decoding: int, allowed: int) -> None:
    """Eight decoding tokens a step (draft_rows), shared: none drafted from four sequences on."""
    batch: TokenBatch[int] = TokenBatch(tiny(0), 8, 64, draft_rows=8)
    drafters = [Asked() for _ in range(decoding)]
    for i, drafter in enumerate(drafters):
        batch.add(i, [1, 2, 3], GREEDY, make_generator(None), drafter=drafter, k_max=7)
    batch.step()  # the prompts
    batch.step()
    assert [d.asked for d in drafters] == [[allowed] if allowed else []] * decoding  # 0: not asked at all


class Wrong(Asked):
    """Drafts k tokens, every one a token the target does not choose next (greedy): a yield of 1 a step."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def propose(self, context, k, params, generator, hidden):  # type: ignore[no-untyped-def]
        self.asked.append(k)
        with torch.inference_mode():
            choice = int(
                self.model(torch.tensor([list(context)]), torch.arange(len(context)))[0, -1].argmax()
            )
        return Draft([(choice + 1) % self.model.args.vocab_size] * k, None)


def test_beside_others_only_drafts_that_yield_go_on() -> None:
    """Rejected drafts (a yield of 1 token a step) stop beside another decoding sequence, and go on alone."""
    model = tiny(0)
    batch: TokenBatch[int] = TokenBatch(model, 2, 64, draft_rows=8)
    wrong, alone = Wrong(model), Wrong(model)
    batch.add(0, [1, 2, 3], GREEDY, make_generator(None), drafter=wrong, k_max=3)
    batch.add(1, [4, 5], GREEDY, make_generator(None), drafter=Asked(), k_max=3)
    for _ in range(4):
        batch.step()
    assert wrong.asked == [3]  # yielded 1: not asked again while the other decodes
    lone: TokenBatch[int] = TokenBatch(model, 2, 64, draft_rows=8)
    lone.add(0, [1, 2, 3], GREEDY, make_generator(None), drafter=alone, k_max=3)
    for _ in range(4):
        lone.step()
    assert alone.asked == [3, 3, 3]


def test_the_last_delta_carries_the_acceptance_figures(tiny_checkpoint: Path) -> None:
    engine = Engine.load(tiny_checkpoint)
    engine.use_drafter(parse_drafter_spec("ngram"))
    batch: DecodeBatch[int] = engine.decode_batch(2)
    for i in range(2):
        batch.add(
            i,
            engine.encode("one two one two one two one two"),
            SamplingParams(max_tokens=30 - i, temperature=0),
        )
    last: dict[int, Delta] = {}
    tokens = {0: 0, 1: 0}
    while batch.running():
        for key, delta in batch.step():
            tokens[key] += len(delta.token_ids)
            if delta.finish_reason is not None:
                last[key] = delta
    for i in range(2):
        stats = last[i].stats
        assert stats["completion_tokens"] == tokens[i] <= 30 - i
        assert stats["steps"] >= 1 and stats["drafted"] >= stats["accepted"] >= 0
        assert stats["mean_accepted_length"] is not None


def test_each_sequence_gets_the_text_generate_text_makes_of_its_tokens(tiny_checkpoint: Path) -> None:
    engine = Engine.load(tiny_checkpoint)
    kinds = [
        SamplingParams(max_tokens=20, temperature=0, stop=("e", "a")),
        SamplingParams(max_tokens=7, temperature=0, logprobs=True, top_logprobs=2),
        SamplingParams(max_tokens=25, temperature=0.7, seed=3),
    ]
    batch: DecodeBatch[int] = engine.decode_batch(2)
    texts = ["Hello there", "One two three four five six", "x"]
    for i in range(2):
        batch.add(i, engine.encode(texts[i]), kinds[i])
    deltas: dict[int, list] = {0: [], 1: [], 2: []}
    while batch.running():
        for key, delta in batch.step():
            deltas[key].append(delta)
            if key == 0 and delta.finish_reason is not None:
                batch.add(2, engine.encode(texts[2]), kinds[2])  # joins the slot 0 left
    for i, params in enumerate(kinds):
        tokens = [t for d in deltas[i] for t in d.token_ids]
        assert deltas[i][-1].finish_reason in ("stop", "length")
        source = replay(tokens, engine.args.vocab_size)
        replayed = list(generate_text(source, engine.tokenizer, params, budget=params.max_tokens))
        assert [(d.text, d.token_ids, d.finish_reason) for d in deltas[i]] == [
            (d.text, d.token_ids, d.finish_reason) for d in replayed
        ]
    assert deltas[0][-1].finish_reason == "stop"  # "e" or "a" came up: the text was cut before it
    logprobs = [lp for d in deltas[1] for lp in d.logprobs]
    assert [lp.token_id for lp in logprobs] == [t for d in deltas[1] for t in d.token_ids]
    assert all(len(lp.top) == 2 and lp.top[0][2] >= lp.logprob for lp in logprobs)  # greedy: the top one


def replay(tokens: list[int], vocab: int) -> Iterator[Accepted]:
    for token in tokens:
        logits = torch.zeros(1, vocab)
        logits[0, token] = 5.0
        yield Accepted([token], logits)


def test_a_cancelled_sequence_leaves_at_once_and_a_grammar_holds_in_the_batch() -> None:
    model = tiny(0)
    tokenizer = char_tokenizer(PRINTABLE)
    tag = {"type": "string", "enum": ["ab", "cd"]}
    schema = {
        "type": "object",
        "properties": {"tag": tag},
        "required": ["tag"],
        "additionalProperties": False,
    }
    constrained = SamplingParams(max_tokens=30, temperature=0, grammar=json_schema_grammar(schema))
    batch: DecodeBatch[str] = DecodeBatch(model, tokenizer, 96, slots=2)
    batch.add("json", [3, 17, 42, 8], constrained)
    batch.add("free", [5, 6, 7], SamplingParams(max_tokens=30, temperature=0))
    text = ""
    for _ in range(3):
        text += "".join(d.text for key, d in batch.step() if key == "json")
    last = batch.cancel("free")
    assert last.finish_reason == "cancelled" and batch.free() == 1 and batch.running() == 1
    while batch.running():
        text += "".join(d.text for key, d in batch.step() if key == "json")
    assert json.loads(text)["tag"] in ("ab", "cd")
