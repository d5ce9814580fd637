"""Load a llama.cpp GGUF file: hyper-parameters, dequantized weights in our layout, the tokenizer.

``gguf.GGUFReader`` parses the container (memory-mapped); the block formats are dequantized here
with numpy, written out below, so that what a quantized checkpoint *means* is readable in this repo.
llama.cpp's converter permutes the rows of ``attn_q``/``attn_k`` for its interleaved ("GPT-J") RoPE;
we undo that to get Hugging Face's rotate-half layout, then hand over to ``hf.to_our_layout``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from lossless.engine.model.args import ModelArgs
from lossless.engine.model.tokenizer import Tokenizer
from lossless.engine.weights.hf import Checkpoint, to_our_layout
from lossless.engine.weights.quant import Q4_TYPES, ROWS, Int4Weight
from lossless.errors import CheckpointError

BLOCK = 32  # values per block in every legacy ggml quant format


def _f16(blocks: np.ndarray, start: int) -> np.ndarray:
    # blocks: [N, bytes] uint8 -> the little-endian float16 at byte `start` of each block: [N, 1]
    return blocks[:, start : start + 2].copy().view(np.float16).astype(np.float32)


def _nibbles(qs: np.ndarray) -> np.ndarray:
    # qs: [N, 16] uint8 -> [N, 32]: low nibbles are values 0..15 of the block, high nibbles 16..31
    return np.concatenate([qs & 0x0F, qs >> 4], axis=1).astype(np.float32)


def dequant_q8_0(blocks: np.ndarray) -> np.ndarray:
    # Q8_0, 34 bytes: d (f16) | qs[32] (int8);  x = d * q
    d = _f16(blocks, 0)
    return d * blocks[:, 2:34].view(np.int8).astype(np.float32)


def dequant_q4_0(blocks: np.ndarray) -> np.ndarray:
    # Q4_0, 18 bytes: d (f16) | qs[16] (two 4-bit values a byte);  x = d * (q - 8)
    d = _f16(blocks, 0)
    return d * (_nibbles(blocks[:, 2:18]) - 8.0)


def dequant_q4_1(blocks: np.ndarray) -> np.ndarray:
    # Q4_1, 20 bytes: d (f16) | m (f16) | qs[16];  x = d * q + m  (unsigned q, with an offset m)
    d, m = _f16(blocks, 0), _f16(blocks, 2)
    return d * _nibbles(blocks[:, 4:20]) + m


# type name -> (bytes per block of 32, dequantizer of [N, bytes] uint8 blocks -> [N, 32] float32)
QUANTS: dict[str, tuple[int, Callable[[np.ndarray], np.ndarray]]] = {
    "Q8_0": (34, dequant_q8_0),
    "Q4_0": (18, dequant_q4_0),
    "Q4_1": (20, dequant_q4_1),
}
SUPPORTED = ("F32", "F16", "BF16", *QUANTS)


def dequantize(type_name: str, data: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Raw tensor data as GGUFReader maps it -> float32 array of ``shape`` (numpy/torch order)."""
    if type_name == "F32":
        return np.array(data, dtype=np.float32).reshape(shape)  # a copy: the map is read-only
    if type_name == "F16":
        return np.asarray(data).view(np.float16).astype(np.float32).reshape(shape)
    if type_name == "BF16":
        # bf16 is the top half of a float32
        bits = np.asarray(data).reshape(-1).view(np.uint16).astype(np.uint32) << 16
        return bits.view(np.float32).reshape(shape)
    size, fn = QUANTS[type_name]
    blocks = np.asarray(data, dtype=np.uint8).reshape(-1, size)
    return fn(blocks).reshape(shape)


def unpermute(w: Tensor, n_heads: int) -> Tensor:
    """Undo llama.cpp's q/k row permutation: per head, rows (pair i, half j) -> (half j, pair i)."""
    # w: [n_heads * head_dim, dim]; llama.cpp stored row 2i+j of a head as HF's row j*head_dim/2 + i
    rows, cols = w.shape
    return w.reshape(n_heads, rows // n_heads // 2, 2, cols).transpose(1, 2).reshape(rows, cols)


def load_gguf(path: Path, dtype: torch.dtype = torch.float32, int4: bool = False) -> Checkpoint:
    """A GGUF file -> Checkpoint; a corrupt, truncated or unsupported file -> CheckpointError. ``int4``:
    also keep the 4-bit blocks of the linear layers stored as Q4_0 / Q4_1 (``Checkpoint.int4``)."""
    try:
        reader = gguf_reader(path)
    except FileNotFoundError as exc:
        raise CheckpointError(f"{path.name}: no such file") from exc
    except (ValueError, OSError, KeyError, IndexError, UnicodeDecodeError) as exc:
        # truncated files fail as a reshape of a short memory map; bad magic / types as ValueError
        raise CheckpointError(f"{path.name}: not a readable GGUF file ({exc})") from exc
    meta = _metadata(reader)
    args = _model_args(meta, path)
    hf = _hf_tensors(reader, args, path)
    # llama.cpp drops output.weight when the model ties it to the embedding
    args = replace(args, tie_embeddings="lm_head.weight" not in hf)
    weights = to_our_layout(hf, args, dtype, path.name)
    tokenizer = _tokenizer(meta, path)
    blocks = _int4_layers(reader, args) if int4 else {}
    output = _q8_output(reader, args) if int4 else None
    return Checkpoint(args, weights, tokenizer, path.stem, blocks, output)


def gguf_reader(path: Path) -> Any:
    """``path``'s GGUFReader, parsed once per process for one version of the file: its header (SmolLM2's
    49152-token vocabulary) takes ~3 s to parse on 2 cores, and choosing the dtype reads it before the
    loader does. Raises as GGUFReader does."""
    stat = path.stat()
    return _read(str(path.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=1)
def _read(path: str, size: int, mtime_ns: int) -> Any:
    from gguf import GGUFReader

    return GGUFReader(path)


def _metadata(reader: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {}
    for key, field in reader.fields.items():
        try:
            meta[key] = field.contents()
        except (ValueError, IndexError, UnicodeDecodeError):
            meta[key] = None  # an unreadable value is reported only if it turns out to be needed
    return meta


def _model_args(meta: dict[str, Any], path: Path) -> ModelArgs:
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise CheckpointError(f"{path.name}: architecture {arch!r}, supported: llama")

    def get(key: str, default: Any = None) -> Any:
        value = meta.get(f"llama.{key}", default)
        if value is None:
            raise CheckpointError(f"{path.name}: missing metadata llama.{key}")
        return value

    n_heads = int(get("attention.head_count"))
    n_vocab = meta.get("llama.vocab_size") or len(meta.get("tokenizer.ggml.tokens") or ())
    return ModelArgs(
        vocab_size=int(n_vocab),
        dim=int(get("embedding_length")),
        n_layers=int(get("block_count")),
        n_heads=n_heads,
        n_kv_heads=int(get("attention.head_count_kv", n_heads)),
        hidden_dim=int(get("feed_forward_length")),
        rope_theta=float(get("rope.freq_base", 10000.0)),
        norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
        max_seq_len=int(get("context_length", 2048)),
        tie_embeddings=False,  # decided by load_gguf from whether output.weight exists
    )


# GGUF tensor name (after "blk.N.") -> Hugging Face name (after "model.layers.N.")
_LAYER_NAMES = {
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}
_GLOBAL_NAMES = {"token_embd": "model.embed_tokens", "output_norm": "model.norm", "output": "lm_head"}


def _hf_name(name: str) -> str | None:
    stem, _, suffix = name.rpartition(".")
    if stem.startswith("blk."):
        _, layer, part = stem.split(".", 2)
        hf = _LAYER_NAMES.get(part)
        return f"model.layers.{layer}.{hf}.{suffix}" if hf else None
    hf = _GLOBAL_NAMES.get(stem)
    return f"{hf}.{suffix}" if hf else None


def _hf_tensors(reader: Any, args: ModelArgs, path: Path) -> dict[str, Tensor]:
    out: dict[str, Tensor] = {}
    for t in reader.tensors:
        hf = _hf_name(t.name)
        if hf is None:
            continue  # e.g. rope_freqs: recomputed from the metadata
        kind = t.tensor_type.name
        if kind not in SUPPORTED:
            supported = ", ".join(SUPPORTED)
            raise CheckpointError(f"{path.name}: tensor {t.name} has type {kind}, supported: {supported}")
        shape = tuple(int(d) for d in reversed(t.shape.tolist()))  # ggml lists the fastest axis first
        try:
            w = torch.from_numpy(dequantize(kind, t.data, shape))
        except ValueError as exc:
            raise CheckpointError(f"{path.name}: tensor {t.name} is truncated or malformed ({exc})") from exc
        if t.name.endswith("attn_q.weight"):
            w = unpermute(w, args.n_heads)
        elif t.name.endswith("attn_k.weight"):
            w = unpermute(w, args.n_kv_heads)
        out[hf] = w
    return out


def q4_weight(type_name: str, blocks: np.ndarray, shape: tuple[int, int]) -> Int4Weight:
    """Raw blocks ([N * K / 32, bytes] uint8) of a Q4_0 or Q4_1 tensor of ``shape`` [N, K] -> its codes,
    with the kernel's scale d and zero (Q4_0: 0; Q4_1: m + 8d, the weight of code 8)."""
    d = _f16(blocks, 0)
    if type_name == "Q4_1":
        codes, zero = _nibbles(blocks[:, 4:20]), _f16(blocks, 2) + 8.0 * d
    else:
        codes, zero = _nibbles(blocks[:, 2:18]), np.zeros_like(d)
    rows, cols = shape
    groups = (rows, cols // BLOCK)
    return Int4Weight(
        torch.from_numpy(codes.astype(np.uint8).reshape(rows, cols)),
        torch.from_numpy(d.reshape(groups)),
        torch.from_numpy(zero.reshape(groups)),
    )


# our fused linear layers and the GGUF tensors stacked in each (rows in this order, as to_our_layout does)
_FUSED = {
    "attention.wqkv": ("attn_q", "attn_k", "attn_v"),
    "attention.wo": ("attn_output",),
    "feed_forward.w13": ("ffn_gate", "ffn_up"),
    "feed_forward.w2": ("ffn_down",),
}


def _int4_layers(reader: Any, args: ModelArgs) -> dict[str, Int4Weight]:
    """Our linear layers whose every part is stored as Q4_0 / Q4_1 -> their 4-bit blocks (the rest, and
    the embedding and output layers, stay dense)."""
    found: dict[str, Int4Weight] = {}
    for t in reader.tensors:
        kind, (stem, _, _) = t.tensor_type.name, t.name.rpartition(".")
        if kind not in Q4_TYPES or not stem.startswith("blk."):
            continue
        cols, rows = (int(d) for d in t.shape.tolist())  # ggml lists the fastest axis first
        size, _ = QUANTS[kind]
        weight = q4_weight(kind, np.asarray(t.data, dtype=np.uint8).reshape(-1, size), (rows, cols))
        if stem.endswith("attn_q"):
            weight = weight.map_rows(lambda w: unpermute(w, args.n_heads))
        elif stem.endswith("attn_k"):
            weight = weight.map_rows(lambda w: unpermute(w, args.n_kv_heads))
        found[stem] = weight
    out = {}
    for layer in range(args.n_layers):
        for ours, parts in _FUSED.items():
            names = [f"blk.{layer}.{p}" for p in parts]
            if all(n in found for n in names) and sum(found[n].codes.shape[0] for n in names) % ROWS == 0:
                out[f"layers.{layer}.{ours}"] = Int4Weight.cat([found[n] for n in names])
    return out


def _q8_output(reader: Any, args: ModelArgs) -> tuple[Tensor, Tensor] | None:
    """The output layer's blocks where it is stored as Q8_0 (the embedding's, where the two are tied) ->
    (codes [N, K] int8, d [N, K / 32] float32), else None."""
    name = "token_embd.weight" if args.tie_embeddings else "output.weight"
    found = next((t for t in reader.tensors if t.name == name), None)
    if found is None or found.tensor_type.name != "Q8_0":
        return None
    cols, rows = (int(d) for d in found.shape.tolist())
    return q8_weight(np.asarray(found.data, dtype=np.uint8).reshape(-1, QUANTS["Q8_0"][0]), (rows, cols))


def q8_weight(blocks: np.ndarray, shape: tuple[int, int]) -> tuple[Tensor, Tensor]:
    """Raw Q8_0 blocks ([N * K / 32, 34] uint8) of a tensor of ``shape`` [N, K] -> (codes [N, K] int8, d
    [N, K / 32] float32): the weight d * q."""
    rows, cols = shape
    codes = blocks[:, 2:34].copy().view(np.int8).reshape(rows, cols)
    return torch.from_numpy(codes), torch.from_numpy(_f16(blocks, 0).reshape(rows, cols // BLOCK))


_END_OF_TURN = frozenset({"<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>"})


def _tokenizer(meta: dict[str, Any], path: Path) -> Tokenizer:
    model = meta.get("tokenizer.ggml.model")
    if model != "gpt2":
        raise CheckpointError(f"{path.name}: tokenizer model {model!r}, supported: gpt2 (byte-level BPE)")
    tokens, merges = meta.get("tokenizer.ggml.tokens"), meta.get("tokenizer.ggml.merges")
    if not tokens or merges is None:
        raise CheckpointError(f"{path.name}: tokenizer.ggml.tokens or tokenizer.ggml.merges missing")
    # llama.cpp ends generation at eos, eot and the end-of-turn control tokens it knows by name
    eos = [meta.get(f"tokenizer.ggml.{k}_token_id") for k in ("eos", "eot")]
    eos += [i for i, t in enumerate(tokens) if t in _END_OF_TURN]
    return Tokenizer.from_gguf(
        tokens=list(tokens),
        merges=list(merges),
        token_types=list(meta.get("tokenizer.ggml.token_type") or []),
        pre=str(meta.get("tokenizer.ggml.pre") or "default"),
        bos_id=meta.get("tokenizer.ggml.bos_token_id"),
        eos_ids=list(dict.fromkeys(int(i) for i in eos if i is not None)),  # the primary one first
        add_bos=bool(meta.get("tokenizer.ggml.add_bos_token") or False),
        chat_template=meta.get("tokenizer.chat_template"),
    )
