"""Load a Hugging Face Llama checkpoint directory; the common ``Checkpoint`` both loaders return.

A directory holds ``config.json``, one or more ``*.safetensors`` and ``tokenizer.json`` (with the chat
template in ``tokenizer_config.json``). Hugging Face's parameter names and its rotate-half RoPE layout
are the reference our model follows, so ``to_our_layout`` is also what the GGUF loader ends with.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from torch import Tensor

from lossless.engine.model.args import ModelArgs
from lossless.engine.model.tokenizer import Tokenizer
from lossless.errors import CheckpointError

if TYPE_CHECKING:
    from lossless.engine.weights.quant import Int4Weight


@dataclass(frozen=True)
class Checkpoint:
    args: ModelArgs  # hyper-parameters
    weights: dict[str, Tensor]  # our Transformer's state dict (fused wqkv / w13), in the requested dtype
    tokenizer: Tokenizer
    name: str  # a model name to report: the file stem or folder name
    # the file's own 4-bit blocks of the linear layers stored as Q4_0 / Q4_1, by our module name
    # (``layers.0.attention.wqkv``); filled only when the loader is asked for them
    int4: dict[str, Int4Weight] = field(default_factory=dict)
    # the output layer's own Q8_0 blocks (codes [N, K] int8, d [N, K / 32]), read with the 4-bit ones
    output_q8: tuple[Tensor, Tensor] | None = None


def load_hf(path: Path, dtype: torch.dtype = torch.float32) -> Checkpoint:
    """A Hugging Face Llama directory -> Checkpoint; any defect -> CheckpointError naming the file."""
    config = _read_json(path / "config.json")
    args = args_from_config(config, path / "config.json")
    files = sorted(path.glob("*.safetensors"))
    if not files:
        raise CheckpointError(f"{path.name}: no *.safetensors file in the directory")
    hf_weights: dict[str, Tensor] = {}
    for file in files:
        hf_weights.update(_read_safetensors(file))
    tok_config, gen_config = path / "tokenizer_config.json", path / "generation_config.json"
    # generation_config.json may name more end tokens than the tokenizer's eos (Llama 3: end of turn)
    eos = _read_json(gen_config).get("eos_token_id") if gen_config.is_file() else None
    tokenizer = Tokenizer.from_json(
        path / "tokenizer.json",
        _read_json(tok_config) if tok_config.is_file() else {},
        extra_eos_ids=[eos] if isinstance(eos, int) else eos if isinstance(eos, list) else [],
    )
    weights = to_our_layout(hf_weights, args, dtype, path.name)
    return Checkpoint(args, weights, tokenizer, path.name)


def args_from_config(config: dict[str, Any], file: Path) -> ModelArgs:
    if config.get("model_type", "llama") != "llama":
        raise CheckpointError(f"{file.name}: model_type {config['model_type']!r}, supported: llama")
    try:
        n_heads = int(config["num_attention_heads"])
        return ModelArgs(
            vocab_size=int(config["vocab_size"]),
            dim=int(config["hidden_size"]),
            n_layers=int(config["num_hidden_layers"]),
            n_heads=n_heads,
            n_kv_heads=int(config.get("num_key_value_heads") or n_heads),
            hidden_dim=int(config["intermediate_size"]),
            rope_theta=float(config.get("rope_theta", 10000.0)),
            norm_eps=float(config.get("rms_norm_eps", 1e-5)),
            max_seq_len=int(config.get("max_position_embeddings", 2048)),
            tie_embeddings=bool(config.get("tie_word_embeddings", False)),
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise CheckpointError(f"{file.name}: missing or invalid field {exc}") from exc


def to_our_layout(
    hf: dict[str, Tensor], args: ModelArgs, dtype: torch.dtype, source: str
) -> dict[str, Tensor]:
    """Hugging Face names (``model.layers.0.self_attn.q_proj.weight`` ...) -> our fused state dict."""

    def take(name: str) -> Tensor:
        if name not in hf:
            raise CheckpointError(f"{source}: missing tensor {name}")
        return hf[name].to(dtype)

    out = {
        "tok_embeddings.weight": take("model.embed_tokens.weight"),
        "norm.weight": take("model.norm.weight"),
    }
    if args.tie_embeddings:
        out["output.weight"] = out["tok_embeddings.weight"]
    else:
        out["output.weight"] = take("lm_head.weight")
    for i in range(args.n_layers):
        p, q = f"model.layers.{i}.", f"layers.{i}."
        out[q + "attention_norm.weight"] = take(p + "input_layernorm.weight")
        out[q + "ffn_norm.weight"] = take(p + "post_attention_layernorm.weight")
        qkv = [take(p + f"self_attn.{n}_proj.weight") for n in ("q", "k", "v")]
        out[q + "attention.wqkv.weight"] = torch.cat(qkv)  # [(H + 2 Hkv) * D, dim]
        out[q + "attention.wo.weight"] = take(p + "self_attn.o_proj.weight")
        gate_up = [take(p + f"mlp.{n}_proj.weight") for n in ("gate", "up")]
        out[q + "feed_forward.w13.weight"] = torch.cat(gate_up)  # [2 * hidden, dim]
        out[q + "feed_forward.w2.weight"] = take(p + "mlp.down_proj.weight")
    _check_shapes(out, args, source)
    return out


def _check_shapes(weights: dict[str, Tensor], args: ModelArgs, source: str) -> None:
    # A config that disagrees with its tensors would otherwise fail deep inside load_state_dict.
    qkv = (args.n_heads + 2 * args.n_kv_heads) * args.head_dim
    expected = {
        "tok_embeddings.weight": (args.vocab_size, args.dim),
        "output.weight": (args.vocab_size, args.dim),
        "layers.0.attention.wqkv.weight": (qkv, args.dim),
        "layers.0.feed_forward.w13.weight": (2 * args.hidden_dim, args.dim),
        "layers.0.feed_forward.w2.weight": (args.dim, args.hidden_dim),
    }
    for name, shape in expected.items():
        if name in weights and tuple(weights[name].shape) != shape:
            got = tuple(weights[name].shape)
            raise CheckpointError(f"{source}: tensor {name} has shape {got}, the config implies {shape}")


def _read_json(file: Path) -> dict[str, Any]:
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except FileNotFoundError as exc:
        raise CheckpointError(f"{file.name}: no such file in {file.parent}") from exc
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CheckpointError(f"{file.name}: not readable JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise CheckpointError(f"{file.name}: expected a JSON object")
    return data


def _read_safetensors(file: Path) -> dict[str, Tensor]:
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(file))
    except (SafetensorError, OSError, RuntimeError) as exc:
        raise CheckpointError(f"{file.name}: not a readable safetensors file ({exc})") from exc
