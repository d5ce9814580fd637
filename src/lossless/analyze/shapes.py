"""Reading summary.json back field by field: each helper checks one value's shape and names the field
when it is wrong (``Summary.from_dict`` turns that into one line naming the file)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import fields
from typing import Any


def plain_(obj: Any) -> dict[str, Any]:
    """A dataclass of plain values as a dict of JSON values (tuples as lists, mappings as dicts)."""
    return {f.name: json_(getattr(obj, f.name)) for f in fields(obj)}


def json_(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [json_(v) for v in value]
    if isinstance(value, Mapping):
        return {k: json_(v) for k, v in value.items()}
    return value


def obj_(x: object) -> Mapping[str, Any]:
    if not isinstance(x, dict):
        raise TypeError(f"expected an object, got {type(x).__name__}")
    return x


def list_(x: object, what: str) -> list[Any]:
    if not isinstance(x, list):
        raise TypeError(f"{what} is {type(x).__name__}, not a list")
    return x


def num_(x: object, what: str) -> float:
    if x is None:
        return math.nan  # written for a non-finite number
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise TypeError(f"{what} is {type(x).__name__}, not a number")
    return float(x)


def opt_(x: object, what: str) -> float | None:
    return None if x is None else num_(x, what)


def int_(x: object, what: str) -> int:
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"{what} is {type(x).__name__}, not an integer")
    return x


def str_(x: object, what: str) -> str:
    if not isinstance(x, str):
        raise TypeError(f"{what} is {type(x).__name__}, not a string")
    return x


def pair_(x: object, what: str) -> tuple[float, float]:
    lo, hi = list_(x, what)
    return num_(lo, what), num_(hi, what)


def counts_(x: object, what: str) -> dict[str, int]:
    return {k: int_(v, f"{what}.{k}") for k, v in obj_(x).items()}


def opts_(d: object, names: tuple[Any, ...]) -> dict[str, float | None]:
    found = obj_(d)
    return {f.name: opt_(found[f.name], f.name) for f in names}
