"""Regenerate src/lossless/inspect/tokenizers.json: every tokenizer family's reference counts for the
identity strings (``lossless.inspect.identity.PROBES``), counted by llama.cpp itself.

    python benchmarks/tokenizer_fingerprints.py [--vocab-dir DIR] [--out PATH]

Where the tokenizers come from:
- the vocabulary-only GGUFs llama.cpp keeps for its tokenizer tests,
  ``vendor/llama.cpp/models/ggml-vocab-*.gguf`` in the llama-cpp-python 0.3.36 source distribution on
  PyPI (``pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36``, which
  tests/support/llama_vocab.py runs and unpacks into --vocab-dir, a temporary folder by default); all
  but the encoder-only BERT ones (bert-bge, nomic-bert-moe), which no chat endpoint serves;
- SmolLM2's, from the embedded model's GGUF (``lossless models pull``; pulled here when missing).
Each is counted by ``identity.counter`` (``llama_cpp.Llama(vocab_only=True)``, ``tokenize(add_bos=False,
special=False)``): the same code that counts a tokenizer a user names. Only the counts are stored.
Prints, on stderr, the families that share every count (the strings cannot tell them apart) and the
closest distinct pairs. About 10 s with --vocab-dir filled, 25 s from pip's cache, a minute before.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
import tempfile
from pathlib import Path

from lossless.inspect import identity
from lossless.models import resolve
from support import LLAMA_VOCAB_VERSION, vocab_files

ENCODERS = {"bert-bge", "nomic-bert-moe"}  # embedding models: never behind a chat endpoint


def counts(vocab_dir: Path) -> dict[str, dict[str, object]]:
    sdist = f"llama-cpp-python {LLAMA_VOCAB_VERSION} sdist"
    sources = {f: (p, f"{p.name} ({sdist})") for f, p in vocab_files(vocab_dir).items()}
    embedded = resolve()
    sources["smollm2"] = (embedded, f"{embedded.name} (the embedded model)")
    families: dict[str, dict[str, object]] = {}
    for family, (path, source) in sorted(sources.items()):
        if family not in ENCODERS:
            families[family] = {"source": source, "counts": identity.fingerprint(identity.counter(str(path)))}
    return families


def render(families: dict[str, dict[str, object]]) -> str:
    head = {
        "about": "tokens each probe's message has beyond the baseline message, per tokenizer family; "
        "made by benchmarks/tokenizer_fingerprints.py, read by lossless/inspect/identity.py",
        "prefix": identity.PREFIX,
        "suffix": identity.SUFFIX,
        "baseline": identity.BASELINE,
        "probes": identity.PROBES,
    }
    lines = [f"  {json.dumps(k)}: {json.dumps(v, ensure_ascii=False)}," for k, v in head.items()]
    rows = [f"    {json.dumps(name)}: {json.dumps(entry)}" for name, entry in families.items()]
    return "{\n" + "\n".join(lines) + '\n  "families": {\n' + ",\n".join(rows) + "\n  }\n}\n"


def summary(families: dict[str, dict[str, object]]) -> str:
    vectors = {name: tuple(entry["counts"].values()) for name, entry in families.items()}  # type: ignore[attr-defined]
    groups: dict[tuple[int, ...], list[str]] = {}
    for name, vector in vectors.items():
        groups.setdefault(vector, []).append(name)
    shared = [" = ".join(names) for names in groups.values() if len(names) > 1]
    pairs = sorted(
        (sum(abs(x - y) for x, y in zip(a, b, strict=True)), " / ".join(groups[a]), " / ".join(groups[b]))
        for a, b in itertools.combinations(groups, 2)
    )
    closest = ", ".join(f"{a} vs {b}: {d}" for d, a, b in pairs[:5])
    return (
        f"{len(families)} families, {len(groups)} told apart; same counts: {'; '.join(shared) or 'none'}\n"
        f"closest (tokens): {closest}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--vocab-dir", type=Path, help="where the ggml-vocab files are (fetched if absent)")
    parser.add_argument("--out", type=Path, default=identity.TABLE)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        families = counts(args.vocab_dir or Path(tmp) / "vocab")
    args.out.write_text(render(families), encoding="utf-8")
    print(summary(families), file=sys.stderr)


if __name__ == "__main__":
    main()
