"""Request JSON parsed by RapidJSON, the parser TF Serving uses, with TF Serving's flags
(util/json_tensor.cc, ParseJson: kParseIterativeFlag, kParseNanAndInfFlag,
kParseStopWhenDoneFlag).

python-rapidjson wraps RapidJSON's C++ parser: it builds the document without a Python
tokenizer and refuses malformed input with RapidJSON's own messages. Where its defaults
differ from TF Serving's flags, this module gives TF Serving's answer:

- NaN, Infinity and -Infinity are numbers (`number_mode=NM_NAN`);
- anything after the first complete document is ignored (kParseStopWhenDoneFlag): the
  document is parsed again up to the offset RapidJSON names;
- any depth is valid (kParseIterativeFlag; json_tensor_test.cc: DeeplyNestedWellFormed),
  where python-rapidjson stops at Python's recursion limit: such a document is checked by
  a loop with an explicit stack that builds no container deeper than any tensor can be
  (TOO_DEEP stands for it), so its memory stays bounded;
- bytes that are not UTF-8 stay as they are inside strings (TF Serving does not validate
  encodings): such a body is parsed by Python's own C scanner with surrogate escapes.

Every failure is a ParseError, worded as RapidJSON's GetParseError_En, with the offset.

Example:
    >>> parse(b'{"instances": [1.0, NaN]} trailing')
    {'instances': [1.0, nan]}
"""

from __future__ import annotations

import contextlib
import gc
import json
import json.decoder
import re
import time
from typing import NamedTuple

import numpy as np
import rapidjson

# Deeper than this, a value cannot become a tensor (TensorShape::kMaxDims is 254, plus the
# document, 'instances' and row-object levels), so the deep-document loop does not build it.
MAX_BUILT_DEPTH = 260

_ERROR = re.compile(r"Parse error at offset (\d+): (.*)", re.DOTALL)
_TRAILING = "The document root must not be followed by other values."
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][-+]?\d+)?|NaN|-?Infinity")
_WHITESPACE = re.compile(r"[ \t\n\r]*")
_LITERALS = {"true": True, "false": False, "null": None}


class _TooDeep:
    """A container nested deeper than MAX_BUILT_DEPTH, checked but not built."""

    def __repr__(self):
        return "[...]"


TOO_DEEP = _TooDeep()


class ParseError(ValueError):
    """RapidJSON's message and offset; str() is TF Serving's "JSON Parse error: ..." text."""

    def __init__(self, message: str, offset: int | None):
        super().__init__(f"JSON Parse error: {message}" + (f" at offset: {offset}" if offset is not None else ""))


def parse(body: bytes, deadline: float | None = None, deep: bool = False):
    """The first JSON document in `body`. Raises ParseError.

    `deadline` (time.monotonic()) bounds the slow path for documents deeper than Python's
    recursion limit: past it, TimeoutError. `deep`: the body is known to nest deeper than
    MAX_BUILT_DEPTH (`nesting`), so it goes to that path at once.
    """
    if not body:  # json_tensor.cc says this one itself, without RapidJSON's offset
        raise ParseError("The document is empty", None)
    if deep:  # RapidJSON would build what the loop does not
        return _parse_deep(body.decode("utf-8", "surrogateescape"), deadline)
    try:
        with _no_cycle_collection():
            return rapidjson.loads(body, number_mode=rapidjson.NM_NAN)
    except rapidjson.JSONDecodeError as error:
        offset, message = _offset_and_message(error)
        if message == _TRAILING:
            return parse(body[:offset], deadline)
        raise ParseError(message, offset) from None
    except RecursionError:
        return _parse_deep(body.decode("utf-8", "surrogateescape"), deadline)
    except UnicodeDecodeError:
        return _parse_unvalidated(body, deadline)
    except ValueError as error:  # an integer of more digits than Python converts
        offset, _ = _offset_and_message(error)
        raise ParseError("Number too big to be stored in double.", offset) from None


class Nesting(NamedTuple):
    """How a body's arrays and objects nest: the deepest level, and the arrays and objects at
    levels a document is built to (MAX_BUILT_DEPTH at most)."""
    depth: int
    built_arrays: int
    built_objects: int


_CHUNK = 1 << 18  # bytes of a body scanned at a time by `nesting` (its temporaries: ~8 bytes a byte)
_LEVEL_STEP = np.zeros(256, np.int8)  # what each byte does to the nesting level
_LEVEL_STEP[[ord("["), ord("{")]], _LEVEL_STEP[[ord("]"), ord("}")]] = 1, -1


def nesting(body: bytes) -> Nesting | None:
    """The body's Nesting, counted by numpy 256 KiB at a time (brackets inside strings
    are not containers); None when it cannot be deeper than MAX_BUILT_DEPTH (so few
    brackets) or has a backslash (an escaped quote would need a parser to tell). Where the
    counts are wrong (a stray quote), the document is malformed, and up to the error that
    `_parse_deep` stops at they are exact.

    >>> nesting(b'{"a": "[[[", "b": [' + b"[" * 300 + b"]" * 301 + b"}")
    Nesting(depth=302, built_arrays=259, built_objects=1)
    """
    if body.count(b"[") + body.count(b"{") <= MAX_BUILT_DEPTH or b"\\" in body:
        return None
    has_strings, has_objects = b'"' in body, b"{" in body
    data = np.frombuffer(body, np.uint8)
    depth = deepest = arrays = objects = quotes = 0
    for start in range(0, len(data), _CHUNK):
        chunk = data[start:start + _CHUNK]
        step = _LEVEL_STEP[chunk]
        if has_strings:
            quote = chunk == ord('"')
            step[(quotes + np.cumsum(quote, dtype=np.int32)) % 2 == 1] = 0  # inside a string (or its opening quote)
            quotes += int(np.count_nonzero(quote))
        levels = np.cumsum(step, dtype=np.int32)
        levels += depth
        built = (step == 1) & (levels <= MAX_BUILT_DEPTH)  # an opener's level: the depth after it
        built_objects = int(np.count_nonzero(built & (chunk == ord("{")))) if has_objects else 0
        arrays, objects = arrays + int(np.count_nonzero(built)) - built_objects, objects + built_objects
        deepest, depth = max(deepest, int(levels.max())), int(levels[-1])
    return Nesting(deepest, arrays, objects)


@contextlib.contextmanager
def _no_cycle_collection():
    """Python's cycle collector paused while one C call builds a document: the call holds the
    GIL throughout, and a document of a million small arrays parsed 8 times slower with the
    collector scanning it as it grew (its containers hold no cycles; refcounts free them)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _offset_and_message(error: Exception) -> tuple[int | None, str]:
    match = _ERROR.match(str(error))
    return (int(match[1]), match[2]) if match else (None, str(error))


def _parse_unvalidated(body: bytes, deadline: float | None):
    """A body with bytes that are not UTF-8: Python's C scanner, bytes kept as surrogate escapes."""
    text = body.decode("utf-8", "surrogateescape")
    start = _WHITESPACE.match(text).end()
    try:
        return json.JSONDecoder().raw_decode(text, start)[0]
    except json.JSONDecodeError as error:
        raise ParseError("Invalid value." if error.msg == "Expecting value" else error.msg, error.pos) from None
    except RecursionError:
        return _parse_deep(text, deadline)


class _Frame:
    __slots__ = ("closer", "container", "key", "count")

    def __init__(self, opener: str, built: bool):
        self.closer = "]" if opener == "[" else "}"
        self.container = ([] if opener == "[" else {}) if built else None
        self.key, self.count = None, 0


class _Stack:
    """The open arrays and objects of `_parse_deep`: a frame each up to MAX_BUILT_DEPTH, then one
    byte each (its closer), a frame only for the innermost: a level below the innermost only
    needs its closer, as its count and key are reset when the value inside it ends."""

    def __init__(self):
        self.frames: list[_Frame] = []
        self.deep = bytearray()  # closers of the levels past MAX_BUILT_DEPTH
        self.deep_top: _Frame | None = None

    def __len__(self) -> int:
        return len(self.frames) + len(self.deep)

    def top(self) -> _Frame | None:
        return self.deep_top if self.deep else (self.frames[-1] if self.frames else None)

    def push(self, opener: str, count: int = 1) -> None:
        """`count` levels opened by `opener` in a row."""
        while count and len(self.frames) < MAX_BUILT_DEPTH:
            self.frames.append(_Frame(opener, built=True))
            count -= 1
        if count:
            self.deep += (b"]" if opener == "[" else b"}") * count
            self.deep_top = _Frame(opener, built=False)

    def pop(self) -> _Frame:
        if not self.deep:
            return self.frames.pop()
        frame = self.deep_top
        self.deep.pop()
        self.deep_top = _Frame("[" if self.deep[-1:] == b"]" else "{", built=False) if self.deep else None
        return frame


_OPEN_ARRAYS = re.compile(r"[\[ \t\n\r]*")  # a run of opening brackets and whitespace


def _parse_deep(text: str, deadline: float | None):
    """The document, checked in a loop: each open array or object is a level of a _Stack.
    Containers deeper than MAX_BUILT_DEPTH are checked, not built (TOO_DEEP); a run of
    opening brackets is taken at once. Memory: what is built, and a byte per deeper level."""
    stack = _Stack()
    i, steps = _WHITESPACE.match(text).end(), 0
    while True:
        steps += 1
        if deadline is not None and steps % 65536 == 0 and time.monotonic() > deadline:
            raise TimeoutError("no answer within the request's deadline while parsing its JSON")
        i = _WHITESPACE.match(text, i).end()
        top = stack.top()
        c = text[i:i + 1]
        if top is not None and top.count == 0 and c == top.closer:  # an empty container ends
            value, i = stack.pop(), i + 1
        elif top is not None and top.closer == "}" and top.key is None:  # a member's name
            if c != '"':
                raise ParseError("Missing a name for object member.", i)
            top.key, i = _string(text, i)
            i = _WHITESPACE.match(text, i).end()
            if text[i:i + 1] != ":":
                raise ParseError("Missing a colon after a name of object member.", i)
            i += 1
            continue
        elif c == "[":
            run = _OPEN_ARRAYS.match(text, i)
            stack.push("[", run.group().count("["))
            i = run.end()
            continue
        elif c == "{":
            stack.push("{")
            i += 1
            continue
        else:
            value, i = _scalar(text, i)
        # `value` is complete: put it in its parent, then close every parent it completes.
        while True:
            if isinstance(value, _Frame):
                value = TOO_DEEP if value.container is None else value.container
            top = stack.top()
            if top is None:
                return value
            if isinstance(top.container, list):
                top.container.append(value)
            elif isinstance(top.container, dict):
                top.container[top.key] = value
            top.key, top.count = None, top.count + 1
            i = _WHITESPACE.match(text, i).end()
            if text[i:i + 1] == ",":
                i += 1
                break
            if text[i:i + 1] != top.closer:
                raise ParseError(("Missing a comma or '}' after an object member." if top.closer == "}"
                                  else "Missing a comma or ']' after an array element."), i)
            value, i = stack.pop(), i + 1


def _string(text: str, i: int) -> tuple[str, int]:
    """The string whose opening quote is at `i`, and the index after its closing quote."""
    try:
        return json.decoder.scanstring(text, i + 1)
    except json.JSONDecodeError as error:
        raise ParseError("Missing a closing quotation mark in string.", error.pos) from None


def _scalar(text: str, i: int):
    """The string, literal or number at `i`, and the index after it."""
    if text[i:i + 1] == '"':
        return _string(text, i)
    for word, literal in _LITERALS.items():
        if text.startswith(word, i):
            return literal, i + len(word)
    match = _NUMBER.match(text, i)
    if not match:
        raise ParseError("Invalid value.", i)
    return json.loads(match.group()), match.end()
