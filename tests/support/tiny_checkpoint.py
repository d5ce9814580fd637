"""A tiny random Llama checkpoint in Hugging Face layout, built in a blink (conftest's fixture, and
tests that need several of them)."""

from __future__ import annotations

import json
from pathlib import Path

# SmolLM2's chat template, verbatim from its GGUF metadata: the tiny checkpoint talks the same way.
SMOLLM2_CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}"
    "{{ '<|im_start|>system\nYou are a helpful AI assistant named SmolLM, "
    "trained by Hugging Face<|im_end|>\n' }}"
    "{% endif %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
TINY_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]  # ids 0, 1, 2 as in SmolLM2
_CORPUS = [
    "The quick brown fox jumps over the lazy dog. ",
    "Hello, world! How are you today? ",
    "def main():\n    return 42\n",
    "Paris is the capital of France. ",
    "Les élèves étudient à l'école. 日本語のテキスト ",
]


def write_tiny_checkpoint(folder: Path, seed: int = 0) -> Path:
    """A random Llama in Hugging Face layout (TINY's shapes, float32 safetensors) with a real byte-level
    BPE tokenizer.json (SmolLM2's special tokens and chat template, ~300 tokens)."""
    import torch
    from safetensors.torch import save_file
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    from lossless.engine.model.args import TINY

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=300,
        special_tokens=TINY_SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS * 4, trainer=trainer)
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    vocab = tok.get_vocab_size()

    args = TINY
    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": vocab,
        "hidden_size": args.dim,
        "num_hidden_layers": args.n_layers,
        "num_attention_heads": args.n_heads,
        "num_key_value_heads": args.n_kv_heads,
        "intermediate_size": args.hidden_dim,
        "rope_theta": args.rope_theta,
        "rms_norm_eps": args.norm_eps,
        "max_position_embeddings": args.max_seq_len,
        "tie_word_embeddings": False,
        "hidden_act": "silu",
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    }
    (folder / "config.json").write_text(json.dumps(config, indent=1))
    tok_config = {
        "bos_token": "<|im_start|>",
        "eos_token": "<|im_end|>",
        "chat_template": SMOLLM2_CHAT_TEMPLATE,
    }
    (folder / "tokenizer_config.json").write_text(json.dumps(tok_config, indent=1))

    gen = torch.Generator().manual_seed(seed)
    d, h, kv = args.dim, args.hidden_dim, args.n_kv_heads * args.head_dim

    def rand(*shape: int, std: float = 0.2) -> torch.Tensor:
        return torch.randn(*shape, generator=gen) * std

    weights = {"model.embed_tokens.weight": rand(vocab, d, std=1.0), "lm_head.weight": rand(vocab, d)}
    weights["model.norm.weight"] = 1 + rand(d, std=0.1)
    for i in range(args.n_layers):
        p = f"model.layers.{i}."
        weights |= {
            p + "input_layernorm.weight": 1 + rand(d, std=0.1),
            p + "post_attention_layernorm.weight": 1 + rand(d, std=0.1),
            p + "self_attn.q_proj.weight": rand(d, d),
            p + "self_attn.k_proj.weight": rand(kv, d),
            p + "self_attn.v_proj.weight": rand(kv, d),
            p + "self_attn.o_proj.weight": rand(d, d),
            p + "mlp.gate_proj.weight": rand(h, d),
            p + "mlp.up_proj.weight": rand(h, d),
            p + "mlp.down_proj.weight": rand(d, h),
        }
    save_file(weights, str(folder / "model.safetensors"))
    return folder
