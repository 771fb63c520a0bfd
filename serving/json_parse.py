"""Request JSON parsed as TF Serving parses it (rapidjson with kParseIterativeFlag,
kParseNanAndInfFlag and kParseStopWhenDoneFlag; util/json_tensor.cc, ParseJson).

- any depth: rapidjson parses iteratively, so `{"instances": [1], "nested": [[[...]]]}`
  500,000 levels deep is a valid request (json_tensor_test.cc: DeeplyNestedWellFormed);
  Python's parser recurses, so such documents go to a loop with an explicit stack;
- NaN, Infinity and -Infinity are numbers;
- anything after the first complete document is ignored;
- bytes that are not UTF-8 stay as they are (surrogate escapes; they reach string tensors
  unchanged, as rapidjson leaves them unvalidated);
- errors are worded as rapidjson's GetParseError_En words them, with the offset.

Example:
    >>> parse(b'{"instances": [1.0, NaN]} trailing')
    {'instances': [1.0, nan]}
"""

from __future__ import annotations

import json
import json.decoder
import re

_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|NaN|-?Infinity")
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_LITERALS = {"true": True, "false": False, "null": None}

# Python's messages -> rapidjson's.
_MESSAGES = [("Expecting value", "Invalid value."),
             ("Expecting property name", "Missing a name for object member."),
             ("Expecting ':' delimiter", "Missing a colon after a name of object member."),
             ("Unterminated string", "Missing a closing quotation mark in string."),
             ("Invalid \\uXXXX escape", "Incorrect hex digit after \\u escape in string."),
             ("Invalid \\escape", "Invalid escape character in string."),
             ("Invalid control character", "Invalid encoding in string.")]


class ParseError(ValueError):
    """rapidjson's message and offset; str() is TF Serving's "JSON Parse error: ..." text."""

    def __init__(self, message: str, offset: int | None):
        super().__init__(f"JSON Parse error: {message}" + (f" at offset: {offset}" if offset is not None else ""))


def _comma_message(text: str, position: int) -> str:
    opened = [c for c in text[:position] if c in "[{"]
    return ("Missing a comma or '}' after an object member." if opened and opened[-1] == "{"
            else "Missing a comma or ']' after an array element.")


def parse(body: bytes):
    """The first JSON document in `body`. Raises ParseError."""
    if not body:  # json_tensor.cc says this one itself, without rapidjson's offset
        raise ParseError("The document is empty", None)
    text = body.decode("utf-8", "surrogateescape")
    start = _WHITESPACE.match(text).end()
    if start == len(text):
        raise ParseError("The document is empty.", start)
    try:
        return json.JSONDecoder().raw_decode(text, start)[0]
    except json.JSONDecodeError as error:
        message = (_comma_message(text, error.pos) if error.msg == "Expecting ',' delimiter"
                   else next((ours for theirs, ours in _MESSAGES if error.msg.startswith(theirs)), error.msg))
        raise ParseError(message, error.pos) from None
    except RecursionError:
        return _parse_deep(text, start)


def _parse_deep(text: str, position: int):
    """The same document, parsed in a loop: each open array or object is a frame on a stack."""
    stack: list[tuple[list | dict, str | None]] = []  # (container, pending object key)

    def value_at(i):
        """(scalar or new container, index after it, whether it is a container)."""
        c = text[i:i + 1]
        if c == "[":
            return [], i + 1, True
        if c == "{":
            return {}, i + 1, True
        if c == '"':
            try:
                return (*json.decoder.scanstring(text, i + 1), False)
            except json.JSONDecodeError as error:
                raise ParseError("Missing a closing quotation mark in string.", error.pos) from None
        for word, literal in _LITERALS.items():
            if text.startswith(word, i):
                return literal, i + len(word), False
        match = _NUMBER.match(text, i)
        if match:
            return json.loads(match.group()), match.end(), False
        raise ParseError("Invalid value.", i)

    i = position
    while True:
        i = _WHITESPACE.match(text, i).end()
        if stack and isinstance(stack[-1][0], dict) and stack[-1][1] is None:  # a key, or the end
            container = stack[-1][0]
            if text[i:i + 1] == "}" and not container:
                value, i, opened = stack.pop()[0], i + 1, False
            else:
                if text[i:i + 1] != '"':
                    raise ParseError("Missing a name for object member.", i)
                key, i = json.decoder.scanstring(text, i + 1)
                i = _WHITESPACE.match(text, i).end()
                if text[i:i + 1] != ":":
                    raise ParseError("Missing a colon after a name of object member.", i)
                stack[-1] = (container, key)
                i += 1
                continue
        elif stack and isinstance(stack[-1][0], list) and not stack[-1][0] and text[i:i + 1] == "]":
            value, i, opened = stack.pop()[0], i + 1, False
        else:
            value, i, opened = value_at(i)
            if opened:
                stack.append((value, None))
                continue
        # `value` is complete: put it in its parent, then close every parent it completes.
        while True:
            if not stack:
                return value
            container, key = stack[-1]
            if isinstance(container, list):
                container.append(value)
            else:
                container[key] = value
                stack[-1] = (container, None)
            i = _WHITESPACE.match(text, i).end()
            closer = "]" if isinstance(container, list) else "}"
            if text[i:i + 1] == ",":
                i += 1
                break
            if text[i:i + 1] != closer:
                raise ParseError(_comma_message(text, i), i)
            value, i = stack.pop()[0], i + 1
