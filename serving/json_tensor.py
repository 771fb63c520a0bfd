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
    '{"predictions": [0.2, 3.0]}'
"""

from __future__ import annotations

import base64
import binascii
import json
import math

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import types_pb2

from serving import json_parse
from serving.status import InvalidArgument


# --- Number formatting -------------------------------------------------------------


def format_decimal(value: float, double: bool = False) -> str:
    """A float as TF Serving's WriteDecimal prints it."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "-Infinity" if value < 0 else "Infinity"
    cast = float if double else np.float32
    text = "%.6g" % value
    if cast(text) != cast(value):
        text = ("%.17g" if double else "%.9g") % value
    if "." not in text and "e" not in text:
        text += ".0"
    return text


def _scalar_json(value, dtype: tf.DType, as_bytes: bool) -> str:
    if dtype == tf.string:
        if as_bytes:
            return json.dumps({"b64": base64.b64encode(value).decode("ascii")})
        return json.dumps(value.decode("utf-8", errors="replace"), ensure_ascii=False)
    if dtype in (tf.float32, tf.float16, tf.bfloat16):
        return format_decimal(float(value))
    if dtype == tf.float64:
        return format_decimal(float(value), double=True)
    if dtype == tf.bool:
        return "true" if value else "false"
    return str(int(value))


def _array_json(array, dtype: tf.DType, as_bytes: bool) -> str:
    array = np.asarray(array)
    if array.ndim == 0:
        return _scalar_json(array.item(), dtype, as_bytes)
    return "[" + ", ".join(_array_json(item, dtype, as_bytes) for item in array) + "]"


def dumps_response(outputs: dict[str, np.ndarray], row_format: bool,
                   dtypes: dict[str, tf.DType] | None = None) -> str:
    """The JSON body of a predict response (TF Serving's MakeJsonFromTensors)."""
    if not outputs:
        raise InvalidArgument("Cannot convert empty tensor map to JSON")
    dtypes = dtypes or {name: tf.string if value.dtype == object else tf.as_dtype(value.dtype)
                        for name, value in outputs.items()}
    names = sorted(outputs)
    as_bytes = {n: dtypes[n] == tf.string and n.endswith("_bytes") for n in names}
    several = len(names) > 1
    if not row_format:
        parts = [(f"{json.dumps(n)}: " if several else "") + _array_json(outputs[n], dtypes[n], as_bytes[n])
                 for n in names]
        body = "{" + ", ".join(parts) + "}" if several else parts[0]
        return '{"outputs": ' + body + "}"
    batch = None
    for name in names:
        if outputs[name].ndim == 0:
            raise InvalidArgument(f"Tensor name: {name} has no shape information ")
        size = outputs[name].shape[0]
        if batch is not None and size != batch:
            raise InvalidArgument(f"Tensor name: {name} has inconsistent batch size: {size} "
                                  f"expecting: {batch}")
        batch = size
    rows = []
    for i in range(batch):
        values = [_array_json(outputs[n][i], dtypes[n], as_bytes[n]) for n in names]
        rows.append("{" + ", ".join(f"{json.dumps(n)}: {v}" for n, v in zip(names, values)) + "}"
                    if several else values[0])
    return '{"predictions": [' + ", ".join(rows) + "]}"


# --- Request parsing ------------------------------------------------------------------


def json_text(value) -> str:
    """A JSON value as messages quote it (JsonValueToDebugString)."""
    try:
        return json.dumps(value, allow_nan=True)
    except RecursionError:  # a value nested past Python's recursion limit
        return "[...nested too deep to print...]"


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


_INT_RANGES = {tf.int8: 8, tf.int16: 16, tf.int32: 32, tf.int64: 64, tf.uint8: 8}


def _convert(value, dtype: tf.DType):
    """One JSON leaf as a value of `dtype` (AddValueToTensor)."""
    if dtype == tf.string:
        if isinstance(value, dict):
            return decode_b64(value)
        if not isinstance(value, str):
            raise _type_error(value, dtype)
        return value.encode("utf-8", "surrogateescape")  # bytes that were not UTF-8 come back as sent
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
    if dtype in (tf.int8, tf.int16, tf.uint8):  # rapidjson IsInt(): any 32-bit int
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
        if not value:
            break
        value = value[0]
    return shape


def _fill(value, level: int, shape: list[int], dtype: tf.DType, out: list) -> None:
    """FillTensorProto: every leaf at depth len(shape), every list of the expected size."""
    rank = len(shape)
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


def to_array(value, dtype: tf.DType) -> np.ndarray:
    shape = _dense_shape(value)
    flat: list = []
    _fill(value, 0, shape, dtype, flat)
    np_dtype = object if dtype == tf.string else dtype.as_numpy_dtype
    return np.array(flat, dtype=np_dtype).reshape(shape)


def loads_request(body: bytes) -> dict:
    """The request's JSON object, parsed as TF Serving's rapidjson parses it (json_parse.py)."""
    try:
        document = json_parse.parse(body)
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
    columns: dict[str, list] = {name: [] for name in input_dtypes}
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
            if columns[name] and array.shape != columns[name][0].shape:
                first = columns[name][0]
                message = (f"Expecting tensor size: {first.size} but got: {array.size}" if array.size != first.size
                           else f"Expecting shape [{','.join(map(str, first.shape))}] but got: "
                                f"[{','.join(map(str, array.shape))}]")
                raise InvalidArgument(f"Failed to process element: {index} of 'instances' list. "
                                      f"Error: INVALID_ARGUMENT: {message}")
            columns[name].append(array)
    return {name: np.stack(arrays) for name, arrays in columns.items()}


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
