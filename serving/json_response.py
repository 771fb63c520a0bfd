"""TF Serving's REST JSON answers: a predict's output arrays as JSON, after
`tensorflow_serving/util/json_tensor.cc` (MakeJsonFromTensors).

Row format: {"predictions": [...]}, one entry per row (an object of the outputs when there
are several); columnar: {"outputs": ...}. Outputs named `*_bytes` are base64 ({"b64": ...}),
other strings UTF-8. Floats are written as TF Serving writes them: 6 significant digits when
that reads back to the same value, else 9 (float32) or 17 (float64); whole numbers get ".0";
NaN and Infinity are bare tokens.

Example:
    >>> bytes(dumps_response({"y": np.array([0.2, 3.0], np.float32)}, row_format=True))
    b'{"predictions": [0.2, 3.0]}'
    >>> bytes(dumps_response({"y": np.array([0.1], np.float64), "label": np.array([b"pos"], object)}, False))
    b'{"outputs": {"label": ["pos"], "y": [0.1]}}'
"""

from __future__ import annotations

import base64
import json
from typing import Callable

import numpy as np
import tensorflow as tf

from serving.status import InvalidArgument

# Outputs are written a slice of rows at a time, so a large output never exists as one
# Python string per element (about 50 bytes each) all at once.
CHUNK_ELEMENTS = 1 << 15


def format_decimal(value: float, double: bool = False) -> str:
    """A float as TF Serving's WriteDecimal prints it."""
    return _float_texts(np.array([value], np.float64 if double else np.float32), double)[0]


def _float_texts(flat: np.ndarray, double: bool) -> list[str]:
    """TF Serving's WriteDecimal of each value: 6 significant digits when they read back to
    the same value, else 9 (float32) or 17 (float64); whole numbers get ".0"; NaN and
    Infinity as bare tokens."""
    kind = np.float64 if double else np.float32
    flat = flat.astype(kind, copy=False)
    if len(flat) > 4096 and len(np.unique(flat[:1024])) <= 64:  # few distinct values: each written once
        bits = flat.view(np.uint64 if double else np.uint32)  # bit patterns: -0.0 and 0.0 stay apart
        distinct, where = np.unique(bits, return_inverse=True)
        if len(distinct) <= len(flat) // 8:
            return np.array(_float_texts(distinct.view(kind), double), dtype=object)[where].tolist()
    with np.errstate(invalid="ignore"):  # whole numbers under 1e6 (not -0.0): "%.6g" is exact, "2" -> "2.0"
        whole = (flat == np.trunc(flat)) & (np.abs(flat) < 1e6) & ~((flat == 0) & np.signbit(flat))
    if whole.all():  # the common large case (counts, labels, ids), without the round trip below
        return [f"{value}.0" for value in flat.astype(np.int64).tolist()]
    if whole.any():
        texts = np.empty(len(flat), dtype=object)
        texts[whole] = [f"{value}.0" for value in flat[whole].astype(np.int64).tolist()]
        texts[~whole] = _float_texts(flat[~whole], double)
        return texts.tolist()
    values = flat.tolist()
    texts = ["%.6g" % v for v in values]
    if not texts:
        return texts
    if len(texts) <= 64:  # a few values: cheaper one by one than through a numpy string array
        lossy = [i for i, (text, value) in enumerate(zip(texts, values))
                 if value == value and kind(text) != kind(value)]
    else:
        with np.errstate(invalid="ignore"):
            lossy = np.nonzero(np.array(texts).astype(kind) != flat)[0].tolist()
    long = "%.17g" if double else "%.9g"
    for i in lossy:
        texts[i] = long % values[i]
    for i, text in enumerate(texts):
        if "." not in text and "e" not in text:
            texts[i] = {"nan": "NaN", "inf": "Infinity", "-inf": "-Infinity"}.get(text, text + ".0")
    return texts


def _leaf_texts(flat: np.ndarray, dtype: tf.DType, as_bytes: bool) -> list[str]:
    """The JSON text of each element of a 1-D array."""
    if dtype == tf.string:
        if as_bytes:
            return ['{"b64": "' + base64.b64encode(v).decode("ascii") + '"}' for v in flat.tolist()]
        return [json.dumps(v.decode("utf-8", errors="replace"), ensure_ascii=False) for v in flat.tolist()]
    if dtype in (tf.float32, tf.float16, tf.bfloat16):
        return _float_texts(flat, double=False)
    if dtype == tf.float64:
        return _float_texts(flat, double=True)
    if dtype == tf.bool:
        return ["true" if v else "false" for v in flat.tolist()]
    return [str(v) for v in flat.astype(np.int64 if dtype != tf.uint64 else np.uint64).tolist()]


def _empty_text(shape: tuple) -> str:
    """The JSON of an array with no elements: nested empty lists."""
    if not shape or shape[0] == 0:
        return "[]"
    inner = _empty_text(shape[1:])
    return "[" + ", ".join([inner] * shape[0]) + "]"


def _row_texts(block: np.ndarray, dtype: tf.DType, as_bytes: bool) -> list[str]:
    """The JSON text of each row (index along axis 0) of `block`."""
    if block.size == 0:
        return [_empty_text(block.shape[1:])] * block.shape[0] if block.ndim > 1 else []
    texts = _leaf_texts(block.reshape(-1), dtype, as_bytes)
    for size in reversed(block.shape[1:]):  # innermost dimension first
        texts = ["[" + ", ".join(texts[i:i + size]) + "]" for i in range(0, len(texts), size)]
    return texts


def _rows_per_chunk(array: np.ndarray) -> int:
    per_row = int(np.prod(array.shape[1:], dtype=np.int64)) if array.ndim > 1 else 1
    return max(1, CHUNK_ELEMENTS // max(per_row, 1))


def _append(out: bytearray, piece: bytes, reserve: Callable[[int], None] | None) -> None:
    if reserve is not None:
        reserve(len(out) + len(piece))
    out += piece


def _write_array(out: bytearray, array: np.ndarray, dtype: tf.DType, as_bytes: bool, reserve) -> None:
    """Appends the JSON of `array` to `out`, a slice of rows at a time."""
    if array.ndim == 0:
        _append(out, _leaf_texts(array.reshape(1), dtype, as_bytes)[0].encode(), reserve)
        return
    step = _rows_per_chunk(array)
    out += b"["
    for start in range(0, len(array), step):
        _append(out, (", " if start else "").encode() + ", ".join(_row_texts(array[start:start + step], dtype,
                                                                            as_bytes)).encode(), reserve)
    out += b"]"


def dumps_response(outputs: dict[str, np.ndarray], row_format: bool, dtypes: dict[str, tf.DType] | None = None,
                   reserve: Callable[[int], None] | None = None) -> bytearray:
    """The JSON body of a predict response (TF Serving's MakeJsonFromTensors), UTF-8, written
    into one buffer a slice of rows at a time (no second copy of the text: json_costs.response_cost).
    `reserve(size)` is called before the buffer grows to `size` bytes (it may raise)."""
    if not outputs:
        raise InvalidArgument("Cannot convert empty tensor map to JSON")
    dtypes = dtypes or {name: tf.string if value.dtype == object else tf.as_dtype(value.dtype)
                        for name, value in outputs.items()}
    names = sorted(outputs)
    as_bytes = {n: dtypes[n] == tf.string and n.endswith("_bytes") for n in names}
    several = len(names) > 1
    if not row_format:
        out = bytearray(b'{"outputs": ' + (b"{" if several else b""))
        for index, name in enumerate(names):
            if several:
                out += (", " if index else "").encode() + f"{json.dumps(name)}: ".encode()
            _write_array(out, outputs[name], dtypes[name], as_bytes[name], reserve)
        out += b"}}" if several else b"}"
        return out
    batch = None
    for name in names:
        if outputs[name].ndim == 0:
            raise InvalidArgument(f"Tensor name: {name} has no shape information ")
        size = outputs[name].shape[0]
        if batch is not None and size != batch:
            raise InvalidArgument(f"Tensor name: {name} has inconsistent batch size: {size} "
                                  f"expecting: {batch}")
        batch = size
    keys = {n: json.dumps(n) + ": " for n in names}
    step = min(_rows_per_chunk(outputs[n]) for n in names)
    out = bytearray(b'{"predictions": [')
    for start in range(0, batch, step):
        columns = [_row_texts(outputs[n][start:start + step], dtypes[n], as_bytes[n]) for n in names]
        if several:
            rows = ["{" + ", ".join(keys[n] + column[i] for n, column in zip(names, columns)) + "}"
                    for i in range(len(columns[0]))]
        else:
            rows = columns[0]
        _append(out, (", " if start else "").encode() + ", ".join(rows).encode(), reserve)
    out += b"]}"
    return out
