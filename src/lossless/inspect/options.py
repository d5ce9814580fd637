"""What ``lossless inspect`` was asked to do: frozen options, checked when they are made; every default
defined here once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lossless.errors import UsageError
from lossless.provision.embedded import Embedded

# --reference words: the embedded model served with weights so (int4: the GGUF's own 4-bit blocks)
REFERENCE_WORDS = ("float32", "bfloat16", "int4")


def reference_parts(ref: str) -> tuple[str, str]:
    """A --reference as (its name, the URL or word): NAME=URL names itself; else the name is ""."""
    head, eq, tail = ref.partition("=")
    return (head, tail) if eq and "://" not in head else ("", ref)


@dataclass(frozen=True)
class InspectOptions:
    urls: tuple[str, ...] = ()  # base URLs; none: the embedded server, served plainly
    model: str | None = None  # "model" sent to the URLs; the embedded model's name or path without URLs
    api_key_env: str | None = None
    api: str = "chat"  # chat, responses or messages (precision's scoring asks /completions whatever this is)
    endpoints_file: Path | None = None  # TOML of [[endpoint]] tables, instead of urls
    tokenizers: tuple[str, ...] = ()  # identity references beyond the bundled ones: tokenizer.json, GGUF
    max_tokens: int = 48  # per speculation request: enough for bursts, short enough to stay in a passage
    min_rounds: int = 4  # rounds of the four speculation arms before the verdict may settle
    max_rounds: int = 8  # 8 settled every local configuration measured (docs/results/2026-12-02-inspect.md)
    budget_s: float = 120.0  # seconds: no round of speculation requests starts after this, per endpoint
    seed: int = 0  # bootstrap
    as_json: bool = False
    out_dir: Path | None = None  # inspect.json
    # precision's references: [NAME=]URL (served --model, --api-key-env) or a word in REFERENCE_WORDS
    # (the embedded model served so); none: float32 and bfloat16 where the tokenizer is SmolLM2's
    references: tuple[str, ...] = ()
    precision: bool = True  # claim 2 measured (--no-precision: not, for speed-only runs)
    measure_context: bool = False  # the longest prompt answered, searched for (long prompts: full prefills)

    def __post_init__(self) -> None:
        for ref in self.references:
            name, target = reference_parts(ref)
            if target not in REFERENCE_WORDS and not target.startswith(("http://", "https://")):
                words = ", ".join(REFERENCE_WORDS)
                raise UsageError(f"--reference {ref!r}: expected [NAME=]URL or one of {words}")
            if name == "" and ref != target:
                raise UsageError(f"--reference {ref!r}: an empty name before '='")
        if not 4 <= self.min_rounds <= self.max_rounds <= 100:
            raise UsageError(
                f"--min-rounds and --max-rounds want 4 <= min <= max <= 100, got {self.min_rounds} and "
                f"{self.max_rounds}"
            )
        if not 8 <= self.max_tokens <= 4096:
            raise UsageError(f"--max-tokens wants 8 to 4,096, got {self.max_tokens}")

    @property
    def embedded(self) -> Embedded:
        return Embedded(model=self.model)
