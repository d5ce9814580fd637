"""Tool calling and structured output, checked by behaviour: does a forced call come back as
``tool_calls``, is the named function the one called, does ``response_format`` shape the answer.

- ``tool_choice=required``: honoured when a call to an offered tool comes back with arguments that are
  a JSON object; ignored when the answer is text (a server that honours it must call).
- ``tool_choice=function``: honoured when the call is to the named function, not the other one offered.
- ``tools`` (``auto``): honoured when a call comes back; a text answer is ``unsupported``, not
  ``ignored``, since under ``auto`` a model may answer in words (SmolLM2-135M always does).
- ``response_format=json_object`` / ``json_schema``: honoured when the answer parses as a JSON object
  (and, for the schema, has exactly its fields with their types); ignored otherwise.
An error answer is ``rejected``. The requests are greedy and non-streamed, so the whole body is read.
An answer cut at max_tokens shows nothing either way: it is asked again with ``ROOM`` times the room,
and one cut again is ``inconclusive``, never ``ignored``.
"""

from __future__ import annotations

import json
from typing import Any

from lossless.client.wire import Reply, Wire, chat, post_all
from lossless.probe.checks import Check, Settings, rejected

ASK = "What is the weather in Paris right now? Use a tool."
_CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TOOLS = [
    {
        "type": "function",
        "function": {"name": "get_weather", "description": "The weather in a city.", "parameters": _CITY},
    },
    {
        "type": "function",
        "function": {"name": "get_time", "description": "The local time in a city.", "parameters": _CITY},
    },
]
SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}, "temp_c": {"type": "number"}},
    "required": ["city", "temp_c"],
    "additionalProperties": False,
}
JSON_ASK = "Give the weather in Paris as JSON with the fields city and temp_c."
ROOM = 4  # a cut answer is asked again with this many times the tokens


def calls(reply: Reply) -> list[dict[str, Any]]:
    """The first choice's tool calls as ``{name, arguments}`` (arguments as sent), in whichever API."""
    return [{"name": c.name, "arguments": c.arguments} for c in reply.tool_calls]


def _object(text: Any) -> dict[str, Any] | None:
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def _fits_schema(value: dict[str, Any]) -> bool:
    """SCHEMA's rules, checked by hand (no validator needed for two fields)."""
    number = isinstance(value.get("temp_c"), int | float) and not isinstance(value.get("temp_c"), bool)
    return set(value) == {"city", "temp_c"} and isinstance(value.get("city"), str) and number


def _cut(reply: Reply) -> bool:
    return reply.ok and bool(reply.choices) and reply.choices[0].finish_reason == "length"


async def _with_room(w: Wire, bodies: list[dict[str, Any]], s: Settings) -> list[Reply]:
    """The replies to ``bodies``; one cut at max_tokens is asked again with ``ROOM`` times the tokens."""
    replies = await post_all(w, bodies, s.concurrency)
    again = [i for i, r in enumerate(replies) if _cut(r)]
    roomier = [{**bodies[i], "max_tokens": bodies[i]["max_tokens"] * ROOM} for i in again]
    for i, reply in zip(again, await post_all(w, roomier, s.concurrency), strict=True):
        replies[i] = reply
    return replies


def _inconclusive(name: str, reply: Reply, ev: dict[str, Any]) -> Check:
    tokens = reply.usage_int("completion_tokens")
    return Check(
        name,
        "inconclusive",
        ev,
        f"the answer was cut at max_tokens ({tokens} tokens), even with "
        f"{ROOM}x the room: no evidence either way (give --max-tokens more)",
    )


def _call_check(name: str, reply: Reply, want: str | None) -> Check:
    if not reply.ok:
        return rejected(name, reply)
    made = calls(reply)
    finish = reply.choices[0].finish_reason if reply.choices else None
    ev: dict[str, Any] = {"calls": made[:3], "finish_reason": finish}
    good = [
        c for c in made if c["name"] in {"get_weather", "get_time"} and _object(c["arguments"]) is not None
    ]
    if not good and _cut(reply) and name != "tools":  # under auto, text is the model's to choose
        return _inconclusive(name, reply, ev)
    if want is not None and good and all(c["name"] != want for c in good):
        return Check(name, "ignored", ev, f"called {good[0]['name']}, not the named {want}")
    if good:
        return Check(name, "honoured", ev)
    if made:
        return Check(name, "ignored", ev, "a call came back, but not to an offered tool with JSON arguments")
    if name == "tools":
        return Check(name, "unsupported", ev, "the model answered in text (tool_choice auto allows it)")
    return Check(name, "ignored", ev, "the answer is text, not the call asked for")


async def tool_calling(w: Wire, s: Settings) -> list[Check]:
    named = {"type": "function", "function": {"name": "get_time"}}
    bodies = [
        chat(ASK, tools=TOOLS, temperature=0, max_tokens=s.max_tokens),
        chat(ASK, tools=TOOLS, tool_choice="required", temperature=0, max_tokens=s.max_tokens),
        chat(ASK, tools=TOOLS, tool_choice=named, temperature=0, max_tokens=s.max_tokens),
    ]
    auto, required, function = await _with_room(w, bodies, s)
    return [
        _call_check("tools", auto, None),
        _call_check("tool_choice=required", required, None),
        _call_check("tool_choice=function", function, "get_time"),
    ]


async def response_format(w: Wire, s: Settings) -> list[Check]:
    schema_format = {
        "type": "json_schema",
        "json_schema": {"name": "weather", "schema": SCHEMA, "strict": True},
    }
    bodies = [
        chat(JSON_ASK, response_format={"type": "json_object"}, temperature=0, max_tokens=s.max_tokens),
        chat(JSON_ASK, response_format=schema_format, temperature=0, max_tokens=s.max_tokens),
    ]
    as_object, as_schema = await _with_room(w, bodies, s)
    out = []
    for name, reply, fits in (
        ("response_format=json_object", as_object, lambda v: True),
        ("response_format=json_schema", as_schema, _fits_schema),
    ):
        if not reply.ok:
            out.append(rejected(name, reply))
            continue
        value = _object(reply.text)
        ev = {"text": reply.text[:200], "json_object": value is not None}
        ok = value is not None and fits(value)
        if ok:
            out.append(Check(name, "honoured", ev))
        elif _cut(reply):
            out.append(_inconclusive(name, reply, ev))
        else:
            out.append(Check(name, "ignored", ev, "the answer does not fit"))
    return out
