"""Byte-level BPE tokenizer (``tokenizers``) from a tokenizer.json or from GGUF metadata, and chat templates.

Only byte-level BPE (GPT-2 / SmolLM2 / Llama 3 / Qwen family) is supported: every token is a byte string,
which is what makes incremental decoding exact (``IncrementalDecoder`` holds back incomplete UTF-8).
"""

from __future__ import annotations

import codecs
import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import cache
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, Regex, Tokenizer as Backend, decoders, pre_tokenizers, processors
from tokenizers.models import BPE

from lossless.errors import CheckpointError, UsageError

_LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)


def _pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
    """llama.cpp's ``tokenizer.ggml.pre`` name -> the pre-tokenizer of the model's own tokenizer.json."""
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)  # GPT-2's split
    if pre in ("default", "gpt2"):
        return byte_level
    if pre == "smollm":
        # SmolLM2's tokenizer.json: every digit on its own, then GPT-2's byte-level split
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), byte_level])
    if pre in ("llama3", "llama-v3", "llama-bpe", "smaug-bpe", "dbrx", "falcon3"):
        return pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(_LLAMA3_SPLIT), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    # Guessing would tokenize differently from the model's training: refuse instead.
    raise CheckpointError(f"pre-tokenizer {pre!r} unsupported, supported: default, gpt2, smollm, llama3")


@cache
def byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, reversed: the printable character standing for each byte -> byte."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    chars, n = list(printable), 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


class Tokenizer:
    def __init__(
        self,
        backend: Backend,
        *,
        eos_ids: Iterable[int],
        bos_token: str | None = None,
        eos_token: str | None = None,
        chat_template: str | None = None,
    ) -> None:
        self.backend = backend
        self.eos_ids = frozenset(eos_ids)  # generation ends at any of these
        self.bos_token, self.eos_token = bos_token, eos_token  # the template may write them
        self.chat_template = chat_template
        self.vocab_size = backend.get_vocab_size(with_added_tokens=True)
        added = backend.get_added_tokens_decoder()
        self.special_ids = frozenset(i for i, t in added.items() if t.special)  # not shown in output text
        self._bytes = self._token_bytes(added)

    @classmethod
    def from_json(cls, file: Path, config: dict[str, Any], extra_eos_ids: Iterable[int] = ()) -> Tokenizer:
        """tokenizer.json plus tokenizer_config.json's contents (chat template, eos/bos tokens)."""
        try:
            backend = Backend.from_file(str(file))
        except Exception as exc:  # tokenizers raises plain Exception for a missing or malformed file
            raise CheckpointError(f"{file.name}: not a readable tokenizer ({exc})") from exc
        decoder = json.loads(backend.to_str()).get("decoder") or {}
        if decoder.get("type") != "ByteLevel":
            raise CheckpointError(f"{file.name}: decoder {decoder.get('type')!r}, supported: ByteLevel (BPE)")
        bos, eos = _token_name(config.get("bos_token")), _token_name(config.get("eos_token"))
        eos_ids = {backend.token_to_id(t) for t in [eos, *_END_OF_TURN] if t}
        return cls(
            backend,
            eos_ids={i for i in eos_ids if i is not None} | {int(i) for i in extra_eos_ids},
            bos_token=bos,
            eos_token=eos,
            chat_template=_template(config.get("chat_template")),
        )

    @classmethod
    def from_gguf(
        cls,
        *,
        tokens: Sequence[str],
        merges: Sequence[str],
        token_types: Sequence[int],
        pre: str,
        bos_id: int | None,
        eos_ids: Iterable[int],
        add_bos: bool,
        chat_template: str | None,
    ) -> Tokenizer:
        """GGUF's ``tokenizer.ggml.*`` arrays -> the byte-level BPE the model's tokenizer.json describes."""
        alphabet = byte_decoder()
        # GGUF writes a few tokens in plain text rather than the byte alphabet; respell those
        spelled = [t if set(t) <= alphabet.keys() else _respell(t) for t in tokens]
        vocab = {t: i for i, t in enumerate(spelled)}
        pairs = [tuple(m.split(" ", 1)) for m in merges]
        backend = Backend(BPE(vocab, pairs, fuse_unk=False, byte_fallback=False))  # type: ignore[arg-type]
        backend.pre_tokenizer = _pre_tokenizer(pre)
        backend.decoder = decoders.ByteLevel()
        types = list(token_types) if len(token_types) == len(tokens) else [1] * len(tokens)
        # 3 = CONTROL (special, never split), 4 = USER_DEFINED (matched whole, shown in text)
        backend.add_special_tokens(
            [
                AddedToken(t, normalized=False, special=True)
                for t, k in zip(spelled, types, strict=True)
                if k == 3
            ]
        )
        backend.add_tokens(
            [AddedToken(t, normalized=False) for t, k in zip(spelled, types, strict=True) if k == 4]
        )
        bos = tokens[bos_id] if bos_id is not None and 0 <= bos_id < len(tokens) else None
        if add_bos and bos is not None:
            backend.post_processor = processors.TemplateProcessing(
                single=f"{bos} $A",
                pair=f"{bos} $A $B",
                special_tokens=[(bos, int(bos_id))],  # type: ignore[arg-type]
            )
        eos_ids = list(eos_ids)
        eos = tokens[eos_ids[0]] if eos_ids else None
        return cls(backend, eos_ids=eos_ids, bos_token=bos, eos_token=eos, chat_template=chat_template)

    def _token_bytes(self, added: dict[int, AddedToken]) -> list[bytes]:
        alphabet = byte_decoder()
        out = []
        for i in range(self.vocab_size):
            token = self.backend.id_to_token(i)
            if token is None:
                out.append(b"")
            elif i in added:
                out.append(added[i].content.encode("utf-8"))
            else:
                out.append(bytes(alphabet[c] for c in token if c in alphabet))
        return out

    def encode(self, text: str, *, add_special: bool = True) -> list[int]:
        """Text -> ids; ``add_special`` lets the tokenizer add its BOS (never for chat-templated text)."""
        return self.backend.encode(text, add_special_tokens=add_special).ids

    def decode(self, ids: Sequence[int], *, skip_special: bool = True) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special)

    def token_text(self, token_id: int) -> str:
        """One token's own text (special tokens included; partial UTF-8 shown as U+FFFD)."""
        return self.token_bytes(token_id).decode("utf-8", errors="replace")

    def token_bytes(self, token_id: int) -> bytes:
        return self._bytes[token_id] if 0 <= token_id < len(self._bytes) else b""

    def decoder(self) -> IncrementalDecoder:
        return IncrementalDecoder(self)

    def apply_chat_template(
        self, messages: list[dict[str, Any]], *, add_generation_prompt: bool = True
    ) -> str:
        if not self.chat_template:
            raise UsageError("this model has no chat template: send a plain completion request instead")
        from jinja2 import TemplateError

        try:
            template = _compile(self.chat_template)
            return template.render(
                messages=messages,
                add_generation_prompt=add_generation_prompt,
                bos_token=self.bos_token or "",
                eos_token=self.eos_token or "",
            )
        except TemplateError as exc:
            raise UsageError(f"chat template: {exc}") from exc


class IncrementalDecoder:
    """Token ids -> text as they come; bytes of a character split across tokens wait for the rest."""

    def __init__(self, tokenizer: Tokenizer) -> None:
        self.tokenizer = tokenizer
        self._utf8 = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def feed(self, ids: Iterable[int]) -> str:
        skip = self.tokenizer.special_ids
        data = b"".join(self.tokenizer.token_bytes(i) for i in ids if i not in skip)
        return self._utf8.decode(data)

    def flush(self) -> str:
        """At the end: whatever is still held (an incomplete character becomes U+FFFD, as decode does)."""
        return self._utf8.decode(b"", final=True)


_END_OF_TURN = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end|>", "<end_of_turn>")


def _respell(token: str) -> str:
    spell = {b: c for c, b in byte_decoder().items()}
    return "".join(spell[b] for b in token.encode("utf-8"))


def _token_name(value: Any) -> str | None:
    # tokenizer_config.json writes special tokens as a string or as an AddedToken dict
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _template(value: Any) -> str | None:
    # a list of named templates is allowed: take "default"
    if isinstance(value, list):
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        value = named.get("default")
    return value if isinstance(value, str) else None


@cache
def _compile(source: str) -> Any:
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    def tojson(value: Any, indent: int | None = None) -> str:
        # like transformers: no HTML escaping, non-ASCII kept
        return json.dumps(value, ensure_ascii=False, indent=indent)

    # trim_blocks / lstrip_blocks as transformers renders templates, so prompts match byte for byte
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(source)
