"""Tool calls and structured output: ``tools``, ``tool_choice`` and ``response_format`` in, the prompt
the model reads, the grammar that constrains it, and ``tool_calls`` out.

The format is the generic Hermes / Qwen2.5 one, because SmolLM2's chat template has no tool syntax at
all (it writes ``<|im_start|>{role}\\n{content}<|im_end|>`` and nothing else): the tools' signatures go
into the system prompt inside ``<tools></tools>``, the model answers a call as

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

and tool results go back as ``tool`` turns wrapped in ``<tool_response></tool_response>``. It is the
format most open models with tool support were trained on (Qwen2.5, Hermes 2/3, SmolLM3), so a
checkpoint that knows one format most likely knows this one, and its tags are plain text in any
vocabulary. Policy:

- ``tool_choice`` "auto" (the default with tools): the model decides, unconstrained; text between
  the tags that parses as a call becomes a ``tool_calls`` entry, anything else stays content.
- "required" or a named function: constrained decoding (`engine.model.constrain`) forces exactly one call
  to one of the tools (or the named one) whose arguments match that function's JSON schema.
- "none": the tools are not shown to the model and nothing is parsed as a call.
- ``response_format`` ``json_object`` / ``json_schema`` constrain the whole answer to JSON (against the
  schema); a forced tool call takes precedence, since its output is the call. ``strict`` is accepted
  and changes nothing: the schema is always enforced.
- ``parallel_tool_calls: false`` keeps the first call of an answer that holds several.
- A call's arguments come back as a JSON string written by ``json.dumps``; its id is ``call_`` and
  24 hex digits. A stream sends a call as it is generated (`tool_stream`): a delta with its id and
  name once ``{"name": "...",`` is written, then its arguments' JSON text as it comes; that text may
  differ from ``json.dumps`` in spacing or escapes, never in the value it parses to.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from lossless.server.openai.protocol import ApiRequest, InvalidRequest

OPEN, CLOSE = "<tool_call>", "</tool_call>"
_NAME = re.compile(r"[A-Za-z0-9_\-.]{1,64}")
_CALL = re.compile(re.escape(OPEN) + r"(.*?)" + re.escape(CLOSE), re.DOTALL)
FIELDS = frozenset({"tools", "tool_choice", "response_format", "parallel_tool_calls"})


@dataclass(frozen=True)
class Structured:
    """What a chat request asked for beyond text."""

    tools: tuple[dict[str, Any], ...] = ()  # the functions: {"name", "description"?, "parameters"?}
    choice: str = "auto"  # auto | none | required | function
    function: str | None = None  # the function tool_choice names
    response_format: str = "text"  # text | json_object | json_schema
    grammar: str | None = None  # the llguidance grammar the output must match; None: free text
    parallel: bool = True  # parallel_tool_calls: false keeps the first call only

    @property
    def calls(self) -> bool:
        """Whether the output is read for tool calls."""
        return bool(self.tools) and self.choice != "none"


@dataclass(frozen=True)
class GeneratedCall:
    name: str
    arguments: str  # JSON text
    id: str

    def body(self, index: int | None = None) -> dict[str, Any]:
        out: dict[str, Any] = {} if index is None else {"index": index}
        function = {"name": self.name, "arguments": self.arguments}
        return {**out, "id": self.id, "type": "function", "function": function}


def apply(req: ApiRequest, body: dict[str, Any]) -> ApiRequest:
    """The chat request with its tools shown to the model and its grammar set; unchanged without any."""
    if req.api != "chat" or not FIELDS & body.keys():
        return req
    structured = parse_structured(body)
    messages = render_messages(req.messages, body.get("messages") or [], structured)
    params = replace(req.params, grammar=structured.grammar)
    return replace(req, messages=messages, params=params, structured=structured)


def parse_structured(body: dict[str, Any]) -> Structured:
    tools = _tools(body.get("tools"))
    choice, function = _choice(body.get("tool_choice"), tools)
    kind, schema = _response_format(body.get("response_format"))
    grammar = None
    if choice in ("required", "function") and tools:
        chosen = [t for t in tools if function is None or t["name"] == function]
        grammar = _compile(call_grammar(chosen), "tools")
    elif kind != "text":
        from lossless.engine.model.constrain import json_schema_grammar

        grammar = _compile(lambda: json_schema_grammar(schema), "response_format")
    parallel = body.get("parallel_tool_calls", True)
    if not isinstance(parallel, bool):
        raise InvalidRequest("parallel_tool_calls must be a boolean", param="parallel_tool_calls")
    return Structured(tools, choice, function, kind, grammar, parallel)


def call_grammar(tools: Sequence[dict[str, Any]]) -> Any:
    """A deferred grammar: one call, tags and all, to one of ``tools`` with valid arguments."""
    from lossless.engine.model.constrain import tagged_json_grammar

    calls = [
        {
            "type": "object",
            "properties": {
                "name": {"const": t["name"]},
                "arguments": t.get("parameters") or {"type": "object"},
            },
            "required": ["name", "arguments"],
            "additionalProperties": False,
        }
        for t in tools
    ]
    schema = calls[0] if len(calls) == 1 else {"anyOf": calls}
    return lambda: tagged_json_grammar(OPEN + "\n", schema, "\n" + CLOSE)


def _compile(make: Any, param: str) -> str:
    from lossless.engine.model.constrain import grammar_error

    try:
        grammar: str = make()
    except ImportError as exc:  # the server extra brings llguidance
        raise InvalidRequest(
            f"{param}: constrained decoding needs llguidance (pip install 'lossless[server]')", param=param
        ) from exc
    except ValueError as exc:
        raise InvalidRequest(
            f"{param}: the schema cannot be compiled: {_cut(str(exc))}", param=param
        ) from exc
    error = grammar_error(grammar)
    if error is not None:
        raise InvalidRequest(f"{param}: the schema cannot be enforced: {_cut(error)}", param=param)
    return grammar


def _cut(text: str) -> str:
    return text if len(text) <= 300 else text[:297] + "..."


def _tools(value: Any) -> tuple[dict[str, Any], ...]:
    if value is None:
        return ()
    if not isinstance(value, list):
        raise InvalidRequest("tools must be a list", param="tools")
    out: list[dict[str, Any]] = []
    for i, tool in enumerate(value):
        function = tool.get("function") if isinstance(tool, dict) else None
        if not isinstance(tool, dict) or tool.get("type") != "function" or not isinstance(function, dict):
            raise InvalidRequest(
                f'tools[{i}] must be {{"type": "function", "function": {{...}}}}', param="tools"
            )
        name = function.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise InvalidRequest(f"tools[{i}].function.name must be 1-64 of a-z A-Z 0-9 _ - .", param="tools")
        parameters = function.get("parameters")
        if parameters is not None and not isinstance(parameters, dict):
            raise InvalidRequest(
                f"tools[{i}].function.parameters must be a JSON schema object", param="tools"
            )
        description = function.get("description")
        out.append({"name": name, **({"description": description} if isinstance(description, str) else {})})
        if parameters is not None:
            out[-1]["parameters"] = parameters
    if len({t["name"] for t in out}) < len(out):
        raise InvalidRequest("tools: two functions have the same name", param="tools")
    return tuple(out)


def _choice(value: Any, tools: tuple[dict[str, Any], ...]) -> tuple[str, str | None]:
    if value is None:
        return ("auto" if tools else "none"), None
    if value in ("auto", "none", "required"):
        if value == "required" and not tools:
            raise InvalidRequest('tool_choice "required" needs tools', param="tool_choice")
        return value, None
    function = value.get("function") if isinstance(value, dict) else None
    name = function.get("name") if isinstance(function, dict) else None
    if not isinstance(value, dict) or value.get("type") != "function" or not isinstance(name, str):
        raise InvalidRequest(
            'tool_choice must be "auto", "none", "required" or {"type": "function", "function": {...}}',
            param="tool_choice",
        )
    if name not in {t["name"] for t in tools}:
        raise InvalidRequest(f"tool_choice names {name[:64]!r}, which is not in tools", param="tool_choice")
    return "function", name


def _response_format(value: Any) -> tuple[str, dict[str, Any]]:
    if value is None:
        return "text", {}
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "text":
        return "text", {}
    if kind == "json_object":
        return "json_object", {"type": "object"}
    if kind == "json_schema":
        spec = value.get("json_schema")
        schema = spec.get("schema", {}) if isinstance(spec, dict) else None
        if not isinstance(schema, dict):
            raise InvalidRequest(
                "response_format.json_schema.schema must be an object", param="response_format"
            )
        return "json_schema", schema
    raise InvalidRequest(
        'response_format.type must be "text", "json_object" or "json_schema"', param="response_format"
    )


# --- the prompt -------------------------------------------------------------------------------------


def system_block(tools: Sequence[dict[str, Any]]) -> str:
    signatures = "\n".join(json.dumps({"type": "function", "function": t}, ensure_ascii=False) for t in tools)
    return (
        "# Tools\n\nYou may call functions to help with the user's request. Their signatures are "
        f"inside <tools></tools>:\n<tools>\n{signatures}\n</tools>\n\n"
        "To call a function, answer with a JSON object holding its name and arguments inside "
        f'{OPEN}{CLOSE} tags:\n{OPEN}\n{{"name": <function name>, "arguments": <arguments object>}}\n{CLOSE}'
    )


def render_messages(
    flat: Sequence[dict[str, str]], raw: Sequence[Any], structured: Structured
) -> tuple[dict[str, str], ...]:
    """Flattened messages (protocol.py's) -> the same with the tools in the system prompt, assistant
    calls written back as tagged calls and tool results wrapped in <tool_response> tags."""
    out = []
    for message, original in zip(flat, raw, strict=True):
        content = message["content"]
        if message["role"] == "assistant" and isinstance(original.get("tool_calls"), list):
            calls = [_written_call(c) for c in original["tool_calls"]]
            content = "\n".join([content, *calls] if content else calls)
        elif message["role"] == "tool":
            content = f"<tool_response>\n{content}\n</tool_response>"
        out.append({"role": message["role"], "content": content})
    if structured.choice != "none" and structured.tools:
        block = system_block(structured.tools)
        if out and out[0]["role"] == "system":
            out[0] = {"role": "system", "content": out[0]["content"] + "\n\n" + block}
        else:
            out.insert(0, {"role": "system", "content": block})
    return tuple(out)


def _written_call(call: Any) -> str:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        raise InvalidRequest("an assistant message's tool_calls must be function calls", param="messages")
    arguments = function.get("arguments", "{}")
    try:
        parsed = json.loads(arguments) if isinstance(arguments, str) else arguments
    except json.JSONDecodeError:
        parsed = arguments  # shown to the model as the string it was
    call_json = json.dumps({"name": function.get("name"), "arguments": parsed}, ensure_ascii=False)
    return f"{OPEN}\n{call_json}\n{CLOSE}"


# --- the output -------------------------------------------------------------------------------------


def read_call(inner: str) -> GeneratedCall | None:
    """The text between the tags -> a call, or None when it is not {"name": str, "arguments": {...}}."""
    try:
        value = json.loads(inner)
    except json.JSONDecodeError:
        return None
    if not isinstance(value, dict) or not isinstance(value.get("name"), str):
        return None
    arguments = value.get("arguments", {})
    if isinstance(arguments, str):  # some models write the arguments as a JSON string already
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            return None
    if not isinstance(arguments, dict):
        return None
    return GeneratedCall(value["name"], json.dumps(arguments, ensure_ascii=False), new_call_id())


def new_call_id() -> str:
    return "call_" + uuid.uuid4().hex[:24]


def split_calls(text: str) -> tuple[str, list[GeneratedCall]]:
    """A whole answer -> (content outside the calls, the calls); a tag pair that holds no call stays text."""
    calls: list[GeneratedCall] = []
    content: list[str] = []
    at = 0
    for match in _CALL.finditer(text):
        call = read_call(match.group(1))
        if call is None:
            continue
        content.append(text[at : match.start()])
        calls.append(call)
        at = match.end()
    content.append(text[at:])
    return "".join(content).strip() if calls else text, calls


def read_answer(text: str, structured: Structured) -> tuple[str, list[GeneratedCall]]:
    """A whole answer -> (its content, the calls it makes), as a request's tools and tool_choice read it."""
    if not structured.calls:
        return text, []
    content, calls = split_calls(text)
    return content, calls if structured.parallel else calls[:1]


def with_calls(body: dict[str, Any], structured: Structured) -> dict[str, Any]:
    """A chat.completion body whose text holds tagged calls -> the same with ``tool_calls`` and
    finish_reason "tool_calls" (the content left outside the calls, or null)."""
    choice = body["choices"][0]
    content, calls = read_answer(choice["message"]["content"], structured)
    if not calls:
        return body
    message = {"role": "assistant", "content": content or None, "tool_calls": [c.body() for c in calls]}
    return {**body, "choices": [{**choice, "message": message, "finish_reason": "tool_calls"}]}
