"""Property tests of the server's request decoders: whatever bytes a client sends, the JSON
and TensorProto decoders raise nothing but the server's own InvalidArgument (a 4xx), and
what they build stays within the memory they announced before building it; the JSON
decoder's one numpy pass builds the same arrays as its element-wise conversion."""

import json
import tracemalloc

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from tensorflow.core.framework import tensor_pb2

from serving import json_array, json_costs, json_parse, json_request, tensor_proto
from serving.status import InvalidArgument

SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
INPUT_MAPS = [{"x": tf.float32}, {"x": tf.int32}, {"x": tf.int64}, {"x": tf.uint8}, {"x": tf.string},
              {"x": tf.bool}, {"x": tf.float64}, {"a": tf.string, "b": tf.int64}]

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70),
                    st.floats(allow_nan=True, allow_infinity=True),
                    st.text(alphabet=st.characters(codec=None), max_size=8),
                    st.builds(lambda s: {"b64": s}, st.text(max_size=8)))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=5),
                                                       st.dictionaries(st.sampled_from(["x", "a", "b", "b64", "z"]),
                                                                       inner, max_size=3)), max_leaves=40)
documents = st.one_of(
    st.builds(lambda v, s: {"instances": v, **({"signature_name": s} if s else {})}, values,
              st.one_of(st.none(), st.text(max_size=4))),
    st.builds(lambda v: {"inputs": v}, values),
    values)


def to_body(document) -> bytes:
    return json.dumps(document, allow_nan=True).encode("utf-8", "surrogatepass")


def decode(body: bytes, dtypes: dict):
    document = json_request.loads_request(body)
    return json_request.parse_predict_inputs(document, dtypes)


@SETTINGS
@given(st.binary(max_size=200), st.sampled_from(INPUT_MAPS))
def test_any_bytes_decode_or_raise_invalid_argument(body, dtypes):
    try:
        decode(body, dtypes)
    except InvalidArgument:
        pass


@SETTINGS
@given(documents, st.sampled_from(INPUT_MAPS))
def test_any_json_document_decodes_or_raises_invalid_argument(document, dtypes):
    try:
        inputs, _ = decode(to_body(document), dtypes)
    except InvalidArgument:
        return
    assert set(inputs) == set(dtypes)
    for name, array in inputs.items():
        assert array.dtype == (object if dtypes[name] == tf.string else dtypes[name].as_numpy_dtype)


@settings(max_examples=60, deadline=None)
@given(st.sampled_from([b"0", b"999", b"0.5", b"-1e5", b"[0]", b"[]", b'"ab"', b'"a"', b'{"b64": "YQ"}',
                        b'{"x": 1}', b'{"x": [1, 2]}', b"true", b"[[1, 2], [3, 4]]"]),
       st.integers(min_value=1, max_value=20_000), st.sampled_from(INPUT_MAPS), st.booleans())
@example(b'{"b64": "YQ"}', 4095, {"x": tf.string}, False)  # once an array per instance, 146 KB over
def test_decoding_stays_within_its_announced_cost(element, count, dtypes, columnar):
    """json_costs.decode_cost, counted before parsing, bounds what parsing and converting
    take (measured by tracemalloc), whatever the body's shape."""
    key = b'"inputs"' if columnar else b'"instances"'
    body = b"{" + key + b": [" + b", ".join([element] * count) + b"]}"

    def run():
        try:
            decode(body, dtypes)
        except InvalidArgument:
            pass
    run()  # first calls of a code path allocate once (caches, lazy imports): not the body's cost
    tracemalloc.start()
    run()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak <= json_costs.decode_cost(body) + 64 * 1024, (element, count, peak / len(body))


DTYPES = st.one_of(st.sampled_from(list(tensor_proto._FIELDS)), st.integers(min_value=-5, max_value=1000))


@st.composite
def tensor_protos(draw):
    proto = tensor_pb2.TensorProto(dtype=draw(DTYPES))
    for size in draw(st.lists(st.one_of(st.integers(min_value=-3, max_value=8), st.integers(min_value=0, max_value=2**40)),
                              max_size=4)):
        proto.tensor_shape.dim.add(size=size)
    proto.tensor_shape.unknown_rank = draw(st.booleans()) and draw(st.booleans())
    if draw(st.booleans()):
        proto.tensor_content = draw(st.binary(max_size=64))
    proto.float_val.extend(draw(st.lists(st.floats(width=32), max_size=4)))
    proto.int_val.extend(draw(st.lists(st.integers(min_value=-(2**31), max_value=2**31 - 1), max_size=4)))
    proto.int64_val.extend(draw(st.lists(st.integers(min_value=-(2**63), max_value=2**63 - 1), max_size=4)))
    proto.string_val.extend(draw(st.lists(st.binary(max_size=8), max_size=4)))
    proto.half_val.extend(draw(st.lists(st.integers(min_value=0, max_value=2**16 - 1), max_size=4)))
    proto.bool_val.extend(draw(st.lists(st.booleans(), max_size=4)))
    proto.dcomplex_val.extend(draw(st.lists(st.floats(), max_size=3)))
    return proto


@SETTINGS
@given(tensor_protos())
def test_any_tensor_proto_builds_within_its_limit_or_raises_invalid_argument(proto):
    limit = 1 << 16
    try:
        array = tensor_proto.to_array(proto, "x", limit)
    except InvalidArgument as error:
        assert str(error).startswith("tensor parsing error: x")
        return
    assert list(array.shape) == [d.size for d in proto.tensor_shape.dim]
    assert array.nbytes <= limit


@pytest.mark.parametrize("value", [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([b"a", b"bc"], object),
                                   np.array([True, False]), np.array([1, -2], np.int8),
                                   np.array([1.5, 2.0], np.float16), np.array([1 + 2j], np.complex64)])
def test_tensor_protos_built_by_tensorflow_round_trip(value):
    np.testing.assert_array_equal(tensor_proto.to_array(tf.make_tensor_proto(value), "x", 1 << 20), value)


# --- The one numpy pass (json_array.one_pass_array) against the element-wise conversion ----------

ONE_PASS_DTYPES = [tf.float16, tf.bfloat16, tf.float32, tf.float64, tf.int8, tf.int16, tf.int32, tf.int64,
                   tf.uint8, tf.uint16, tf.uint32, tf.uint64, tf.bool, tf.string]
EDGES = [0, 1, -1, 127, 128, -129, 255, 256, 2**15, 2**16, 2**31 - 1, 2**31, -(2**31) - 1, 2**32, 2**53 + 1,
         2**63 - 1, 2**63, -(2**63) - 1, 2**64, 2**70]


def leaves_of(dtype: tf.DType):
    """Leaves `dtype` takes, mostly (past its range, a bad base64 string: refused)."""
    if dtype == tf.string:
        b64_objects = st.builds(lambda text: {"b64": text}, st.sampled_from(["aGk=", "aGk", "", "!"]))
        return st.one_of(st.text(max_size=6), b64_objects)
    if dtype == tf.bool:
        return st.booleans()
    edges = st.sampled_from(EDGES + [-edge for edge in EDGES])
    if dtype.is_floating:
        return st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.integers(-(2**70), 2**70), edges)
    return st.one_of(st.integers(dtype.min, dtype.max), edges)


SHAPES = st.lists(st.integers(min_value=0, max_value=3), max_size=3)


@st.composite
def json_tensors(draw, dtype=None, shape=None):
    """A JSON value as a client sends one input: a dense nested list of leaves, now and then
    made ragged (a list cut short, a leaf where a list should be) or given a leaf of any type -
    parsed back by the server's parser, so its leaves have the types the server sees."""
    dtype = dtype or draw(st.sampled_from(ONE_PASS_DTYPES))
    shape = draw(SHAPES) if shape is None else shape
    leaves = leaves_of(dtype)

    def build(level):
        if level == len(shape):
            return draw(scalars) if draw(st.integers(min_value=0, max_value=29)) == 0 else draw(leaves)
        items = [build(level + 1) for _ in range(shape[level])]
        if items and draw(st.integers(min_value=0, max_value=9)) == 0:
            items[-1] = draw(st.one_of(leaves, st.just([]), st.just(items[:-1])))
        return items
    try:
        value = json_parse.parse(to_body(build(0)))
    except json_parse.ParseError:  # a lone surrogate or a number past what rapidjson reads
        value = []
    return value, dtype


def assert_same_array(one_pass: np.ndarray, checked: np.ndarray) -> None:
    assert one_pass.dtype == checked.dtype and one_pass.shape == checked.shape
    if one_pass.dtype == object:
        assert one_pass.tolist() == checked.tolist()
    elif one_pass.dtype.kind == "f" or one_pass.dtype.name == "bfloat16":  # bfloat16's kind is "V"
        one_pass, checked = one_pass.astype(np.float32), checked.astype(np.float32)
        assert np.array_equal(one_pass, checked, equal_nan=True)
        assert np.array_equal(np.signbit(one_pass), np.signbit(checked))  # -0.0 stays -0.0
    else:
        assert np.array_equal(one_pass, checked)


@SETTINGS
@given(json_tensors())
@example(([1 + 2**-11 + 2**-30], tf.float16))  # was 1.001 in one pass (rounded once), 1.0 element-wise
def test_one_pass_array_equals_the_element_wise_conversion(value_and_dtype):
    """Whatever the one pass converts, the element-wise conversion (FillTensorProto's rules)
    converts to the same array; whatever the element-wise one refuses, the one pass refuses too,
    so to_array reports TF Serving's error."""
    value, dtype = value_and_dtype
    one_pass = json_array.one_pass_array(value, dtype)
    try:
        checked = json_array.checked_array(value, dtype)
    except InvalidArgument:
        assert one_pass is None
        return
    if one_pass is not None:
        assert_same_array(one_pass, checked)


@st.composite
def instances(draw):
    """A row-format `instances` list and its input map: plain values for one input, objects of
    two inputs (now and then a key missing or extra) for two."""
    dtype = draw(st.sampled_from(ONE_PASS_DTYPES))
    dtypes = {"x": dtype} if draw(st.booleans()) else {"a": tf.string, "b": dtype}
    shapes = {name: draw(SHAPES) for name in dtypes}  # an input's rows share a shape, mostly

    def value(name):
        shape = draw(SHAPES) if draw(st.integers(min_value=0, max_value=9)) == 0 else shapes[name]
        return draw(json_tensors(dtypes[name], shape))[0]
    rows = []
    for _ in range(draw(st.integers(min_value=1, max_value=4))):
        if len(dtypes) == 1:
            rows.append(value("x"))
            continue
        element = {name: value(name) for name in dtypes}
        if draw(st.integers(min_value=0, max_value=9)) == 0:
            element.pop("a") if draw(st.booleans()) else element.update(z=1)
        rows.append(element)
    return rows, dtypes


@SETTINGS
@given(instances())
@example(([float("nan")], {"x": tf.bfloat16}))  # NaN equals NaN in bfloat16 too (kind "V", not "f")
def test_rows_in_one_pass_equal_rows_one_by_one(rows_and_dtypes):
    """The row format's one pass over each input's values builds what converting the rows one
    by one and stacking them builds, and refuses whatever that refuses."""
    rows, dtypes = rows_and_dtypes
    objects = len(dtypes) > 1
    one_pass = json_request._rows_in_one_pass(rows, objects, dtypes)
    try:
        one_by_one = json_request._rows_one_by_one(rows, objects, dtypes)
    except InvalidArgument:
        assert one_pass is None
        return
    if one_pass is not None:
        assert one_pass.keys() == one_by_one.keys()
        for name in one_pass:
            assert_same_array(one_pass[name], one_by_one[name])
