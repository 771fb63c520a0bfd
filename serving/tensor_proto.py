"""gRPC TensorProtos checked, then built as arrays, by Tensor::FromProto's rules.

A PredictRequest is small on the wire but its tensors need not be: a shape of
[500000000] with one value asks for 2 GB (FromProto repeats the last value to fill a
shape). So nothing is allocated before the proto is checked: a known dtype that can
cross a signature (not DT_VARIANT or DT_RESOURCE), a shape with no negative or unknown
dimension, content whose size matches the shape, and a size once built that the
caller's limit allows (`materialized_bytes`). Every failure is INVALID_ARGUMENT with TF
Serving's "tensor parsing error: <alias>" and the reason. Values past the shape are cut, as
FromProto cuts them, before any becomes a Python object: a [1, 1] shape with 60 M int_val
converts one.

Example:
    >>> proto = tf.make_tensor_proto([1.0, 2.0])
    >>> to_array(proto, "x", limit_bytes=1 << 20)
    array([1., 2.], dtype=float32)
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf
from tensorflow.core.framework import types_pb2

from serving.status import InvalidArgument

# dtype -> (repeated field holding values, numpy dtype of the field's values, numpy dtype built)
_FIELDS = {
    types_pb2.DT_FLOAT: ("float_val", np.float32, np.float32),
    types_pb2.DT_DOUBLE: ("double_val", np.float64, np.float64),
    types_pb2.DT_INT32: ("int_val", np.int32, np.int32),
    types_pb2.DT_UINT8: ("int_val", np.int32, np.uint8),
    types_pb2.DT_INT16: ("int_val", np.int32, np.int16),
    types_pb2.DT_INT8: ("int_val", np.int32, np.int8),
    types_pb2.DT_UINT16: ("int_val", np.int32, np.uint16),
    types_pb2.DT_INT64: ("int64_val", np.int64, np.int64),
    types_pb2.DT_UINT32: ("uint32_val", np.uint32, np.uint32),
    types_pb2.DT_UINT64: ("uint64_val", np.uint64, np.uint64),
    types_pb2.DT_BOOL: ("bool_val", np.bool_, np.bool_),
    types_pb2.DT_HALF: ("half_val", np.int32, np.float16),
    types_pb2.DT_BFLOAT16: ("half_val", np.int32, tf.bfloat16.as_numpy_dtype),
    types_pb2.DT_COMPLEX64: ("scomplex_val", np.float32, np.complex64),
    types_pb2.DT_COMPLEX128: ("dcomplex_val", np.float64, np.complex128),
    types_pb2.DT_STRING: ("string_val", object, object),
}
MAX_RANK = 64  # numpy's limit (TF's TensorShape allows 254)
STRING_OVERHEAD = 48  # bytes a Python bytes object and its slot take beyond its content


def _error(alias: str, reason: str) -> InvalidArgument:
    return InvalidArgument(f"tensor parsing error: {alias}: {reason}")


def too_large(alias: str, size: int, limit_bytes: int) -> InvalidArgument:
    return _error(alias, f"its shape asks for {size} bytes, more than the limit of {limit_bytes}")


def shape_of(proto, alias: str) -> tuple[int, ...]:
    """The proto's shape, if it is one a tensor can have."""
    if proto.tensor_shape.unknown_rank:
        raise _error(alias, "the shape's rank is unknown")
    if len(proto.tensor_shape.dim) > MAX_RANK:  # counted before any is read
        raise _error(alias, f"{len(proto.tensor_shape.dim)} dimensions, more than {MAX_RANK}")
    dims = tuple(int(d.size) for d in proto.tensor_shape.dim)
    if any(d < 0 for d in dims):
        raise _error(alias, f"negative dimension in shape {list(dims)}")
    if _elements(tuple(d for d in dims if d)) >= 2**58:  # what numpy can index (16-byte elements)
        raise _error(alias, f"shape {list(dims)} is too large")
    return dims


def _elements(dims: tuple[int, ...]) -> int:
    count = 1
    for d in dims:
        count *= d
    return count


def materialized_bytes(proto, alias: str, limit_bytes: int | None = None) -> int:
    """An upper bound of the memory the built array takes (before anything is built). Only
    the strings the shape takes are counted, and none once the shape alone is over
    `limit_bytes`: a message's values past its shape cost nothing."""
    if proto.dtype not in _FIELDS:
        name = types_pb2.DataType.Name(proto.dtype) if proto.dtype in types_pb2.DataType.values() else proto.dtype
        raise _error(alias, f"dtype {name} cannot be sent as an input")
    count = _elements(shape_of(proto, alias))
    if proto.dtype == types_pb2.DT_STRING:
        size = count * STRING_OVERHEAD + len(proto.tensor_content)
        if limit_bytes is not None and size > limit_bytes:
            return size
        return size + sum(len(v) for v in _first(proto.string_val, count))
    return count * np.dtype(_FIELDS[proto.dtype][2]).itemsize


def _first(values, count: int):
    """The first `count` of a repeated field: only those become Python objects."""
    return values[:count] if len(values) > count else values


def to_array(proto, alias: str, limit_bytes: int) -> np.ndarray:
    """The array a TensorProto stands for, refused (InvalidArgument) if malformed or if it
    would take more than `limit_bytes` once built."""
    size = materialized_bytes(proto, alias, limit_bytes)
    if size > limit_bytes:
        raise too_large(alias, size, limit_bytes)
    dims = shape_of(proto, alias)
    count = _elements(dims)
    field, wire, built = _FIELDS[proto.dtype]
    if proto.dtype == types_pb2.DT_STRING:
        values = _decode_string_list(proto.tensor_content, count, alias) if proto.tensor_content \
            else list(_first(proto.string_val, count))
        return _fill(np.array(values, dtype=object), count, alias, b"").reshape(dims)
    if proto.tensor_content:
        itemsize = np.dtype(built).itemsize
        if len(proto.tensor_content) != count * itemsize:
            raise _error(alias, f"tensor_content holds {len(proto.tensor_content)} bytes, the shape "
                                f"{list(dims)} of {np.dtype(built).name} needs {count * itemsize}")
        return np.frombuffer(proto.tensor_content, dtype=built).reshape(dims).copy()
    values = np.array(_first(getattr(proto, field), count if field not in ("scomplex_val", "dcomplex_val")
                                                   else 2 * count), dtype=wire)
    if proto.dtype in (types_pb2.DT_COMPLEX64, types_pb2.DT_COMPLEX128):
        if len(values) % 2:
            raise _error(alias, "complex values come in (real, imaginary) pairs; an odd count was sent")
        values = values.view(built)
    elif proto.dtype in (types_pb2.DT_HALF, types_pb2.DT_BFLOAT16):
        values = values.astype(np.uint16).view(built)  # half_val holds the 16-bit patterns
    else:
        values = values.astype(built)  # int_val's 32-bit ints cast to 8 or 16 bits, as FromProto does
    return _fill(values, count, alias, built(0) if built is not object else b"").reshape(dims)


def from_array(array: np.ndarray, as_content: bool = False):
    """A TensorProto of `array`, as TF Serving writes a response's outputs: the typed repeated
    field (Tensor::AsProtoField), or with `as_content` (--enable_serialization_as_tensor_content)
    the raw bytes in tensor_content (AsProtoTensorContent). Strings are always string_val."""
    if as_content or array.dtype == object:
        return tf.make_tensor_proto(array)
    proto = tf.make_tensor_proto(np.zeros((0,), array.dtype))  # dtype set by TF's own mapping
    proto.tensor_shape.Clear()
    for size in array.shape:
        proto.tensor_shape.dim.add(size=size)
    field, wire, _ = _FIELDS[proto.dtype]
    flat = array.reshape(-1)
    if proto.dtype in (types_pb2.DT_HALF, types_pb2.DT_BFLOAT16):
        flat = flat.view(np.uint16)
    elif proto.dtype in (types_pb2.DT_COMPLEX64, types_pb2.DT_COMPLEX128):
        flat = flat.view(wire)
    getattr(proto, field).extend(flat.astype(wire if wire is not np.bool_ else bool).tolist())
    return proto


def _fill(values: np.ndarray, count: int, alias: str, zero) -> np.ndarray:
    """FromProto's rule: no values is all zeros; fewer repeat the last; more are cut (no error:
    tf.io.parse_tensor, Tensor::FromProto, keeps the first `count` of a [1] shape's 60 M)."""
    if len(values) >= count:
        return values[:count]
    out = np.empty(count, dtype=values.dtype)
    out[:len(values)] = values
    out[len(values):] = values[-1] if len(values) else zero
    return out


def _decode_string_list(content: bytes, count: int, alias: str) -> list[bytes]:
    """tensor_content of a string tensor (port::EncodeStringList): `count` varint lengths, then
    the strings' bytes one after another."""
    lengths, position = [], 0
    for _ in range(count):
        length, shift = 0, 0
        while True:
            if position >= len(content) or shift > 63:
                raise _error(alias, "tensor_content does not hold the string lengths its shape needs")
            byte = content[position]
            position += 1
            length |= (byte & 0x7F) << shift
            shift += 7
            if byte < 0x80:
                break
        lengths.append(length)
    if position + sum(lengths) != len(content):
        raise _error(alias, "tensor_content's string lengths do not add up to its size")
    values = []
    for length in lengths:
        values.append(content[position:position + length])
        position += length
    return values
