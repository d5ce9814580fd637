"""GGUF loading: dequantizers against gguf's reference, q/k un-permutation, a tiny GGUF end to end, errors."""

from __future__ import annotations

from pathlib import Path

import gguf
import numpy as np
import pytest
import torch
from safetensors.torch import load_file
from tiny_gguf import llama_cpp_permute, write_gguf

from lossless.engine.engine import Engine
from lossless.engine.weights.gguf import dequantize, unpermute
from lossless.errors import CheckpointError

Q = gguf.GGMLQuantizationType


def random_blocks(qtype: Q, n_blocks: int, rng: np.random.Generator) -> np.ndarray:
    """Random quantized blocks with finite float16 scales (random bytes there could be NaN/inf)."""
    _, block_bytes = gguf.GGML_QUANT_SIZES[qtype]
    raw = rng.integers(0, 256, size=(n_blocks, block_bytes), dtype=np.uint8)
    n_scales = 2 if qtype == Q.Q4_1 else 1  # Q4_1 has d and m; the others just d
    scales = rng.normal(0, 0.05, size=(n_blocks, n_scales)).astype(np.float16)
    raw[:, : 2 * n_scales] = scales.view(np.uint8).reshape(n_blocks, 2 * n_scales)
    return raw


@pytest.mark.parametrize("qtype", [Q.Q8_0, Q.Q4_0, Q.Q4_1])
def test_dequantize_matches_gguf_reference(qtype: Q) -> None:
    rng = np.random.default_rng(int(qtype))
    rows, cols = 8, 96  # 3 blocks a row
    blocks = random_blocks(qtype, rows * cols // 32, rng).reshape(rows, -1)
    ours = dequantize(qtype.name, blocks, (rows, cols))
    reference = gguf.quants.dequantize(blocks, qtype)
    assert ours.shape == reference.shape == (rows, cols)
    np.testing.assert_array_equal(ours, reference.astype(np.float32))


@pytest.mark.parametrize("qtype", [Q.F32, Q.F16, Q.BF16])
def test_dequantize_float_types(qtype: Q) -> None:
    values = np.random.default_rng(0).normal(size=(4, 64)).astype(np.float32)
    stored = gguf.quants.quantize(values, qtype)
    ours = dequantize(qtype.name, stored, values.shape)
    np.testing.assert_array_equal(ours, gguf.quants.dequantize(stored, qtype).astype(np.float32))
    np.testing.assert_allclose(ours, values, rtol=1e-2, atol=1e-2)


def test_unpermute_inverts_llama_cpp_permute() -> None:
    w = torch.randn(4 * 16, 8)
    assert torch.equal(unpermute(llama_cpp_permute(w, 4), 4), w)
    assert not torch.equal(llama_cpp_permute(w, 4), w)


def first_logits(engine: Engine, ids: list[int]) -> torch.Tensor:
    x = torch.tensor([ids])
    with torch.inference_mode():
        return engine.model(x, torch.arange(len(ids)))[0]


def test_tiny_gguf_loads_like_its_hf_directory(tiny_checkpoint: Path, tmp_path: Path) -> None:
    path = write_gguf(tiny_checkpoint, tmp_path / "tiny.gguf", Q.F32)
    from_gguf, from_hf = Engine.load(path), Engine.load(tiny_checkpoint)
    assert from_gguf.name == "tiny"
    text = "The quick brown fox, 42 élèves"
    ids = from_hf.encode(text)
    assert from_gguf.encode(text) == ids
    messages = [{"role": "user", "content": "Hi"}]
    assert from_gguf.chat_prompt(messages) == from_hf.chat_prompt(messages)
    assert from_gguf.tokenizer.eos_ids >= {2}
    torch.testing.assert_close(first_logits(from_gguf, ids), first_logits(from_hf, ids), atol=1e-5, rtol=0)


@pytest.mark.parametrize("qtype", [Q.F16, Q.Q8_0, Q.Q4_0, Q.Q4_1])
def test_quantized_gguf_weights_are_the_reference_dequantization(
    tiny_checkpoint: Path, tmp_path: Path, qtype: Q
) -> None:
    # Quantization blocks run along rows, so they commute with llama.cpp's row permutation of q/k:
    # each of our fused matrices must be exactly gguf's dequantize(quantize(HF matrix)).
    engine = Engine.load(write_gguf(tiny_checkpoint, tmp_path / "tiny.gguf", qtype))
    hf = load_file(str(tiny_checkpoint / "model.safetensors"))

    def ref(name: str) -> torch.Tensor:
        w = hf[name].numpy()
        return torch.from_numpy(
            gguf.quants.dequantize(gguf.quants.quantize(w, qtype), qtype).astype(np.float32)
        )

    ours = engine.model.state_dict()
    p = "model.layers.1."
    wqkv = torch.cat([ref(p + f"self_attn.{n}_proj.weight") for n in "qkv"])
    assert torch.equal(ours["layers.1.attention.wqkv.weight"], wqkv)
    w13 = torch.cat([ref(p + f"mlp.{n}_proj.weight") for n in ("gate", "up")])
    assert torch.equal(ours["layers.1.feed_forward.w13.weight"], w13)
    assert torch.equal(ours["tok_embeddings.weight"], ref("model.embed_tokens.weight"))
    assert torch.equal(ours["layers.1.attention_norm.weight"], hf[p + "input_layernorm.weight"])


def test_missing_file_names_it(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match=r"nothere\.gguf"):
        Engine.load(tmp_path / "nothere.gguf")


@pytest.mark.parametrize("keep", [0.5, 0.9, 0.01])
def test_truncated_gguf_is_a_checkpoint_error(tiny_checkpoint: Path, tmp_path: Path, keep: float) -> None:
    data = write_gguf(tiny_checkpoint, tmp_path / "full.gguf").read_bytes()
    cut = tmp_path / "cut.gguf"
    cut.write_bytes(data[: int(len(data) * keep)])
    with pytest.raises(CheckpointError, match=r"cut\.gguf"):
        Engine.load(cut)


def test_not_a_gguf(tmp_path: Path) -> None:
    bad = tmp_path / "junk.gguf"
    bad.write_bytes(b"this is no gguf file at all" * 10)
    with pytest.raises(CheckpointError, match=r"junk\.gguf: not a readable GGUF"):
        Engine.load(bad)


def test_unsupported_tensor_type_names_tensor_and_types(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    w = gguf.GGUFWriter(path, "llama")
    w.add_block_count(1)
    w.add_embedding_length(256)
    w.add_feed_forward_length(512)
    w.add_head_count(4)
    _, block_bytes = gguf.GGML_QUANT_SIZES[Q.Q5_K]
    w.add_tensor("blk.0.attn_q.weight", np.zeros((256, block_bytes), np.uint8), raw_dtype=Q.Q5_K)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    expected = (
        "model.gguf: tensor blk.0.attn_q.weight has type Q5_K, supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1"
    )
    with pytest.raises(CheckpointError, match=expected):
        Engine.load(path)
