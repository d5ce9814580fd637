"""Speculative decoding's acceptance figures per request, the same alone and in a batch."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class SpecStats:
    """Per-request acceptance figures; `as_dict` is what the server puts on /metrics."""

    k_max: int  # longest draft the decoder may ask for
    steps: int = 0  # target forwards after the prompt's (one per draft, empty drafts included)
    drafted: int = 0  # draft tokens verified (a tree counts its depth: the positions it drafted)
    accepted: int = 0  # draft tokens accepted
    emitted: int = 0  # tokens emitted by those steps: accepted + one correction or bonus each
    accept_counts: list[int] = field(default_factory=list)  # [k_max+1]: steps accepting exactly i
    drafted_at: list[int] = field(default_factory=list)  # [k_max]: drafts with a token at position i
    accepted_at: list[int] = field(default_factory=list)  # [k_max]: ... whose token i was accepted

    def __post_init__(self) -> None:
        self.accept_counts = self.accept_counts or [0] * (self.k_max + 1)
        self.drafted_at = self.drafted_at or [0] * self.k_max
        self.accepted_at = self.accepted_at or [0] * self.k_max

    def record(self, drafted: int, accepted: int) -> None:
        self.steps += 1
        self.drafted += drafted
        self.accepted += accepted
        self.emitted += accepted + 1
        self.accept_counts[accepted] += 1
        for i in range(drafted):
            self.drafted_at[i] += 1
            self.accepted_at[i] += i < accepted

    def as_dict(self) -> dict[str, Any]:
        return {
            "drafted": self.drafted,
            "accepted": self.accepted,
            "accept_counts": list(self.accept_counts),
            "steps": self.steps,
            "acceptance_rate": self.accepted / self.drafted if self.drafted else None,
            # tokens per target forward, bonus included: 1.0 means no speed-up at all
            "mean_accepted_length": self.emitted / self.steps if self.steps else None,
            "acceptance_by_position": [
                a / d if d else None for a, d in zip(self.accepted_at, self.drafted_at, strict=True)
            ],
        }
