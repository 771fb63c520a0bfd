"""What a REST request's JSON costs in memory, counted before the work that takes it, so the
server reserves it from its decoding budget (memory_budget.py) first: `decode_cost` before
a body is parsed and converted to arrays (json_request.py), `response_cost` before the
outputs are written as JSON (json_response.py).

Example:
    >>> decode_cost(b'{"instances": [1, 2]}')
    700
    >>> response_cost({"y": np.zeros((2, 3), np.float32)}, row_format=True)
    648
"""

from __future__ import annotations

import numpy as np

from serving.json_response import CHUNK_ELEMENTS


def decode_cost(body: bytes) -> int:
    """An upper bound, in bytes, of the memory that parsing `body` and converting it to
    arrays takes beyond the body itself: 12 bytes per byte covers numbers (a Python object
    and its slot in a list, then the array), and each array, object or string adds the size
    of the Python object made for it. Counted in C (bytes.count), before parsing. A body of
    dense numbers needs at most 12 times its size, so the server's decoding budget of
    12 x --max_body_bytes always admits one of the largest."""
    return (12 * len(body) + 112 * body.count(b"[") + 256 * body.count(b"{")
            + 40 * body.count(b'"'))


def response_cost(outputs: dict[str, np.ndarray], row_format: bool) -> int:
    """An upper bound, in bytes, of the memory the outputs and their JSON take while the
    response is written: the arrays, then the text twice (its parts, then the joined body)."""
    text = 0
    for name, array in outputs.items():
        if array.dtype == object:
            text += sum(6 * len(value) + 12 for value in array.reshape(-1).tolist())
        else:
            text += array.size * (26 if array.dtype.itemsize >= 8 else 17)
        if row_format and array.ndim:
            text += array.shape[0] * (len(name) + 8)
    arrays = sum(array.nbytes + (48 * array.size if array.dtype == object else 0) for array in outputs.values())
    elements = sum(array.size for array in outputs.values())
    return arrays + 2 * text + 64 * min(elements, CHUNK_ELEMENTS)  # the slice of element texts being joined
