"""TF Serving's REST JSON <-> tensors, after `tensorflow_serving/util/json_tensor.cc`.

Requests: {"signature_name": str?, "instances": [...]} (row format) or
{"inputs": ...} (columnar). Binary strings are {"b64": "..."}. Responses:
{"predictions": [...]} or {"outputs": ...}; outputs named `*_bytes` are base64.
Floats are written as TF Serving writes them: 6 significant digits when that reads
back to the same value, else 9 (float32) or 17 (float64); whole numbers get ".0";
NaN and Infinity are bare tokens.

Example:
    >>> inputs, row_format = parse_predict_inputs(loads_request(b'{"instances": [1.5, 2]}'),
    ...                                           {"x": tf.float32})
    >>> dumps_response({"y": np.array([0.2, 3.0], np.float32)}, row_format)
    b'{"predictions": [0.2, 3.0]}'
"""

from __future__ import annotations

import base64
import binascii
import itertools
import json
import math

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import types_pb2

from serving import json_parse
from serving.status import InvalidArgument


# --- Response writing -----------------------------------------------------------------

# Outputs are written a slice of rows at a time, so a large output never exists as one
# Python string per element (about 50 bytes each) all at once.
_CHUNK_ELEMENTS = 1 << 15


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
    return max(1, _CHUNK_ELEMENTS // max(per_row, 1))


def _array_json(array: np.ndarray, dtype: tf.DType, as_bytes: bool) -> str:
    if array.ndim == 0:
        return _leaf_texts(array.reshape(1), dtype, as_bytes)[0]
    step = _rows_per_chunk(array)
    parts = [", ".join(_row_texts(array[i:i + step], dtype, as_bytes)) for i in range(0, len(array), step)]
    return "[" + ", ".join(parts) + "]"


def dumps_response(outputs: dict[str, np.ndarray], row_format: bool,
                   dtypes: dict[str, tf.DType] | None = None) -> bytes:
    """The JSON body of a predict response (TF Serving's MakeJsonFromTensors), UTF-8."""
    if not outputs:
        raise InvalidArgument("Cannot convert empty tensor map to JSON")
    dtypes = dtypes or {name: tf.string if value.dtype == object else tf.as_dtype(value.dtype)
                        for name, value in outputs.items()}
    names = sorted(outputs)
    as_bytes = {n: dtypes[n] == tf.string and n.endswith("_bytes") for n in names}
    several = len(names) > 1
    if not row_format:
        parts = [((f"{json.dumps(n)}: " if several else "") + _array_json(outputs[n], dtypes[n], as_bytes[n])).encode()
                 for n in names]
        body = b"{" + b", ".join(parts) + b"}" if several else parts[0]
        return b'{"outputs": ' + body + b"}"
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
    parts = []
    for start in range(0, batch, step):
        columns = [_row_texts(outputs[n][start:start + step], dtypes[n], as_bytes[n]) for n in names]
        if several:
            rows = ["{" + ", ".join(keys[n] + column[i] for n, column in zip(names, columns)) + "}"
                    for i in range(len(columns[0]))]
        else:
            rows = columns[0]
        parts.append(", ".join(rows).encode())
    return b'{"predictions": [' + b", ".join(parts) + b"]}"


def response_cost(outputs: dict[str, np.ndarray], row_format: bool) -> int:
    """An upper bound, in bytes, of the memory the outputs and their JSON take while the
    response is written: the arrays, then the text twice (its parts, then the joined body).

    >>> response_cost({"y": np.zeros((2, 3), np.float32)}, row_format=True)
    648
    """
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
    return arrays + 2 * text + 64 * min(elements, _CHUNK_ELEMENTS)  # the slice of element texts being joined


# --- Request parsing ------------------------------------------------------------------


def json_text(value) -> str:
    """A JSON value as messages quote it (JsonValueToDebugString), cut at _MAX_QUOTED characters."""
    try:
        text = json.dumps(value, allow_nan=True, default=repr)  # repr: json_parse.TOO_DEEP
    except RecursionError:  # a value nested past Python's recursion limit
        return "[...nested too deep to print...]"
    return text if len(text) <= _MAX_QUOTED else text[:_MAX_QUOTED] + "...(cut)"


_MAX_QUOTED = 10_000


def json_type_name(value) -> str:
    """rapidjson's type name of a JSON value, as TF Serving's messages print it (JsonTypeString)."""
    if value is None:
        return "Null"
    if isinstance(value, bool):
        return "True" if value else "False"
    return {dict: "Object", list: "Array", str: "String"}.get(type(value), "Number")


def dtype_name(dtype: tf.DType) -> str:
    """TF's DataTypeString of a dtype, as TF Serving's messages print it: float, int64, string.

    >>> dtype_name(tf.float32), dtype_name(tf.float64), dtype_name(tf.string)
    ('float', 'double', 'string')
    """
    return types_pb2.DataType.Name(dtype.as_datatype_enum).removeprefix("DT_").lower()


def _type_error(value, dtype: tf.DType) -> InvalidArgument:
    return InvalidArgument(f"JSON Value: {json_text(value)} Type: {json_type_name(value)} is not of "
                           f"expected type: {dtype_name(dtype)}")


def is_b64_object(value) -> bool:
    return isinstance(value, dict) and len(value) == 1 and isinstance(value.get("b64"), str)


def decode_b64(value) -> bytes:
    if not is_b64_object(value):
        raise InvalidArgument(f"JSON Value: {json_text(value)} not formatted correctly for base64 data")
    text = value["b64"]
    try:
        return base64.b64decode(text + "=" * (-len(text) % 4), validate=True)
    except (binascii.Error, ValueError):
        raise InvalidArgument("Unable to base64 decode") from None


_INT_RANGES = {tf.int8: 8, tf.int16: 16, tf.int32: 32, tf.int64: 64, tf.uint8: 8, tf.uint16: 16, tf.uint32: 32,
               tf.uint64: 64}
_WRAPPED = (tf.int8, tf.int16, tf.uint8, tf.uint16)  # rapidjson IsInt(): any 32-bit int, then cast


def _convert(value, dtype: tf.DType):
    """One JSON leaf as a value of `dtype` (AddValueToTensor)."""
    if dtype == tf.string:
        if isinstance(value, dict):
            return decode_b64(value)
        if not isinstance(value, str):
            raise _type_error(value, dtype)
        return _utf8(value)
    if dtype == tf.bool:
        if not isinstance(value, bool):
            raise _type_error(value, dtype)
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _type_error(value, dtype)
    if dtype.is_floating:  # rapidjson's GetFloat/GetDouble: rounded, past the range inf or 0
        return _to_float(value, np.float64 if dtype == tf.float64 else np.float32)
    if not isinstance(value, int):  # 1.0 is not an integer for TF Serving
        raise _type_error(value, dtype)
    bits = _INT_RANGES.get(dtype, 64)
    low, high = (0, 2**bits - 1) if dtype.is_unsigned else (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1)
    if dtype in _WRAPPED:
        low, high = -(2**31), 2**31 - 1
    if not low <= value <= high:
        raise _type_error(value, dtype)
    return value


def _to_float(value, kind) -> float:
    """A JSON number as a C++ cast to `kind` gives it (json_tensor_test.cc:
    FloatTensorWithPrecisionLoss, FloatTensorThatExceedsMaxReturnsInf, ...MinReturnsZero)."""
    try:
        number = float(value)
    except OverflowError:  # an integer past the double range
        number = math.inf if value > 0 else -math.inf
    with np.errstate(over="ignore", under="ignore"):
        return float(kind(number))


def _dense_shape(value) -> list[int]:
    """GetDenseTensorShape: sizes along the first elements."""
    shape = []
    while isinstance(value, list):
        shape.append(len(value))
        if len(shape) > MAX_RANK:
            raise _too_deep()
        if not value:
            break
        value = value[0]
    if value is json_parse.TOO_DEEP:
        raise _too_deep()
    return shape


def _too_deep() -> InvalidArgument:
    return InvalidArgument(f"JSON value nested deeper than a tensor can be (at most {MAX_RANK} dimensions)")


def _fill(value, level: int, shape: list[int], dtype: tf.DType, out: list) -> None:
    """FillTensorProto: every leaf at depth len(shape), every list of the expected size."""
    rank = len(shape)
    if value is json_parse.TOO_DEEP:
        raise _too_deep()
    if not isinstance(value, list):
        if level != rank:
            raise InvalidArgument(f"JSON Value: {json_text(value)} found at incorrect level: "
                                  f"{level + 1} in the JSON DOM. Expected at level: {rank}")
        if isinstance(value, dict) and dtype != tf.string:
            raise _type_error(value, dtype)
        out.append(_convert(value, dtype))
        return
    if level >= rank:
        raise InvalidArgument(f"Encountered list at unexpected level: {level} expected < {rank}")
    if len(value) != shape[level]:
        raise InvalidArgument(f"Encountered list at unexpected size: {len(value)} at level: {level} "
                              f"expected size: {shape[level]}")
    for item in value:
        _fill(item, level + 1, shape, dtype, out)


def _utf8(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")  # bytes that were not UTF-8 come back as sent
    except UnicodeEncodeError as error:  # a lone surrogate: no bytes stand for it
        raise InvalidArgument(f"String value has an unpaired surrogate at index {error.start}") from None


# numpy's limit on dimensions (TF's own, 254, is higher).
MAX_RANK = 64


def to_array(value, dtype: tf.DType) -> np.ndarray:
    """A JSON value as an array of `dtype` (FillTensorProto's rules and messages)."""
    shape = _dense_shape(value)
    array = _fast_array(value, shape, dtype)
    if array is not None:
        return array
    flat: list = []
    _fill(value, 0, shape, dtype, flat)  # raises TF Serving's error for what the fast path refused
    if dtype == tf.string:
        return np.array(flat, dtype=object).reshape(shape)
    if dtype in _WRAPPED:  # int_val holds them as 32-bit ints; Tensor::FromProto casts them
        return np.array(flat, dtype=np.int64).astype(dtype.as_numpy_dtype).reshape(shape)
    return np.array(flat, dtype=dtype.as_numpy_dtype).reshape(shape)


def _leaves(value, rank: int):
    """The leaves of a regular nested list, lazily, without copying it."""
    for _ in range(rank - 1):
        value = itertools.chain.from_iterable(value)
    return value if rank else [value]


def _fast_array(value, shape: list[int], dtype: tf.DType) -> np.ndarray | None:
    """`value` converted by numpy in one pass, when it is regular and every leaf has a type
    `dtype` takes; None otherwise (the element-wise path then finds TF Serving's error).
    No float64 or Python-object copy of the values is made on the way."""
    if dtype == tf.string:
        first = value
        while isinstance(first, list) and first:
            first = first[0]
        if not (isinstance(first, (str, list)) or is_b64_object(first)):  # no array of it is built
            return None
        try:
            objects = np.array(value, dtype=object)
        except ValueError:
            return None
        if objects.shape != tuple(shape) or not {type(v) for v in objects.flat} <= {str, dict}:
            return None
        try:
            flat = [_utf8(leaf) if type(leaf) is str else decode_b64(leaf) for leaf in objects.flat]
        except InvalidArgument:
            return None
        del objects
        return np.array(flat, dtype=object).reshape(shape)
    if dtype == tf.bool:
        allowed = {bool}
    elif dtype.is_floating:
        allowed = {int, float}
    elif dtype.is_integer:
        allowed = {int}
    else:
        return None
    try:
        with np.errstate(over="ignore", under="ignore", invalid="ignore"):
            array = np.array(value, dtype=np.int64 if dtype in _WRAPPED else dtype.as_numpy_dtype)
    except (ValueError, TypeError, OverflowError):
        return None
    if array.shape != tuple(shape) or not set(map(type, _leaves(value, len(shape)))) <= allowed:
        return None
    if dtype in _WRAPPED:
        if array.size and (array.min() < -(2**31) or array.max() > 2**31 - 1):
            return None
        return array.astype(dtype.as_numpy_dtype)
    return array


def decode_cost(body: bytes) -> int:
    """An upper bound, in bytes, of the memory that parsing `body` and converting it to
    arrays takes beyond the body itself: 12 bytes per byte covers numbers (a Python object
    and its slot in a list, then the array), and each array, object or string adds the size
    of the Python object made for it. Counted in C (bytes.count), before parsing. A body of
    dense numbers needs at most 12 times its size, so the server's decoding budget of
    12 x --max_body_bytes always admits one of the largest.

    >>> decode_cost(b'{"instances": [1, 2]}')
    700
    """
    return (12 * len(body) + 112 * body.count(b"[") + 256 * body.count(b"{")
            + 40 * body.count(b'"'))


def loads_request(body: bytes, deadline: float | None = None) -> dict:
    """The request's JSON object, parsed as TF Serving's rapidjson parses it (json_parse.py)."""
    try:
        document = json_parse.parse(body, deadline)
    except json_parse.ParseError as error:
        raise InvalidArgument(str(error)) from None
    if not isinstance(document, dict):
        raise InvalidArgument(f"JSON Value: {json_text(document)} Is not object")
    return document


def signature_name(document: dict) -> str:
    name = document.get("signature_name", "serving_default")
    if not isinstance(name, str):
        raise InvalidArgument(f"JSON Value: {json_text(document)} not formatted correctly. "
                              "'signature_name' key must be a string value.")
    return name or "serving_default"


def parse_predict_inputs(document: dict, input_dtypes: dict[str, tf.DType]) -> tuple[dict, bool]:
    """Input arrays of a predict request, and whether it used the row format."""
    if not input_dtypes:
        raise InvalidArgument("Failed to get input map for signature")
    has_rows, has_columns = "instances" in document, "inputs" in document
    if has_rows and has_columns:
        raise InvalidArgument(f"JSON Value: {json_text(document)} Not formatted correctly expecting only "
                              "one of 'inputs' or 'instances' keys to exist ")
    if has_rows:
        return _parse_instances(document, input_dtypes), True
    if has_columns:
        return _parse_inputs(document["inputs"], input_dtypes), False
    raise InvalidArgument("Missing 'inputs' or 'instances' key")


def _is_element_object(value) -> bool:
    return isinstance(value, dict) and not is_b64_object(value)


_STACKED_ROWS = 128  # instances converted one by one, stacked into one array at a time


def _parse_instances(document: dict, input_dtypes: dict) -> dict:
    instances = document["instances"]
    if not isinstance(instances, list):
        raise InvalidArgument(f"JSON Value: {json_text(document)} Excepting 'instances' to be an list/array")
    if not instances:
        raise InvalidArgument(f"JSON Value: {json_text(document)} No values in 'instances' array")
    objects = _is_element_object(instances[0])
    if not objects and len(input_dtypes) > 1:
        raise InvalidArgument("instances is a plain list, but expecting list of objects as multiple "
                              "input tensors required as per tensorinfo_map")
    arrays = _fast_instances(instances, objects, input_dtypes)
    if arrays is not None:
        return arrays
    # Element by element: slower, and finds the first error as TF Serving reports it. Rows are
    # stacked _STACKED_ROWS at a time, so no array per instance outlives its slice (each costs
    # about 200 bytes more than its values: decode_cost does not count them).
    columns: dict[str, list] = {name: [] for name in input_dtypes}
    stacked: dict[str, list] = {name: [] for name in input_dtypes}
    first_shapes: dict[str, tuple] = {}
    for index, element in enumerate(instances):
        if objects:
            if not _is_element_object(element):
                raise InvalidArgument(f"Expecting object but got list at item {index} of input list")
            if set(element) != set(input_dtypes):
                raise InvalidArgument(f"Failed to process element: {index} of 'instances' list. JSON "
                                      f"object: {json_text(element)} keys must be equal to: "
                                      f"{','.join(sorted(input_dtypes))}")
            items = element.items()
        else:
            if _is_element_object(element):
                raise InvalidArgument(f"Expecting value/list but got object at item {index} of input list")
            items = [(next(iter(input_dtypes)), element)]
        for name, value in items:
            try:
                array = to_array(value, input_dtypes[name])
            except InvalidArgument as error:
                key = f" key: {name}" if objects else ""
                raise InvalidArgument(f"Failed to process element: {index}{key} of 'instances' list. "
                                      f"Error: INVALID_ARGUMENT: {error}") from None
            first = first_shapes.setdefault(name, array.shape)
            if array.shape != first:
                size = int(np.prod(first, dtype=np.int64))
                message = (f"Expecting tensor size: {size} but got: {array.size}" if array.size != size
                           else f"Expecting shape [{','.join(map(str, first))}] but got: "
                                f"[{','.join(map(str, array.shape))}]")
                raise InvalidArgument(f"Failed to process element: {index} of 'instances' list. "
                                      f"Error: INVALID_ARGUMENT: {message}")
            columns[name].append(array)
            if len(columns[name]) == _STACKED_ROWS:
                stacked[name].append(np.stack(columns[name]))
                columns[name] = []
    return {name: np.concatenate(stacked[name] + ([np.stack(columns[name])] if columns[name] else []))
            for name in input_dtypes}


def _fast_instances(instances: list, objects: bool, input_dtypes: dict) -> dict | None:
    """Each input's values across all instances converted in one pass (one array, no array
    per instance); None if any instance would fail, so the element-wise loop names it."""
    if objects:
        names = set(input_dtypes)
        if not all(_is_element_object(element) and element.keys() == names for element in instances):
            return None
        columns = {name: [element[name] for element in instances] for name in input_dtypes}
    else:
        columns = {next(iter(input_dtypes)): instances}
    arrays = {}
    for name, values in columns.items():
        try:
            array = _fast_array(values, _dense_shape(values), input_dtypes[name])
        except InvalidArgument:
            return None
        if array is None:
            return None
        arrays[name] = array
    return arrays


def _parse_inputs(value, input_dtypes: dict) -> dict:
    if not isinstance(value, dict) or is_b64_object(value):
        if len(input_dtypes) > 1:
            raise InvalidArgument("inputs is a plain value/list, but expecting an object as multiple "
                                  "input tensors required as per tensorinfo_map")
        name = next(iter(input_dtypes))
        return {name: to_array(value, input_dtypes[name])}
    arrays = {}
    for name, dtype in input_dtypes.items():
        if name not in value:
            raise InvalidArgument(f"Missing named input: {name} in 'inputs' object.")
        arrays[name] = to_array(value[name], dtype)
    return arrays
