"""Model hyper-parameters of a Llama-family decoder, with tiny configs for tests beside the real one."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ModelArgs:
    vocab_size: int = 49152  # tokens in the embedding and output layers
    dim: int = 576  # model width (hidden size)
    n_layers: int = 30  # transformer blocks
    n_heads: int = 9  # query heads
    n_kv_heads: int = 3  # key/value heads (grouped-query attention when < n_heads)
    hidden_dim: int = 1536  # SwiGLU intermediate size
    rope_theta: float = 100000.0  # RoPE base
    norm_eps: float = 1e-5  # RMSNorm epsilon
    max_seq_len: int = 8192  # context length the model was trained for
    tie_embeddings: bool = True  # output layer shares the token embedding

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads


# SmolLM2-135M-Instruct, as its GGUF metadata and config.json describe it.
SMOLLM2_135M = ModelArgs()

# Tests: small enough to run in float64 in milliseconds, large enough to exercise GQA and RoPE.
TINY = ModelArgs(vocab_size=96, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, hidden_dim=128, max_seq_len=256)
