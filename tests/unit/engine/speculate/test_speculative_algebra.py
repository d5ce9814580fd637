"""The exact algebra behind lossless speculative decoding, the acceptance rule's edge cases, the
statistics the server exposes, and the drafter spec parser."""

from __future__ import annotations

import pytest
import torch
from hypothesis import assume, given, settings, strategies as st
from torch import Tensor

from lossless.engine.model.sampling import SamplingParams, warp
from lossless.engine.speculate.drafts import NgramDrafter, check_same_vocab, ngram_lookup
from lossless.engine.speculate.spec import DrafterSpec, parse_drafter_spec
from lossless.engine.speculate.speculative import accept_draft, residual_distribution
from lossless.engine.speculate.stats import SpecStats
from lossless.errors import UsageError

D = torch.float64


def emitted_distribution(p: Tensor, q: Tensor) -> Tensor:
    """P(emit x) for one verified position: drawn from q and accepted with min(1, p/q), or rejected
    (probability 1 - sum min(p, q)) and drawn from the residual r."""
    accept = torch.where(q > 0, q * torch.minimum(torch.ones_like(p), p / q), torch.zeros_like(p))
    rejected = 1.0 - torch.minimum(p, q).sum()
    return accept + rejected * residual_distribution(p, q)


def dist(*xs: float) -> Tensor:
    t = torch.tensor(xs, dtype=D)
    return t / t.sum()


CASES = {
    "generic": (dist(0.5, 0.3, 0.2, 0.0), dist(0.1, 0.2, 0.3, 0.4)),
    "q = 0 where p > 0": (dist(0.25, 0.25, 0.25, 0.25), dist(0.5, 0.5, 0.0, 0.0)),
    "p == q": (dist(0.1, 0.2, 0.3, 0.4), dist(0.1, 0.2, 0.3, 0.4)),
    "one-hot q": (dist(0.6, 0.3, 0.1, 0.0), dist(0.0, 1.0, 0.0, 0.0)),
    "one-hot q on a p = 0 token": (dist(0.6, 0.4, 0.0, 0.0), dist(0.0, 0.0, 0.0, 1.0)),
    "tiny probabilities": (dist(1e-300, 1e-12, 1.0, 1e-200), dist(1e-12, 1e-300, 1.0, 0.5)),
    "one-hot p (greedy target)": (dist(0.0, 0.0, 1.0, 0.0), dist(0.3, 0.3, 0.2, 0.2)),
}


@pytest.mark.parametrize("name", list(CASES))
def test_accept_plus_residual_is_exactly_p(name: str) -> None:
    p, q = CASES[name]
    assert torch.allclose(emitted_distribution(p, q), p, rtol=0, atol=1e-12)


def test_top_k_masked_target() -> None:
    # p = 0 from top-k masking on tokens the draft likes; the same warp on both sides
    logits_p = torch.tensor([3.0, 2.0, 1.0, 0.5, -1.0, 0.0], dtype=D)
    logits_q = torch.tensor([0.0, 1.0, 2.0, 3.0, 2.5, -1.0], dtype=D)
    p, q = warp(logits_p, 0.8, top_k=3, top_p=0.9), warp(logits_q, 0.8, top_k=3, top_p=0.9)
    assert (p == 0).any() and ((p == 0) & (q > 0)).any()
    assert torch.allclose(emitted_distribution(p, q), p, rtol=0, atol=1e-12)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.floats(0, 1), min_size=2, max_size=12),
    st.lists(st.floats(0, 1), min_size=2, max_size=12),
)
def test_algebra_holds_for_any_pair(ps: list[float], qs: list[float]) -> None:
    n = min(len(ps), len(qs))
    assume(sum(ps[:n]) > 1e-6 and sum(qs[:n]) > 1e-6)  # both must be distributions once cut to n
    p, q = dist(*ps[:n]), dist(*qs[:n])
    assert torch.allclose(emitted_distribution(p, q), p, rtol=0, atol=1e-12)


def test_residual_falls_back_to_p_when_it_has_no_mass() -> None:
    p = dist(0.2, 0.8)
    assert torch.equal(residual_distribution(p, p.clone()), p)


def test_greedy_accepts_iff_draft_is_the_argmax() -> None:
    logits = torch.tensor([[0.0, 5.0, 1.0], [4.0, 0.0, 1.0], [0.0, 0.0, 9.0]], dtype=D)
    p = warp(logits, 0.0)  # one-hot rows: argmax 1, 0, 2
    q = torch.full((2, 3), 1 / 3, dtype=D)
    assert accept_draft(p, q, [1, 0], None, greedy=True) == (2, 2)  # all accepted + bonus argmax
    assert accept_draft(p, q, [1, 2], None, greedy=True) == (1, 0)  # rejected at 2: emit argmax
    assert accept_draft(p, q, [0, 0], None, greedy=True) == (0, 1)


def test_sampling_rule_rejects_zero_probability_and_accepts_certain_tokens() -> None:
    gen = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.0, 1.0, 0.0], [0.5, 0.5, 0.0]], dtype=D)
    one_hot = torch.tensor([[1.0, 0.0, 0.0]], dtype=D)
    for _ in range(50):
        assert accept_draft(p, one_hot, [0], gen, greedy=False) == (0, 1)  # p(x) = 0: residual is {1}
    q = torch.tensor([[0.0, 1.0, 0.0]], dtype=D)
    assert all(accept_draft(p, q, [1], gen, greedy=False)[0] == 1 for _ in range(50))


def test_stats_histogram_and_figures() -> None:
    stats = SpecStats(k_max=3)
    for drafted, accepted in [(3, 3), (3, 1), (2, 0), (0, 0)]:
        stats.record(drafted, accepted)
    d = stats.as_dict()
    assert (d["drafted"], d["accepted"], d["steps"]) == (8, 4, 4)
    assert d["accept_counts"] == [2, 1, 0, 1]  # steps that accepted exactly i draft tokens
    assert d["acceptance_by_position"] == [2 / 3, 1 / 3, 1 / 2]
    assert d["mean_accepted_length"] == (4 + 4) / 4  # accepted + one correction/bonus per forward
    assert sum(d["accept_counts"]) == d["steps"]


def test_ngram_lookup_prefers_the_latest_longest_match() -> None:
    ctx = [1, 2, 3, 9, 1, 2, 3, 4, 5, 7, 2, 3]
    assert ngram_lookup(ctx, 3, max_ngram=2, min_ngram=1) == [4, 5, 7]  # latest "2 3" is followed by 4
    assert ngram_lookup([5, 6, 7], 4, 3, 1) == []
    assert ngram_lookup([5, 6, 5], 4, 3, 1) == [6, 5]  # a unigram match; stops at the context's end


def test_ngram_length_backs_off_on_rejection_and_grows_on_acceptance() -> None:
    d = NgramDrafter(k_max=8)
    d.observe(8, 2)
    assert d.k == 3
    d.observe(3, 1)
    assert d.k == 2
    d.observe(2, 2)
    d.observe(4, 4)
    assert d.k == 8


def test_ngram_pauses_after_outright_rejections_and_resumes_when_copying_starts() -> None:
    d, P = NgramDrafter(k_max=8, min_ngram=1), SamplingParams()
    ctx = [1, 2, 3, 4, 1, 2]  # the tail "1 2" was followed by 3
    d.observe(4, 0)  # a draft rejected outright: pause one step
    assert d.propose(ctx, 8, P, None, None).tokens == []
    assert d.propose([*ctx, 9], 8, P, None, None).tokens == []
    d.observe(0, 0)
    assert d.propose([*ctx, 9, 9], 8, P, None, None).tokens == [9]
    for misses in range(2, 8):
        d.observe(1, 0)
        assert d.pause == min(16, 2 ** (misses - 1))
    d.propose(ctx, 8, P, None, None)  # paused: would have drafted 3 at position 6 ...
    d.propose([*ctx, 3], 8, P, None, None)  # ... and 3 came: copying, so resume
    assert d.pause == 0 and d.misses == 7  # one more outright rejection: the longest pause again


def test_parse_drafter_spec(tmp_path) -> None:  # type: ignore[no-untyped-def]
    ckpt = tmp_path / "draft.gguf"
    ckpt.write_bytes(b"")
    assert parse_drafter_spec("ngram") == DrafterSpec("ngram", None, 8, None)
    # dspark's threshold and tree depend on the target's dtype: left to build_drafter (tests/integration)
    assert parse_drafter_spec("dspark") == DrafterSpec("dspark", None, 7, None, tree=None)
    assert parse_drafter_spec("dspark", tree=0).tree == 0  # one chain
    assert parse_drafter_spec("none").kind == "none"
    assert parse_drafter_spec(f"draft:{ckpt}", k=3) == DrafterSpec("draft", ckpt, 3, 0.3)
    assert parse_drafter_spec("ngram", k=5, threshold=0.5).k == 5


@pytest.mark.parametrize(
    "spec,k,threshold,tree,needle",
    [
        ("eagle", None, None, None, r"expected auto \(dspark for the embedded"),
        ("draft:", None, None, None, r"expected auto \(dspark for the embedded"),
        ("ngram:3", None, None, None, r"expected auto \(dspark for the embedded"),
        ("draft:/no/such/file.gguf", None, None, None, "no such file"),
        ("ngram", 0, None, None, "--spec-k"),
        ("ngram", None, 1.5, None, "--spec-threshold"),
        ("ngram", None, None, 4, "--spec-tree"),
        ("dspark", None, None, 65, "--spec-tree"),
        ("dspark", None, None, -1, "--spec-tree"),
    ],
)
def test_parse_drafter_spec_refuses_clearly(
    spec: str, k: int | None, threshold: float | None, tree: int | None, needle: str
) -> None:
    with pytest.raises(UsageError, match=needle) as info:
        parse_drafter_spec(spec, k, threshold, tree)
    assert "\n" not in str(info.value)


def test_draft_with_another_vocabulary_is_refused() -> None:
    check_same_vocab(["a", "b"], ["a", "b"], "draft:x")
    with pytest.raises(UsageError, match=r"vocabulary differs.*token 1 is 'c' there, 'b' here"):
        check_same_vocab(["a", "b"], ["a", "c"], "draft:x")
    with pytest.raises(UsageError, match="3 vs 2 tokens"):
        check_same_vocab(["a", "b"], ["a", "b", "z"], "draft:x")
