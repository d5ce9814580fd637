"""The tiny Hugging Face checkpoint (tiny_checkpoint.py) rewritten as llama.cpp's converter writes a
GGUF: its tensor names, q/k rows permuted for interleaved RoPE, matrices in a chosen ggml quant type."""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import torch
from safetensors.torch import load_file

Q = gguf.GGMLQuantizationType


def llama_cpp_permute(w: torch.Tensor, n_heads: int) -> torch.Tensor:
    # convert_hf_to_gguf.py's LlamaModel.permute, verbatim in torch
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(folder: Path, out: Path, qtype: Q = Q.F32, output: Q | None = None) -> Path:
    """The tiny HF checkpoint rewritten as llama.cpp would: GGUF names, permuted q/k, quantized matrices
    (the embedding and output layer in ``output`` where given, as llama.cpp keeps them in Q8_0)."""
    config = json.loads((folder / "config.json").read_text())
    tok = json.loads((folder / "tokenizer.json").read_text())
    weights = load_file(str(folder / "model.safetensors"))
    n_heads, n_kv = config["num_attention_heads"], config["num_key_value_heads"]
    w = gguf.GGUFWriter(out, "llama")
    w.add_block_count(config["num_hidden_layers"])
    w.add_context_length(config["max_position_embeddings"])
    w.add_embedding_length(config["hidden_size"])
    w.add_feed_forward_length(config["intermediate_size"])
    w.add_head_count(n_heads)
    w.add_head_count_kv(n_kv)
    w.add_rope_freq_base(config["rope_theta"])
    w.add_layer_norm_rms_eps(config["rms_norm_eps"])
    w.add_vocab_size(config["vocab_size"])
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
    specials = {t["content"]: t["id"] for t in tok["added_tokens"]}
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list([t for t, _ in vocab])
    w.add_token_types([3 if t in specials else 1 for t, _ in vocab])
    w.add_token_merges([" ".join(m) if isinstance(m, list) else m for m in tok["model"]["merges"]])
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_chat_template(json.loads((folder / "tokenizer_config.json").read_text())["chat_template"])
    names = {"model.embed_tokens": "token_embd", "model.norm": "output_norm", "lm_head": "output"}
    parts = {
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm",
        "self_attn.q_proj": "attn_q",
    }
    parts |= {"self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v", "self_attn.o_proj": "attn_output"}
    parts |= {"mlp.gate_proj": "ffn_gate", "mlp.up_proj": "ffn_up", "mlp.down_proj": "ffn_down"}
    for name, t in weights.items():
        stem = name.removesuffix(".weight")
        if stem.startswith("model.layers."):
            _, _, layer, part = stem.split(".", 3)
            gguf_name = f"blk.{layer}.{parts[part]}.weight"
        else:
            gguf_name = names[stem] + ".weight"
        if gguf_name.endswith("attn_q.weight"):
            t = llama_cpp_permute(t, n_heads)
        elif gguf_name.endswith("attn_k.weight"):
            t = llama_cpp_permute(t, n_kv)
        data = t.numpy()
        kind = qtype if data.ndim == 2 else Q.F32  # llama.cpp keeps norms in F32
        if output is not None and gguf_name in ("token_embd.weight", "output.weight"):
            kind = output
        w.add_tensor(gguf_name, gguf.quants.quantize(data, kind), raw_dtype=kind)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return out
