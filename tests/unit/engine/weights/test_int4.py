"""int4 weights from a GGUF's Q4_0 / Q4_1 blocks: the codes are the file's, the kernel's product is the
dense one of the same weights, a tiny Q4_1 GGUF serves from them, and speculative decoding on that path
still equals plain decoding (greedy, through the engine) and keeps the target's distribution (sampled)."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from exact_models import (
    ALPHA,
    accept_draft,
    accept_no_residual,
    chi_square_pvalue,
    draw,
    micro_pair,
    transformer_truth,
)
from tiny_gguf import write_gguf

from lossless.engine.engine import Engine
from lossless.engine.model.sampling import SamplingParams
from lossless.engine.speculate.drafts import ModelDrafter
from lossless.engine.speculate.head import DSparkHead, HeadConfig, save_head
from lossless.engine.speculate.head_drafter import HeadDrafter
from lossless.engine.speculate.spec import parse_drafter_spec
from lossless.engine.weights import block_kernels
from lossless.engine.weights.gguf import dequantize, q4_weight
from lossless.engine.weights.quant import Int4Linear, Int4Weight, Q8Linear, use_int4
from lossless.errors import UsageError

Q = gguf.GGMLQuantizationType
# the int4 kernels on this machine: torch's everywhere, ours (q8) where it builds
KERNELS = ["torch"] + (["q8"] if block_kernels.available() is None else [])
pytestmark = pytest.mark.usefixtures("torch_one_thread")


def blocks(kind: Q, rows: int, cols: int, seed: int = 0) -> np.ndarray:
    values = np.random.default_rng(seed).normal(0, 0.3, (rows, cols)).astype(np.float32)
    stored = gguf.quants.quantize(values, kind)  # [rows, cols / 32 * bytes] uint8
    return stored.reshape(-1, gguf.GGML_QUANT_SIZES[kind][1])


@pytest.mark.parametrize("kind", [Q.Q4_0, Q.Q4_1])
def test_codes_scale_and_zero_mean_what_the_file_means(kind: Q) -> None:
    raw = blocks(kind, 48, 96)
    weight = q4_weight(kind.name, raw, (48, 96))
    assert weight.codes.dtype == torch.uint8 and int(weight.codes.max()) <= 15
    exact = weight._expand(weight.scale.double(), weight.zero.double())
    reference = dequantize(kind.name, raw, (48, 96))
    np.testing.assert_allclose(exact.numpy(), reference, rtol=0, atol=1e-6)
    # the kernel keeps scale and zero in bfloat16: a small, stated rounding, never zero here
    assert 0 < weight.rounding_error() < 0.01 * np.abs(reference).max()


def test_int4_linear_is_the_dense_product_of_the_same_weights() -> None:
    weight = q4_weight("Q4_1", blocks(Q.Q4_1, 64, 128, seed=1), (64, 128))
    layer = Int4Linear(weight, "torch")  # ours: test_block_kernels
    x = torch.randn(2, 5, 128).to(torch.bfloat16)
    dense = x.double() @ weight.dense(torch.float64).T
    torch.testing.assert_close(layer(x).double(), dense, rtol=0.02, atol=0.05)


def test_a_dense_weight_is_rounded_to_4_bits_per_group_and_multiplied_with_any_row_count() -> None:
    """A draft head's weights come from no GGUF block: `Int4Weight.quantize` rounds them (within half
    a step, as the kernel sees them), and a row count off the kernel's tiles of 16 is padded."""
    torch.manual_seed(0)
    weight = torch.randn(37, 96)
    q = Int4Weight.quantize(weight)
    step = q.scale.repeat_interleave(32, dim=1)  # [37, 96]
    assert int(q.codes.max()) == 15 and int(q.codes.min()) == 0
    off = (q.dense(torch.float64) - weight.double()).abs()  # half a step, plus bfloat16's scale and zero
    assert bool((off <= step * 0.5 + q.rounding_error() + 1e-6).all())
    assert float(off.max()) > float(step.max()) * 0.4  # it did round
    layer = Int4Linear(q, "torch")
    x = torch.randn(3, 96).to(torch.bfloat16)
    assert layer(x).shape == (3, 37)
    torch.testing.assert_close(layer(x).double(), x.double() @ q.dense(torch.float64).T, rtol=0.02, atol=0.05)


def test_a_layer_that_does_not_match_is_refused() -> None:
    model = torch.nn.Sequential(torch.nn.Linear(128, 32, bias=False))
    weight = q4_weight("Q4_0", blocks(Q.Q4_0, 64, 128), (64, 128))
    with pytest.raises(ValueError, match="no linear layer of shape"):
        use_int4(model, {"0": weight})


@pytest.fixture(scope="module")
def q4_gguf(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gguf(tiny_checkpoint, tmp_path_factory.mktemp("q4") / "tiny-q4_1.gguf", Q.Q4_1)


def test_int4_engine_serves_the_files_blocks(q4_gguf: Path) -> None:
    int4, dense = Engine.load(q4_gguf, dtype="int4"), Engine.load(q4_gguf, dtype="float32")
    assert int4.dtype == "int4"
    swapped = [m for m in int4.model.modules() if isinstance(m, Int4Linear)]
    assert len(swapped) == 4 * int4.args.n_layers  # wqkv, wo, w13, w2 of every block
    ids = int4.encode("Hello, world! How are you today?")
    with torch.inference_mode():
        got = int4.model(torch.tensor([ids]), torch.arange(len(ids)))[0].float()
        want = dense.model(torch.tensor([ids]), torch.arange(len(ids)))[0]
    # bfloat16 activations against float32 ones over the same weights: close, not equal
    assert (got - want).abs().max() < 0.1 * want.abs().max()


def test_a_q8_0_output_layer_runs_on_the_files_blocks_beside_int4_ones(
    tiny_checkpoint: Path, tmp_path: Path
) -> None:
    """A GGUF with Q4 layers and a Q8_0 output layer (as llama.cpp writes SmolLM2's): int4 on our kernel
    serves the output layer from the file's 8-bit blocks where the 8-bit kernel is built, and says so;
    on torch's int4 kernel, or read as dense weights, the layer stays what it was."""
    path = write_gguf(tiny_checkpoint, tmp_path / "tiny-q4_1-q8_0.gguf", Q.Q4_1, output=Q.Q8_0)
    ours = Engine.load(path, dtype="int4", int4_kernel="auto")
    ours_here = ours.int4_kernel is not None and ours.int4_kernel[0] == "q8"
    ours_here = ours_here and block_kernels.best() == "avx512"
    assert (ours.output_layer == "q8") == ours_here
    assert Engine.load(path, dtype="int4", int4_kernel="torch").output_layer != "q8"
    assert Engine.load(path, dtype="float32").output_layer is None
    if not ours_here:
        pytest.skip("the 8-bit kernel is built for AVX-512 VNNI only")
    dense = Engine.load(path, dtype="float32")  # the same Q8_0 weights, dequantized
    ids = ours.encode("Hello, world! How are you today?")
    with torch.inference_mode():
        hidden = ours.model(torch.tensor([ids]), torch.arange(len(ids)), return_hidden=True)[0]
        got = ours.model.output(hidden).float()
        want = hidden.float() @ dense.model.output.weight.T
    assert isinstance(ours.model.output, Q8Linear)
    assert (got - want).abs().max() < 0.02 * want.abs().max()  # int8 activations, the same weights


def test_int4_needs_q4_blocks(tiny_checkpoint: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="GGUF file's Q4_0 / Q4_1"):
        Engine.load(tiny_checkpoint, dtype="int4")
    with pytest.raises(UsageError, match="no linear layer is stored as Q4_0 or Q4_1"):
        Engine.load(write_gguf(tiny_checkpoint, tmp_path / "f32.gguf"), dtype="int4")


@pytest.mark.parametrize("kernel_name", KERNELS)
def test_prompts_in_float32_fill_the_cache_that_int4_decoding_reads(q4_gguf: Path, kernel_name: str) -> None:
    """The float32 prompt twin holds the weights the int4 kernel computes with, writes the int4 model's own
    (bfloat16) cache, and its prompt is nearer float32's than the bfloat16 path's; decoding then reads it."""
    wide, narrow = (
        Engine.load(q4_gguf, dtype="int4", float32_prompts=f, int4_kernel=kernel_name) for f in (True, False)
    )
    dense = Engine.load(q4_gguf, dtype="float32")
    assert (wide.prompt_dtype, narrow.prompt_dtype) == ("float32", "int4")
    assert narrow.model.prompt_model is None
    twin = wide.model.prompt_model
    assert twin is not None and twin.output.weight.dtype == torch.float32
    int4 = int4_weight_of(q4_gguf, "layers.0.feed_forward.w2")
    assert wide.int4_kernel is not None and wide.int4_kernel[0] == kernel_name
    assert torch.equal(twin.layers[0].feed_forward.w2.weight, int4.dense(torch.float32, kernel_name))
    ids = wide.encode("Hello, world! How are you today? I am fine, thank you.")
    x, pos = torch.tensor([ids]), torch.arange(len(ids))
    with torch.inference_mode():
        want = dense.model(x, pos, prompt=True)[0]  # float32 weights and activations: no twin, itself
        got = wide.model(x, pos, prompt=True)[0]
        cache = wide.model.layers[1].attention.kv_cache
        assert got.dtype == cache.k.dtype == torch.bfloat16
        assert twin.layers[1].attention.kv_cache is cache and bool(cache.k[0, :, : len(ids)].abs().sum() > 0)
        bf16 = narrow.model(x, pos, prompt=True)[0]
    assert (got.float() - want).abs().max() < (bf16.float() - want).abs().max()
    # decoding after either prompt: the same greedy tokens, the prompts' roundings being far below this
    # random model's gaps in bfloat16 activations; in int8 ones (q8) they are not (token 7 of 16 differs)
    params = SamplingParams(max_tokens=16, temperature=0.0, ignore_eos=True)
    texts = [[t for d in e.generate(ids, params) for t in d.token_ids] for e in (wide, narrow)]
    assert len(texts[0]) == len(texts[1]) == 16
    if kernel_name == "torch":
        assert texts[0] == texts[1]


def int4_weight_of(path: Path, name: str) -> Int4Weight:
    from lossless.engine.weights.gguf import load_gguf

    return load_gguf(path, torch.bfloat16, int4=True).int4[name]


@pytest.mark.parametrize("kernel_name", KERNELS)
@pytest.mark.parametrize("float32_prompts", [True, False])
def test_int4_greedy_speculative_equals_plain(q4_gguf: Path, float32_prompts: bool, kernel_name: str) -> None:
    """Every draft verified in one forward over several tokens, against one-token steps: the same tokens,
    with the prompt processed in float32 or in the decoding's own numerics, on either int4 kernel."""
    target = Engine.load(q4_gguf, dtype="int4", float32_prompts=float32_prompts, int4_kernel=kernel_name)
    prompt = target.encode("def main():\n    return 42\ndef main():\n    return 42\ndef")
    params = SamplingParams(max_tokens=40, temperature=0.0, ignore_eos=True)
    plain = [t for d in target.generate(prompt, params) for t in d.token_ids]
    target.use_drafter(parse_drafter_spec(f"draft:{q4_gguf}", k=4))
    assert isinstance(target.drafter, ModelDrafter)
    deltas = list(target.generate(prompt, params))
    assert [t for d in deltas for t in d.token_ids] == plain
    assert len(set(plain)) > 5
    # the draft is the target's own file: every greedy draft is accepted, so steps verify 5 tokens. On q8
    # the draft's cache, written by its own one-token steps, may round an activation to another int8 code
    # than the target's five-token verification: an odd draft is rejected (1 of 20 here), the tokens the same
    stats = deltas[-1].stats
    assert stats["accepted"] == stats["drafted"] > 0 if kernel_name == "torch" else stats["accepted"] > 10


def test_an_int4_targets_draft_without_q4_blocks_is_loaded_dense(
    q4_gguf: Path, tiny_checkpoint: Path
) -> None:
    target = Engine.load(q4_gguf, dtype="int4")
    target.use_drafter(parse_drafter_spec(f"draft:{tiny_checkpoint}", k=3))
    assert isinstance(target.drafter, ModelDrafter)
    assert target.drafter.model.output.weight.dtype == torch.bfloat16
    prompt = target.encode("Hello, world!")
    deltas = list(target.generate(prompt, SamplingParams(max_tokens=12, temperature=0.0, ignore_eos=True)))
    assert sum(len(d.token_ids) for d in deltas) == 12


def int4_micro_pair(compiled: bool) -> tuple[torch.nn.Module, torch.nn.Module]:
    """test_speculative_mc's target and draft, computing in bfloat16 through int4 layers made from Q4_1
    blocks of their own weights (on the kernel `lossless serve` picks here), the target eager or
    compiled."""
    target, draft = micro_pair()
    for model in (target, draft):
        model.to(torch.bfloat16)
        layers = {}
        for name, module in model.named_modules():
            if isinstance(module, torch.nn.Linear) and name != "output":
                rows, cols = module.weight.shape
                raw = gguf.quants.quantize(module.weight.detach().float().numpy(), Q.Q4_1).reshape(-1, 20)
                layers[name] = q4_weight("Q4_1", raw, (rows, cols))
        use_int4(model, layers)
        model.setup_cache(64)
    if compiled:
        target.compile_forward()
    return target, draft


@pytest.mark.slow  # compiles (~30 s the first time on 2 cores) and draws 3000 samples
@pytest.mark.parametrize("accept", ["exact", "no residual"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager (serve's default)", "compiled"])
def test_int4_speculative_keeps_the_targets_distribution(compiled: bool, accept: str) -> None:
    """The chi-square proof of test_speculative_mc on the served paths (int4 eager, as `lossless serve`
    serves the embedded model by default, and compiled), and its mutation (a rejection that does not
    resample from the residual) failing the same test."""
    target, draft = int4_micro_pair(compiled)
    prompt, params = [1, 5, 2, 7, 3], SamplingParams(temperature=0.9, top_k=4)
    truth = transformer_truth(target, prompt, params)
    rule = accept_draft if accept == "exact" else accept_no_residual
    drafter = ModelDrafter(draft, threshold=0.2)
    samples, stats = draw(target, drafter, prompt, 3000, params=params, k_max=3, accept=rule)
    assert stats.accept_counts[0] > 0 and stats.accept_counts[2] > 0
    p = chi_square_pvalue(samples, truth)
    assert p > ALPHA if accept == "exact" else p < ALPHA


@pytest.mark.slow  # compiles the tiny model's graphs (~30 s the first time on 2 cores)
def test_compiled_engine_decodes_speculatively_as_it_does_plainly(q4_gguf: Path) -> None:
    """Engine.compile makes the graphs it serves with before any request; then greedy decoding through
    those graphs is the same speculatively (several tokens per forward) as plainly (one), and close to
    the eager engine's (compiled kernels fuse and round differently: close, not equal)."""
    engine, eager = Engine.load(q4_gguf, dtype="int4"), Engine.load(q4_gguf, dtype="int4")
    engine.use_drafter(parse_drafter_spec(f"draft:{q4_gguf}", k=4))
    assert engine.compile() > 0 and engine.compiled
    prompt = engine.encode("Hello, world! How are you today? Hello, world!")
    params = SamplingParams(max_tokens=30, temperature=0.0, ignore_eos=True)
    speculative = list(engine.generate(prompt, params))
    assert speculative[-1].stats["accepted"] == speculative[-1].stats["drafted"] > 0
    plain = engine.with_drafter(parse_drafter_spec("none"))
    tokens = [t for d in plain.generate(prompt, params) for t in d.token_ids]
    assert [t for d in speculative for t in d.token_ids] == tokens
    with torch.inference_mode():
        x, pos = torch.tensor([prompt]), torch.arange(len(prompt))
        compiled_logits, eager_logits = engine.model(x, pos)[0].float(), eager.model(x, pos)[0].float()
    assert (compiled_logits - eager_logits).abs().max() < 0.05 * eager_logits.abs().max()


@pytest.mark.slow  # compiles the tiny model's graphs and a draft head's (~30 s the first time on 2 cores)
def test_a_compiled_int4_engine_compiles_its_draft_head_in_4_bits(q4_gguf: Path, tmp_path: Path) -> None:
    """``--compile --speculative dspark`` on an int4 target: the head holds its weights in 4 bits and its
    pass is compiled with the target's, also in a drafter taken after compiling (a second server on the
    same weights); greedy decoding through either gives the plain text."""
    engine = Engine.load(q4_gguf, dtype="int4")
    args = engine.args
    config = HeadConfig(dim=args.dim, vocab_size=args.vocab_size, window=4, block=3, heads=4, ffn=64, rank=32)
    torch.manual_seed(0)
    embed = engine.model.tok_embeddings.weight.detach().float()
    save_head(DSparkHead(config, embed, torch.arange(args.vocab_size)), tmp_path)
    engine.use_drafter(parse_drafter_spec(f"dspark:{tmp_path}"))
    engine.compile()
    plain = engine.with_drafter(parse_drafter_spec("none"))
    chain = engine.with_drafter(parse_drafter_spec(f"dspark:{tmp_path}", tree=0))
    prompt = engine.encode("Hello, world! How are you today?")
    params = SamplingParams(max_tokens=24, temperature=0.0, ignore_eos=True)
    want = [t for d in plain.generate(prompt, params) for t in d.token_ids]
    for speculative in (engine, chain):
        drafter = speculative.drafter
        assert isinstance(drafter, HeadDrafter) and drafter.compiled
        assert isinstance(drafter.head.out_int4, Int4Linear) and isinstance(drafter.head.w13, Int4Linear)
        deltas = list(speculative.generate(prompt, params))
        assert [t for d in deltas for t in d.token_ids] == want
        assert deltas[-1].stats["drafted"] > 0
