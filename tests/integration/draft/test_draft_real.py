"""The shipped draft head on the real SmolLM2-135M: it loads (checksum), drafts tokens that are accepted,
keeps the plain greedy text, serves over HTTP; and `lossless draft train` runs end to end."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
import torch

from lossless.draft.data import bundled_prompts
from lossless.engine.engine import Engine, build_drafter
from lossless.engine.model.sampling import SamplingParams
from lossless.engine.speculate.head import SHIPPED, load_head
from lossless.engine.speculate.head_drafter import HeadDrafter
from lossless.engine.speculate.spec import parse_drafter_spec
from lossless.engine.speculate.speculative import speculative_decode
from lossless.engine.speculate.stats import SpecStats
from lossless.engine.weights.quant import Int4Linear
from lossless.server.options import ServeOptions

pytestmark = pytest.mark.slow

GREEDY = SamplingParams(max_tokens=48, temperature=0.0)
CHAT = [  # none of these is among the training prompts
    "What are some good habits for staying healthy while working from home?",
    "Write a short story about a robot who wants to learn to paint.",
    "Give me three ideas for a weekend trip with friends, and why each is fun.",
    "Write a polite email asking a neighbour to keep their music down at night.",
    "How do I make a simple tomato sauce?",
    "Explain what a budget is and why it helps.",
]


@pytest.fixture
def engine(smollm2_engine: Engine) -> Engine:
    return smollm2_engine


def test_shipped_head_matches_its_checksum_and_the_model(engine: Engine) -> None:
    head = load_head(SHIPPED, engine.model.tok_embeddings.weight)
    assert head.config.vocab_size == engine.args.vocab_size and len(head.vocab) <= 8192
    for name in ("recipe.json", "train_log.jsonl"):  # the recipe and its log ship beside the weights
        assert (SHIPPED / name).stat().st_size > 0


def test_dspark_threshold_and_tree_default_by_the_targets_dtype(engine: Engine, smollm2_path: Path) -> None:
    """A bfloat16 target verifies a wider draft for the price of one token: its default stops later.
    An int4 one verifies a smaller tree: its kernel multiplies 4 rows at a time."""
    spec = parse_drafter_spec("dspark")
    assert spec.threshold is None and spec.tree is None
    fp32 = build_drafter(spec, engine)
    bf16 = build_drafter(spec, Engine.load(smollm2_path, dtype="bfloat16"))
    int4 = build_drafter(spec, Engine.load(smollm2_path, dtype="int4"))
    given = build_drafter(parse_drafter_spec("dspark", threshold=0.2, tree=0), engine)
    drafters = (fp32, bf16, int4, given)
    assert all(isinstance(d, HeadDrafter) for d in drafters)
    assert [d.threshold for d in drafters] == [0.3, 0.1, 0.1, 0.2]  # type: ignore[union-attr]
    assert [d.tree for d in drafters] == [4, 4, 2, 0]  # type: ignore[union-attr]
    assert fp32.lookup is not None  # served with prompt lookup where the text repeats
    # an int4 target's head holds its weights in 4 bits too (`DSparkHead.use_int4`)
    assert isinstance(int4.head.out_int4, Int4Linear) and fp32.head.out_int4 is None  # type: ignore[union-attr]


def test_a_head_in_4_bits_drafts_about_as_well_as_in_bfloat16(smollm2_path: Path) -> None:
    """For an int4 target the head is rounded to 4 bits, which makes its pass cheaper; on prompts it
    never saw its greedy steps must accept about as many tokens as the bfloat16 head's (measured: 0.52
    a step either way, though the 4-bit head drafts a little more for them, 278 tokens against 242)."""
    target = Engine.load(smollm2_path, dtype="int4")
    int4 = build_drafter(parse_drafter_spec("dspark", tree=0), target)
    bf16 = HeadDrafter(load_head(SHIPPED, target.model.tok_embeddings.weight), threshold=0.1)
    assert isinstance(int4, HeadDrafter) and int4.head.out_int4 is not None and bf16.head.out_int4 is None
    rates = []
    for drafter in (int4, bf16):
        stats = SpecStats(7)
        for prompt in CHAT:
            ids = target.chat_prompt([{"role": "user", "content": prompt}])
            for _ in speculative_decode(
                target.model, drafter, ids, GREEDY, max_new_tokens=48, k_max=7, stats=stats
            ):
                pass
        rates.append(stats.accepted / stats.steps)  # tokens per target forward, less the one it adds
    assert rates[1] > 0.3 and rates[0] > 0.85 * rates[1], rates


@pytest.fixture(scope="module")
def plain(smollm2_engine: Engine) -> list[tuple[list[int], list[int]]]:
    """Each CHAT prompt's tokens and its plain greedy answer (once for both drafting shapes)."""
    prompts = [smollm2_engine.chat_prompt([{"role": "user", "content": p}]) for p in CHAT]
    return [(p, [t for d in smollm2_engine.generate(p, GREEDY) for t in d.token_ids]) for p in prompts]


@pytest.mark.parametrize("tree", [4, 0], ids=["tree (the default)", "chain"])
def test_dspark_greedy_gives_the_plain_text_with_accepted_drafts(
    engine: Engine, plain: list[tuple[list[int], list[int]]], tree: int
) -> None:
    speculative = engine.with_drafter(parse_drafter_spec("dspark", tree=tree))
    same, drafted, accepted = 0, 0, 0
    for p, want in plain:
        deltas = list(speculative.generate(p, GREEDY))
        same += [t for d in deltas for t in d.token_ids] == want
        drafted += deltas[-1].stats["drafted"]
        accepted += deltas[-1].stats["accepted"]
    # float32 batched and one-token forwards round differently: a near-tie may flip one prompt
    assert same >= len(CHAT) - 1
    # a trained head on prompts it never saw: an untrained one over 8192 tokens is accepted ~never
    # (measured: about 0.3-0.6 of drafted tokens, benchmarks/speculative_speed.py)
    assert drafted > 0 and accepted / drafted > 0.2


def test_serve_speculative_dspark_over_http(smollm2_path: Path) -> None:
    from lossless.server.launch import start_embedded
    from lossless.server.main import load_model

    config = ServeOptions(model=str(smollm2_path), speculative="dspark")
    body = {
        "messages": [{"role": "user", "content": CHAT[0]}],
        "max_tokens": 32,
        "temperature": 1.0,
        "seed": 1,
    }
    with start_embedded(config, loaded=load_model(config)) as url, httpx.Client(timeout=120) as client:
        reply = client.post(url + "/chat/completions", json=body)
        metrics = client.get(url.removesuffix("/v1") + "/metrics").text
    assert reply.status_code == 200 and reply.json()["choices"][0]["message"]["content"]
    name = "lossless_spec_accepted_tokens_total"
    accepted = [line for line in metrics.splitlines() if line.startswith(name)]
    assert accepted and float(accepted[0].split()[-1]) > 0


def test_draft_train_runs_end_to_end(tmp_path: Path, smollm2_path: Path) -> None:
    """A trial-sized run of the real command: 4 bundled prompts, 4 the model writes, short answers, a few
    steps; the model in float32 (the recipe's bfloat16 took ~5 min of CI's 46 on an AVX2-only CPU)."""
    out = tmp_path / "head"
    trial = ["--prompts", "4", "--written", "4", "--max-new", "12", "--steps", "3", "--threads", "1"]
    trial += ["--dtype", "float32"]
    cmd = [
        sys.executable,
        "-m",
        "lossless.cli",
        "draft",
        "train",
        "--model",
        str(smollm2_path),
        "--out",
        str(out),
        *trial,
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr
    evaluation = json.loads(done.stdout)
    assert len(evaluation["acceptance_t1_by_position"]) == 7
    log = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
    events = [e["event"] for e in log if "event" in e]
    assert events == ["data", "kept", "calibration", "heldout", "saved"]
    assert log[-1]["sha256"] == json.loads((out / "head.json").read_text())["sha256"]
    assert parse_drafter_spec(f"dspark:{out}").path == out
    data = torch.load(out / "data.pt", weights_only=False)
    bundled = {p["prompt"] for p in bundled_prompts()}
    written = data["written"]  # user messages the model wrote: distinct, none of them a bundled prompt
    assert 1 <= len(written) <= 4 and len(set(written)) == len(written)
    assert all(w.strip() and w not in bundled for w in written)
    assert len(data["seqs"]) == 2 * 4 + len(written)  # bundled prompts answered twice, written ones once
