"""Tool calls read out of a stream as they are generated, as OpenAI's API and vLLM's Hermes parser send
them: a call's first delta goes out as soon as ``<tool_call>`` and ``{"name": "...",`` are written
(``index``, ``id``, ``type``, the name and empty arguments; a token that completes the name and starts
the arguments gives one delta holding both), then its arguments' JSON text follows as it comes, in
deltas holding only ``index`` and more ``function.arguments``, ending exactly at the ``}`` that closes
the arguments object: neither the call's own ``}`` nor its tag are arguments.

The argument deltas are the generated text itself, so for a well-formed call they concatenate to JSON
that parses to the same object as the whole answer's ``arguments`` (which is ``json.dumps`` of it: the
two strings may differ in spacing or escapes). A call whose name does not come first goes out whole at
its closing tag, as before; one whose arguments are not an object written out (a JSON string, say)
sends its name at once and its parsed arguments, as ``json.dumps`` writes them, at the closing tag.
The first ``</tool_call>`` ends a call, even inside a JSON string, as it does for a whole answer.

A call found malformed after its name was sent (possible in "auto" mode only: the grammar of "required"
and named calls admits well-formed calls only) stays a call, as in vLLM: the deltas already sent
stand, the rest of its text up to ``</tool_call>`` is dropped rather than turned into content, and
finish_reason is "tool_calls" (or "length" for a call cut by max_tokens), since a client may already
be acting on the call it saw start. Its arguments may then not parse, and the whole answer, which
sees the text at once, may have no such call (the text stays content there).
"""

from __future__ import annotations

import json
from typing import Any

from lossless.server.openai.tool_calls import CLOSE, OPEN, new_call_id, read_call

_MORE = True  # a scanner's answer: the text so far is too short to tell (False: it cannot match)


def _skip(text: str, at: int) -> int:
    """Past JSON whitespace."""
    while at < len(text) and text[at] in " \t\n\r":
        at += 1
    return at


def _expect(text: str, at: int, literal: str) -> int | bool:
    """Past optional whitespace and ``literal`` in ``text`` from ``at``: the index after it, _MORE when
    the text ends before it is known, False when something else is there."""
    at = _skip(text, at)
    got = text[at : at + len(literal)]
    if got == literal:
        return at + len(literal)
    return _MORE if literal.startswith(got) else False


def _string(text: str, at: int) -> tuple[str, int] | bool:
    """A JSON string after optional whitespace: (its value, the index after it), _MORE or False."""
    at = _skip(text, at)
    if at == len(text):
        return _MORE
    if text[at] != '"':
        return False
    end, escaped = at + 1, False
    while end < len(text) and (escaped or text[end] != '"'):
        escaped = not escaped and text[end] == "\\"
        end += 1
    if end == len(text):
        return _MORE
    try:
        return json.loads(text[at : end + 1]), end + 1
    except json.JSONDecodeError:
        return False


def read_head(text: str) -> tuple[str, int] | bool:
    """``{"name": "f",`` at the start of a call -> (the name, the index after the comma), _MORE, False."""
    at: int | bool = 0
    for literal in ("{", '"name"', ":"):
        at = _expect(text, at, literal)
        if isinstance(at, bool):
            return at
    name = _string(text, at)
    if isinstance(name, bool):
        return name
    after = _expect(text, name[1], ",")
    return after if isinstance(after, bool) else (name[0], after)


def read_arguments_key(text: str) -> int | bool:
    """``"arguments": {`` after the head -> the index of the ``{``, _MORE or False."""
    at: int | bool = 0
    for literal in ('"arguments"', ":", "{"):
        at = _expect(text, at, literal)
        if isinstance(at, bool):
            return at
    return at - 1


class JsonDepth:
    """Where a JSON object's text ends: tracks nesting, strings and escapes, one piece at a time."""

    def __init__(self) -> None:
        self.depth = 0
        self.in_string = False
        self.escaped = False

    def scan(self, text: str) -> int | None:
        """The index just past the character that closes the outermost value, or None if not in ``text``."""
        for i, char in enumerate(text):
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                elif char == "\\":
                    self.escaped = True
                elif char == '"':
                    self.in_string = False
            elif char == '"':
                self.in_string = True
            elif char in "{[":
                self.depth += 1
            elif char in "}]":
                self.depth -= 1
                if self.depth == 0:
                    return i + 1
        return None


def _partial(text: str, tag: str) -> int:
    """The length of the longest suffix of ``text`` that is a proper prefix of ``tag``."""
    for n in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-n:]):
            return n
    return 0


class _Call:
    """One call being read. ``stage``: head (its name not known yet), whole (to be released in one
    delta at the closing tag), key (name sent, ``"arguments": {`` next), arguments (streaming), tail
    (the arguments are sent, or cannot be streamed: what is left up to the closing tag)."""

    def __init__(self, index: int, send: bool) -> None:
        self.index = index  # its place in tool_calls, if it is sent
        self.send = send  # False: parallel_tool_calls false and a call already sent: read, not sent
        self.stage = "head" if send else "whole"
        self.inner = ""  # everything after <tool_call> so far
        self.at = 0  # how much of ``inner`` is dealt with, from "key" on
        self.depth = JsonDepth()  # over the arguments released so far
        self.streamed = False  # the arguments went out as text (else: at the close, if they parse)


class CallStream:
    """Streamed text -> (content to send now, tool_call deltas to send now). Text that may be the start
    of ``<tool_call>`` is held until it is known; see the module docstring for the calls."""

    def __init__(self, parallel: bool = True) -> None:
        self.pending = ""  # held: a possible opening tag
        self.call: _Call | None = None  # the call being read
        self.calls = 0  # calls found so far (sent, or dropped with parallel false)
        self.sent = 0  # calls sent so far: the next one's index
        self.parallel = parallel  # False: calls after the first are dropped
        self.blanks = ""  # whitespace after a call, held: dropped if nothing else comes

    def feed(self, text: str) -> tuple[str, list[dict[str, Any]]]:
        shown: list[str] = []
        deltas: list[dict[str, Any]] = []
        text, self.pending = self.pending + text, ""
        while text:
            if self.call is None:
                start = text.find(OPEN)
                if start < 0:
                    keep = _partial(text, OPEN)
                    shown.append(text[: len(text) - keep])
                    self.pending = text[len(text) - keep :]
                    break
                shown.append(text[:start])
                self.call = _Call(self.sent, self.parallel or self.sent == 0)
                text = text[start + len(OPEN) :]
            text = self._advance(self.call, text, shown, deltas)
        return self._shown("".join(shown)), _merged(deltas)

    def flush(self) -> str:
        """At the end: what is still held is content (a call cut by max_tokens before its name was
        known); a call whose name was sent keeps what it sent and drops the rest."""
        call, self.call = self.call, None
        if call is not None and call.stage in ("head", "whole"):
            self.pending += OPEN + call.inner
        rest, self.pending, self.blanks = self.blanks + self.pending, "", ""
        return rest if rest.strip() or not self.calls else ""

    def _shown(self, text: str) -> str:
        if not self.calls:
            return text
        # after a call, trailing blanks wait for more text: the end of an answer is no content
        body = text.rstrip()
        if not body:
            self.blanks += text
            return ""
        text, self.blanks = self.blanks + body, text[len(body) :]
        return text

    def _advance(self, call: _Call, text: str, shown: list[str], deltas: list[dict[str, Any]]) -> str:
        """Reads ``text`` into the open call; returns what follows its closing tag, if that came."""
        inner = call.inner + text
        end = inner.find(CLOSE, max(0, len(call.inner) - len(CLOSE) + 1))
        call.inner = inner if end < 0 else inner[:end]
        if call.stage == "head":
            self._head(call, deltas)
        if call.stage == "key":
            brace = read_arguments_key(call.inner[call.at :])
            if brace is False:  # e.g. arguments written as a JSON string: sent at the close
                call.stage = "tail"
            elif not isinstance(brace, bool):
                call.at, call.stage, call.streamed = call.at + brace, "arguments", True
        if call.stage == "arguments":
            self._arguments(call, deltas, closed=end >= 0)
        if end < 0:
            return ""
        self._close(call, shown, deltas)
        return inner[end + len(CLOSE) :]

    def _head(self, call: _Call, deltas: list[dict[str, Any]]) -> None:
        head = read_head(call.inner)
        if head is False:  # not {"name": "...", first: read whole at the close, as before
            call.stage = "whole"
        elif isinstance(head, tuple):
            call.at, call.stage = head[1], "key"
            self.calls, self.sent = self.calls + 1, self.sent + 1
            function = {"name": head[0], "arguments": ""}
            deltas.append(
                {"index": call.index, "id": new_call_id(), "type": "function", "function": function}
            )

    def _arguments(self, call: _Call, deltas: list[dict[str, Any]], closed: bool) -> None:
        unread = call.inner[call.at :]
        # hold what may be the start of the closing tag: it ends the call, even inside a string
        ready = unread if closed else unread[: len(unread) - _partial(unread, CLOSE)]
        end = call.depth.scan(ready)
        if end is not None:
            ready, call.stage = ready[:end], "tail"
        if ready:
            deltas.append({"index": call.index, "function": {"arguments": ready}})
        call.at += len(ready)

    def _close(self, call: _Call, shown: list[str], deltas: list[dict[str, Any]]) -> None:
        self.call = None
        if call.stage in ("head", "whole"):
            found = read_call(call.inner)
            if found is None:  # not a call after all: the tags are content
                shown.append(OPEN + call.inner + CLOSE)
                return
            self.calls += 1
            if call.send:
                deltas.append(found.body(call.index))
                self.sent += 1
        elif not call.streamed:  # "arguments" was not an object written out: the parsed value, if any
            found = read_call(call.inner)
            if found is not None:
                deltas.append({"index": call.index, "function": {"arguments": found.arguments}})


def _merged(deltas: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Deltas for the same call, one after another, as one (its arguments joined)."""
    out: list[dict[str, Any]] = []
    for delta in deltas:
        if out and out[-1]["index"] == delta["index"] and delta.keys() == {"index", "function"}:
            last = out[-1]["function"]
            out[-1] = {
                **out[-1],
                "function": {**last, "arguments": last["arguments"] + delta["function"]["arguments"]},
            }
        else:
            out.append(delta)
    return out
