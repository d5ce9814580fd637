"""Tokenizers small enough for exact enumeration, real enough for llguidance: id 0 is the special
end-of-turn token ``<|im_end|>`` (eos), ids 1.. are one printable character each (byte-level BPE,
no merges), so a grammar over characters is a grammar over token ids."""

from __future__ import annotations

from tokenizers import AddedToken, Tokenizer as Backend, decoders, models, pre_tokenizers

from lossless.engine.model.tokenizer import Tokenizer, byte_decoder

EOS = "<|im_end|>"


def char_tokenizer(chars: str) -> Tokenizer:
    """``len(chars) + 1`` tokens: EOS, then ``chars`` in order (each a single-byte character)."""
    spell = {b: c for c, b in byte_decoder().items()}  # byte -> its byte-level alphabet character
    vocab = {EOS: 0} | {spell[ord(ch)]: i + 1 for i, ch in enumerate(chars)}
    assert len(vocab) == len(chars) + 1, "characters must be distinct"
    backend = Backend(models.BPE(vocab, [], fuse_unk=False, byte_fallback=False))
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    backend.decoder = decoders.ByteLevel()
    backend.add_special_tokens([AddedToken(EOS, normalized=False, special=True)])
    return Tokenizer(backend, eos_ids=[0], eos_token=EOS)


PRINTABLE = "".join(chr(c) for c in range(32, 127))  # 95 characters: 96 tokens with EOS (TINY's vocab)
