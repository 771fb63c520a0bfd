"""What a REST request's JSON costs in memory, counted before the work that takes it, so the
server reserves it from its decoding budget (memory_budget.py) first: `decode_cost` before
a body is parsed and converted to arrays (json_request.py), `response_cost` before the
outputs are written as JSON (json_response.py).

Example:
    >>> decode_cost(b'{"instances": [1, 2]}')
    700
    >>> response_cost({"y": np.zeros((2, 3), np.float32)}, row_format=True)
    834
"""

from __future__ import annotations

import numpy as np

from serving import json_parse
from serving.json_response import CHUNK_ELEMENTS


def decode_cost(body: bytes, shape: json_parse.Nesting | None = None) -> int:
    """An upper bound, in bytes, of the memory that parsing `body` and converting it to
    arrays takes beyond the body itself: 12 bytes per byte covers numbers (a Python object
    and its slot in a list, then the array), and each array, object or string adds the size
    of the Python object made for it. Counted in C (bytes.count), before parsing. A body of
    dense numbers needs at most 12 times its size and a few containers, so the server's
    decoding budget of 12 x --max_body_bytes + 64 KiB always admits one of the largest. A
    document nested deeper than a tensor can be is parsed by json_parse's loop, which builds
    no container past MAX_BUILT_DEPTH: with `shape` (json_parse.nesting) deeper than that, only
    the containers built count, its text and a byte for each deeper level within the 12 bytes
    per byte."""
    arrays, objects = body.count(b"["), body.count(b"{")
    if shape is not None and shape.depth > json_parse.MAX_BUILT_DEPTH:  # parsed by the loop, deeper levels unbuilt
        arrays, objects = shape.built_arrays, shape.built_objects
    return 12 * len(body) + 112 * arrays + 256 * objects + 40 * body.count(b'"')


def response_cost(outputs: dict[str, np.ndarray], row_format: bool) -> int:
    """An upper bound, in bytes, of the memory the outputs and their JSON take while the
    response is written (json_response.dumps_response): `writing_cost`, and the text once in
    its buffer (an eighth more for the buffer's growth)."""
    text = 0
    for name, array in outputs.items():
        if array.dtype == object:
            text += sum(6 * len(value) + 12 for value in array.reshape(-1).tolist())
        else:
            text += array.size * (26 if array.dtype.itemsize >= 8 else 17)
        if row_format and array.ndim and len(outputs) > 1:  # each row an object: {"name": ..., ...}
            text += array.shape[0] * (len(name) + 8)
    return writing_cost(outputs) + buffer_cost(text)


def writing_cost(outputs: dict[str, np.ndarray]) -> int:
    """The memory of writing the outputs beside the text's buffer: the arrays, and one slice of
    rows being joined (its texts, then the joined piece)."""
    arrays = sum(array.nbytes + (48 * array.size if array.dtype == object else 0) for array in outputs.values())
    elements = sum(array.size for array in outputs.values())
    return arrays + (64 + 2 * 26) * min(elements, CHUNK_ELEMENTS)


def buffer_cost(size: int) -> int:
    """The memory of a buffer of `size` bytes that grew to it (an eighth more)."""
    return size + size // 8


def arrays_cost(arrays: dict[str, np.ndarray]) -> int:
    """The bytes decoded inputs hold: their buffers, and a Python bytes object per string.

    >>> arrays_cost({"x": np.zeros(4, np.float32), "s": np.array([b"ab", b"c"], object)})
    101
    """
    total = 0
    for array in arrays.values():
        total += array.nbytes
        if array.dtype == object:
            total += sum(33 + len(value) for value in array.reshape(-1).tolist())
    return total
