"""The DSpark-style draft head: lossless as a drafter (it is only another q), its stop rule, its files,
and the training data's indexing. The trained head on the real model: tests/integration."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from exact_models import (
    ALPHA,
    MICRO,
    chi_square_pvalue,
    draw,
    micro_pair,
    transformer_truth,
)

from lossless.draft.data import TOP, WINDOW, AnsweredPrompt
from lossless.draft.train import Anchors, draft_vocab, evaluate_head, losses
from lossless.engine.model.sampling import SamplingParams
from lossless.engine.speculate.drafts import NgramDrafter
from lossless.engine.speculate.head import DSparkHead, HeadConfig, load_head, save_head
from lossless.engine.speculate.head_drafter import HeadDrafter
from lossless.engine.speculate.speculative import speculative_decode
from lossless.errors import CheckpointError

pytestmark = pytest.mark.usefixtures("torch_one_thread")

DRAFT_VOCAB = torch.tensor([0, 1, 2, 3, 5, 7])  # 4 and 6 can never be drafted: q = 0 there


def micro_head(seed: int = 3, block: int = 3) -> DSparkHead:
    target, _ = micro_pair()
    config = HeadConfig(
        dim=MICRO.dim, vocab_size=MICRO.vocab_size, window=4, block=block, heads=4, ffn=32, rank=4
    )
    torch.manual_seed(seed)
    head = DSparkHead(config, target.tok_embeddings.weight.detach().float(), DRAFT_VOCAB)
    with torch.no_grad():  # a random head that is sharp enough to be accepted sometimes
        head.markov_out.weight.normal_(0, 2.0)
        head.conf.bias.fill_(3.0)
    return head.eval()


def test_head_drafter_keeps_the_target_distribution_exactly() -> None:
    target, _ = micro_pair()
    prompt = [1, 5, 2, 7, 3]
    params = SamplingParams(temperature=0.9, top_k=4)

    truth = transformer_truth(target, prompt, params)
    samples, stats = draw(target, HeadDrafter(micro_head(), threshold=0.0), prompt, 3000, params=params)
    assert stats.accept_counts[0] > 0 and stats.accept_counts[1] > 0 and stats.drafted > 0
    assert chi_square_pvalue(samples, truth) > ALPHA


@pytest.mark.parametrize(
    "compiled", [False, pytest.param(True, marks=pytest.mark.slow)], ids=["eager", "compiled"]
)  # compiled: the head's pass through torch.compile (a few seconds the first time on 2 cores)
def test_head_sampled_trees_keep_the_target_distribution_exactly(compiled: bool) -> None:
    target, _ = micro_pair()
    prompt = [1, 5, 2, 7, 3]
    params = SamplingParams(temperature=0.9, top_k=4)

    drafter = _Trees(micro_head(), threshold=0.0, tree=5)
    if compiled:
        drafter.compile()
    samples, stats = draw(target, drafter, prompt, 3000, params=params)
    assert drafter.branched > 1000 and stats.accept_counts[0] > 0 and stats.accept_counts[2] > 0
    assert chi_square_pvalue(samples, transformer_truth(target, prompt, params)) > ALPHA


@pytest.mark.parametrize("tree", [0, 4], ids=["chain", "grafted tree"])
def test_head_with_prompt_lookup_keeps_the_target_distribution_exactly(tree: int) -> None:
    """Copying where the text repeats, the head elsewhere: still only another q per step. With trees,
    a sampled step's lookup chain and the head's draws are siblings in one tree."""
    target, _ = micro_pair()
    prompt = [1, 5, 2, 7, 1, 5]  # the tail "1 5" occurred before: lookup drafts "2 7 1"
    params = SamplingParams(temperature=0.9, top_k=4)

    class Sources(HeadDrafter):
        def propose(self, context, k, params, generator, hidden):  # type: ignore[no-untyped-def]
            draft = super().propose(context, k, params, generator, hidden)
            if draft.tokens:
                used.append("head" if not self.looked_up else "grafted" if self.grafted else "lookup")
            return draft

    used: list[str] = []
    truth = transformer_truth(target, prompt, params)
    lookup = NgramDrafter(3, max_ngram=2, min_ngram=1)
    drafter = Sources(micro_head(), threshold=0.0, lookup=lookup, tree=tree)
    samples, stats = draw(target, drafter, prompt, 3000, params=params)
    assert used.count("grafted" if tree else "lookup") > 100 and used.count("head") > 100
    assert stats.accept_counts[0] > 0 and stats.accept_counts[1] > 0
    assert chi_square_pvalue(samples, truth) > ALPHA


def test_a_grafted_lookup_chain_is_told_only_what_its_own_branch_accepted() -> None:
    """The lookup's adaptive length must hear how much of *its* chain survived, not the head's."""
    target, _ = micro_pair()
    heard: list[tuple[int, int]] = []
    chains: list[list[int]] = []

    class Lookup(NgramDrafter):
        def propose(self, context, k, params, generator, hidden):  # type: ignore[no-untyped-def]
            draft = super().propose(context, k, params, generator, hidden)
            chains.append(draft.tokens)
            return draft

        def observe(self, drafted: int, accepted: int) -> None:
            heard.append((drafted, accepted))
            super().observe(drafted, accepted)

    drafter = HeadDrafter(micro_head(), threshold=0.0, lookup=Lookup(3, max_ngram=2, min_ngram=1), tree=4)
    want: list[tuple[int, int]] = []
    gen, params = torch.Generator().manual_seed(0), SamplingParams(temperature=0.9, top_k=4)
    for _ in range(40):
        steps = speculative_decode(
            target, drafter, [1, 5, 2, 7, 1, 5], params, max_new_tokens=12, k_max=3, generator=gen
        )
        for step, chain in zip(list(steps)[1:-1], chains, strict=False):  # the last step is never heard
            if chain:
                on_chain = step.token_ids[0] == chain[0]
                want.append((len(chain), len(step.token_ids) - 1 if on_chain else 0))
        chains.clear()
    assert heard == want
    assert any(a == 0 for _, a in heard) and any(a > 0 for _, a in heard)
    assert any(a == 0 and d > 0 for d, a in heard)


class _Trees(HeadDrafter):
    """Counts the trees that branched (more nodes than positions)."""

    branched = 0

    def propose(self, context, k, params, generator, hidden):  # type: ignore[no-untyped-def]
        draft = super().propose(context, k, params, generator, hidden)
        self.branched += len(draft.tokens) > draft.depth()
        return draft


def test_greedy_tree_decoding_gives_the_plain_greedy_text() -> None:
    """Greedy trees hold the head's likeliest candidates; the walk through them is tested with any
    tree in test_speculative_tree.py."""
    target, _ = micro_pair()
    greedy = SamplingParams(temperature=0.0)
    for prompt in ([1, 5, 2, 7, 3], [4, 4, 0], [6, 1, 2, 3, 5, 7, 0, 2]):
        plain = speculative_decode(
            target, HeadDrafter(micro_head(), 0.0), prompt, greedy, max_new_tokens=12, k_max=0
        )
        drafter = _Trees(micro_head(), 0.0, tree=8)
        trees = speculative_decode(target, drafter, prompt, greedy, max_new_tokens=12, k_max=3)
        assert [t for s in trees for t in s.token_ids] == [t for s in plain for t in s.token_ids]
        assert drafter.branched > 0


@pytest.mark.slow  # compiles the micro head's pass (a few seconds the first time on 2 cores)
@pytest.mark.parametrize("tree", [0, 4], ids=["chain", "tree"])
def test_a_compiled_head_drafts_what_the_eager_head_drafts(tree: int) -> None:
    """`HeadDrafter.compile` changes how the head's pass runs, not what it drafts: in float32 the same
    products in another order, so the same tokens and q to float precision, greedy and sampled."""
    eager, compiled = (HeadDrafter(micro_head(), threshold=0.0, tree=tree) for _ in range(2))
    compiled.compile()
    assert compiled.compiled and not eager.compiled
    torch.manual_seed(0)
    made = 0
    for params in (SamplingParams(temperature=0.0), SamplingParams(temperature=0.9, top_k=4)):
        for trial in range(20):
            context = torch.randint(0, MICRO.vocab_size, (6,)).tolist()
            hidden = torch.randn(5, MICRO.dim)  # the states that predicted context[1:]
            drafts = []
            for drafter in (eager, compiled):
                drafter.begin(context[:1])
                generator = torch.Generator().manual_seed(trial)
                drafts.append(drafter.propose(context, 3, params, generator, hidden))
            a, b = drafts
            assert (a.tokens, a.parents) == (b.tokens, b.parents)
            assert (a.q is None) == (b.q is None)
            if a.q is not None and b.q is not None:
                assert torch.allclose(a.q, b.q, atol=1e-5)
            made += len(a.tokens) > 0
    assert made > 20


class _Capture(HeadDrafter):
    """Records every draft the head made."""

    def __init__(self, head: DSparkHead, threshold: float) -> None:
        super().__init__(head, threshold)
        self.drafts: list[tuple[list[int], torch.Tensor | None]] = []

    def propose(self, context, k, params, generator, hidden):  # type: ignore[no-untyped-def]
        draft = super().propose(context, k, params, generator, hidden)
        self.drafts.append((draft.tokens, draft.q))
        return draft


def test_drafts_stay_in_the_draft_vocabulary_with_q_zero_outside() -> None:
    target, _ = micro_pair()
    drafter = _Capture(micro_head(), threshold=0.0)
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        list(
            speculative_decode(
                target,
                drafter,
                [1, 5, 2],
                SamplingParams(temperature=1.0),
                max_new_tokens=8,
                k_max=3,
                generator=gen,
            )
        )
    made = [(t, q) for t, q in drafter.drafts if t]
    assert made
    for tokens, q in made:
        assert q is not None and set(tokens) <= set(DRAFT_VOCAB.tolist())
        assert torch.allclose(q.sum(-1), torch.ones(len(tokens)))
        assert float(q[:, [4, 6]].abs().sum()) == 0.0
        assert all(float(q[i, t]) > 0 for i, t in enumerate(tokens))


def test_confidence_threshold_sets_the_draft_length() -> None:
    target, _ = micro_pair()
    greedy = SamplingParams(temperature=0.0)
    lengths = {}
    for threshold in (0.0, 0.999999):
        head = micro_head()
        with torch.no_grad():
            head.conf.bias.fill_(0.0)  # confidence ~ 0.5: a product that halves per position
            head.conf.weight.zero_()
        drafter = _Capture(head, threshold=threshold)
        out = [
            t
            for s in speculative_decode(target, drafter, [1, 5, 2], greedy, max_new_tokens=10, k_max=3)
            for t in s.token_ids
        ]
        lengths[threshold] = [len(t) for t, _ in drafter.drafts]
        plain = [
            t
            for s in speculative_decode(
                target, _Capture(head, 1.0), [1, 5, 2], greedy, max_new_tokens=10, k_max=0
            )
            for t in s.token_ids
        ]
        assert out == plain  # greedy output never depends on the drafter
    assert max(lengths[0.0]) == 3 and max(lengths[0.999999]) == 0
    # 0.5, 0.25, 0.125: a threshold of 0.3 stops before the second position
    head = micro_head()
    with torch.no_grad():
        head.conf.bias.fill_(0.0)
        head.conf.weight.zero_()
    drafter = _Capture(head, threshold=0.3)
    list(speculative_decode(target, drafter, [1, 5, 2], greedy, max_new_tokens=10, k_max=3))
    assert max(len(t) for t, _ in drafter.drafts) == 1  # (0 only where no room was left)


def test_saved_head_loads_identically_and_checks_its_checksum(tmp_path: Path) -> None:
    head = micro_head()
    digest = save_head(head, tmp_path / "h")
    assert len(digest) == 64
    loaded = load_head(tmp_path / "h", head.embed)
    hidden, tokens = torch.randn(2, 4, MICRO.dim), torch.randint(0, 8, (2, 4))
    with torch.no_grad():
        a, b = head.states(hidden, tokens), loaded.states(hidden, tokens)
    assert torch.allclose(a, b, atol=1e-2)  # stored in float16
    assert torch.equal(loaded.vocab, DRAFT_VOCAB)
    data = bytearray((tmp_path / "h" / "head.safetensors").read_bytes())
    data[-1] ^= 1
    (tmp_path / "h" / "head.safetensors").write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match="sha256"):
        load_head(tmp_path / "h", head.embed)
    with pytest.raises(CheckpointError, match="embedding"):
        save_head(head, tmp_path / "g")
        load_head(tmp_path / "g", torch.zeros(9, MICRO.dim))
    meta = json.loads((tmp_path / "g" / "head.json").read_text())
    (tmp_path / "g" / "head.json").write_text(json.dumps({**meta, "layers": 3}))
    with pytest.raises(CheckpointError, match="not a head's config"):
        load_head(tmp_path / "g", head.embed)


def _sequence(prompt_len: int, answer: list[int], dim: int) -> AnsweredPrompt:
    m = len(answer)
    tokens = torch.cat([torch.arange(prompt_len) % 8, torch.tensor(answer)])
    # hidden row i stands for position P - WINDOW + i: its first coordinate says which
    hidden = torch.zeros(WINDOW + m - 1, dim, dtype=torch.float16)
    hidden[:, 0] = torch.arange(prompt_len - WINDOW, prompt_len + m - 1)
    top_ids = torch.zeros(m, TOP, dtype=torch.long)
    top_ids[:, 0] = torch.tensor(answer)  # the target's favourite is the token that came
    top_p = torch.zeros(m, TOP, dtype=torch.float16)
    top_p[:, 0] = 1.0
    return AnsweredPrompt(tokens, prompt_len, hidden, top_ids, top_p, greedy=True)


def test_anchors_line_up_windows_targets_and_target_distributions() -> None:
    head = micro_head(block=3)
    seqs = [_sequence(10, [3, 5, 1, 2, 7], MICRO.dim), _sequence(12, [1, 1, 2], MICRO.dim)]
    data = Anchors(seqs, HeadConfig(MICRO.dim, MICRO.vocab_size, window=4, block=3), DRAFT_VOCAB)
    assert len(data) == 4 + 2  # anchors n = P .. P+m-2
    b = data.batch(torch.arange(len(data)))
    # first anchor of the first sequence: pending token c_10 = 3; its window: positions 6..9
    assert b["hidden"][0, :, 0].tolist() == list(range(6, 10))
    assert b["hidden"][4, :, 0].tolist() == list(range(8, 12))  # the second sequence's first anchor
    assert b["tokens"][0, -1] == 3 and b["prev"][0].tolist() == [3, 5, 1]
    to_draft = {int(t): i for i, t in enumerate(DRAFT_VOCAB)}
    assert b["target"][0].tolist() == [to_draft[5], to_draft[1], to_draft[2]]
    assert b["top_ids"][0, :, 0].tolist() == b["target"][0].tolist()  # p rows match the targets
    # the last anchor of the second sequence has one target left: the rest are masked
    assert b["valid"][-1].tolist() == [True, False, False]
    assert b["target"][-1, 0] == to_draft[2]
    assert (b["top_ids"][:, :, 0] == b["target"])[b["valid"]].all()  # up to each answer's last token
    parts = losses(head, b)
    assert parts["tv"].shape == (6, 3) and bool(((parts["tv"] >= 0) & (parts["tv"] <= 1)).all())
    report = evaluate_head(head, data)
    assert 1.0 <= report["expected_length_t1"] <= 4.0


def test_draft_vocab_takes_the_most_probable_output_tokens_and_the_end_tokens() -> None:
    seq = _sequence(10, [3, 3, 3, 5, 5, 1], MICRO.dim)  # p = 1 on the token that came
    assert draft_vocab([seq], 3, frozenset({7})).tolist() == [3, 5, 7]
    seq.top_p[:, 0], seq.top_ids[:, 1], seq.top_p[:, 1] = 0.4, 6, 0.6  # 6 is never sampled, often likely
    assert draft_vocab([seq], 3, frozenset({7})).tolist() == [3, 6, 7]


def test_left_padded_batch_gives_each_row_its_own_logits() -> None:
    """`Transformer.forward(pad=...)` (the draft data's batched generation): padding is invisible."""
    target, _ = micro_pair()
    prompts = [[1, 5, 2, 7, 3], [4, 2]]
    singles = []
    with torch.no_grad():
        for p in prompts:
            target.setup_cache(64)
            first = target(torch.tensor([p]), torch.arange(len(p)))[0, -1]
            then = target(torch.tensor([[6]]), torch.tensor([len(p)]))[0, -1]
            singles.append((first, then))
        target.setup_cache(64, batch=2)
        pad = torch.tensor([0, 3])
        batch = torch.tensor([prompts[0], [0, 0, 0, *prompts[1]]])
        first = target(batch, torch.arange(5), pad=pad)[:, -1]
        then = target(torch.tensor([[6], [6]]), torch.tensor([5]), pad=pad)[:, -1]
    for r, (a, b) in enumerate(singles):
        assert torch.allclose(first[r], a, atol=1e-10) and torch.allclose(then[r], b, atol=1e-10)


def test_a_head_loaded_for_a_bfloat16_target_drafts_in_bfloat16_and_samples_float32(tmp_path: Path) -> None:
    head = micro_head()
    save_head(head, tmp_path / "h")
    loaded = load_head(tmp_path / "h", head.embed.to(torch.bfloat16))
    assert loaded.out_embed.dtype == torch.bfloat16
    target, _ = micro_pair()
    drafter = _Capture(loaded, threshold=0.0)
    gen = torch.Generator().manual_seed(0)
    list(
        speculative_decode(
            target,
            drafter,
            [1, 5, 2],
            SamplingParams(temperature=1.0),
            max_new_tokens=8,
            k_max=3,
            generator=gen,
        )
    )
    made = [(t, q) for t, q in drafter.drafts if t]
    assert made and all(q is not None and q.dtype == torch.float32 for _, q in made)
    assert all(torch.allclose(q.sum(-1), torch.ones(len(t))) for t, q in made)  # type: ignore[union-attr]
