"""What ``lossless probe`` was asked to do: frozen options, every default defined here once."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lossless.provision.embedded import Embedded


@dataclass(frozen=True)
class ProbeOptions:
    url: str | None = None  # none: the embedded server
    model: str | None = None  # "model" sent to url; the embedded model's name or path without one
    endpoints_file: Path | None = None  # TOML of one [[endpoint]] table, instead of url
    api_key_env: str | None = None
    api: str = "chat"  # chat, responses or messages: the checks' chat bodies go in that API's own words
    repeats: int = 4  # requests per arm where a comparison needs several
    max_tokens: int = 64  # for answers that must be long enough to show a difference
    as_json: bool = False
    out_dir: Path | None = None  # probe.json

    @property
    def embedded(self) -> Embedded:
        return Embedded(model=self.model)
