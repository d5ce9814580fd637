"""Our engine against Hugging Face transformers (the test-only reference): logits, greedy text, tokenizer."""

from __future__ import annotations

import types
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file

from lossless.engine.engine import Engine
from lossless.engine.model.sampling import SamplingParams

transformers = pytest.importorskip("transformers")


def our_logits(engine: Engine, ids: list[int]) -> torch.Tensor:
    with torch.inference_mode():
        return engine.model(torch.tensor([ids]), torch.arange(len(ids)))[0]  # [T, V]


def full_precision(model: Any) -> Any:
    """transformers computes RMSNorm and the RoPE angles in float32 even in a float64 model (a choice for
    half-precision stability); redo those two in float64 so that the comparison measures the model."""
    from transformers.models.llama import modeling_llama as ml

    def rms_norm(self: Any, x: torch.Tensor) -> torch.Tensor:
        return self.weight * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.variance_epsilon))

    def rope(self: Any, x: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        dim = self.config.hidden_size // self.config.num_attention_heads
        inv_freq = 1.0 / (
            self.config.rope_parameters["rope_theta"] ** (torch.arange(0, dim, 2).double() / dim)
        )
        angles = position_ids[..., None].double() * inv_freq  # [B, T, D/2]
        angles = torch.cat([angles, angles], dim=-1)
        return angles.cos().to(x.dtype), angles.sin().to(x.dtype)

    for module in model.modules():
        if isinstance(module, ml.LlamaRMSNorm):
            module.forward = types.MethodType(rms_norm, module)
        elif isinstance(module, ml.LlamaRotaryEmbedding):
            module.forward = types.MethodType(rope, module)
    return model


def test_tiny_logits_equal_transformers_in_float64(tiny_checkpoint: Path) -> None:
    config = transformers.LlamaConfig.from_pretrained(tiny_checkpoint, attn_implementation="sdpa")
    reference = full_precision(transformers.LlamaForCausalLM(config).double().eval())
    reference.load_state_dict(
        {k: v.double() for k, v in load_file(tiny_checkpoint / "model.safetensors").items()}
    )
    engine = Engine.load(tiny_checkpoint, dtype="float64")
    ids = engine.chat_prompt([{"role": "user", "content": "The quick brown fox jumps over the lazy dog."}])
    with torch.inference_mode():
        expected = reference(torch.tensor([ids])).logits[0]
    ours = our_logits(engine, ids)
    assert ours.dtype == torch.float64
    torch.testing.assert_close(ours, expected, atol=1e-9, rtol=0)
    # and incrementally, through the KV cache: prefix, then one token at a time
    with torch.inference_mode():
        engine.model(torch.tensor([ids[:-3]]), torch.arange(len(ids) - 3))
        for pos in range(len(ids) - 3, len(ids)):
            step = engine.model(torch.tensor([[ids[pos]]]), torch.tensor([pos]))[0, -1]
            torch.testing.assert_close(step, expected[pos], atol=1e-9, rtol=0)


# --- the real model: transformers loads and dequantizes the same GGUF itself --------------------------


@pytest.fixture(scope="module")
def reference_smollm2(smollm2_path: Path) -> Iterator[Any]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # transformers' GGUF path warns about its own internals
        model = transformers.AutoModelForCausalLM.from_pretrained(
            smollm2_path.parent, gguf_file=smollm2_path.name, dtype=torch.float32
        )
        tokenizer = transformers.AutoTokenizer.from_pretrained(
            smollm2_path.parent, gguf_file=smollm2_path.name
        )
    yield model.eval(), tokenizer


PROMPTS = [
    "What is the capital of France?",
    "Write a Python function that reverses a string.",
    "List three colours of the rainbow.",
    "Explain gravity to a five-year-old in one sentence.",
    "Translate 'good morning' into Spanish.",
]

TEXTS = [
    "Hello, world!",
    "  leading spaces and trailing   ",
    "Numbers: 1234567890, 3.14159, -42, 1e10, 2024-05-01",
    "Unicode: café, naïve, Straße, 日本語, 😀👍🏽, Ελληνικά, عربى",
    "def f(x):\n\treturn x ** 2  # square\n\n\n",
    "Mixed\r\nline\rendings\n \n\t\t tabs",
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
    "It's, we're, they'll, I'd, CAPS'LL",
    "",
    " ",
    "\u00a0non-breaking\u2009thin\u3000ideographic",
]


@pytest.mark.slow
def test_gguf_tokenizer_equals_transformers(smollm2_engine: Engine, reference_smollm2: Any) -> None:
    _, reference = reference_smollm2
    for text in TEXTS:
        expected = reference.encode(text, add_special_tokens=False)
        assert smollm2_engine.tokenizer.encode(text, add_special=False) == expected, text
        assert smollm2_engine.encode(text) == reference.encode(text), text
        assert smollm2_engine.decode(expected) == reference.decode(expected, skip_special_tokens=True)
    messages = [{"role": "user", "content": "Hi there"}]
    expected_chat = reference.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert smollm2_engine.tokenizer.apply_chat_template(messages) == expected_chat


@pytest.mark.slow
def test_smollm2_logits_match_transformers(smollm2_engine: Engine, reference_smollm2: Any) -> None:
    model, _ = reference_smollm2
    ids = smollm2_engine.chat_prompt([{"role": "user", "content": PROMPTS[1]}])
    with torch.inference_mode():
        expected = model(torch.tensor([ids])).logits[0]
    torch.testing.assert_close(our_logits(smollm2_engine, ids), expected, atol=1e-3, rtol=0)


@pytest.mark.slow
def test_smollm2_greedy_text_equals_transformers(smollm2_engine: Engine, reference_smollm2: Any) -> None:
    model, tokenizer = reference_smollm2
    n_new = 32
    for prompt in PROMPTS:
        ids = smollm2_engine.chat_prompt([{"role": "user", "content": prompt}])
        deltas = list(smollm2_engine.generate(ids, SamplingParams(max_tokens=n_new, temperature=0.0)))
        ours = "".join(d.text for d in deltas)
        our_ids = [t for d in deltas for t in d.token_ids]
        with torch.inference_mode():
            out = model.generate(
                torch.tensor([ids]), max_new_tokens=n_new, do_sample=False, eos_token_id=2, pad_token_id=2
            )
        their_ids = out[0, len(ids) :].tolist()
        assert our_ids == their_ids, prompt
        assert ours == tokenizer.decode([t for t in their_ids if t != 2], skip_special_tokens=True), prompt
