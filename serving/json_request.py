"""A REST predict body's inputs, after `tensorflow_serving/util/json_tensor.cc`
(FillPredictRequestFromJson): {"signature_name": str?, "instances": [...]} (row format) or
{"inputs": ...} (columnar), each input converted to an array by json_array.to_array.

Row format: a list with one entry per row, each an object of the inputs ({"b64": ...} is a
value, not an object) or, for a signature of one input, its value; every row's value of an
input has the same shape, and the rows are stacked. Columnar: an object of the inputs, or
for one input its value, each a whole tensor.

Example:
    >>> document = loads_request(b'{"instances": [{"a": 1, "b": "x"}, {"a": 2, "b": "y"}]}')
    >>> parse_predict_inputs(document, {"a": tf.int64, "b": tf.string})
    ({'a': array([1, 2]), 'b': array([b'x', b'y'], dtype=object)}, True)
    >>> parse_predict_inputs({"inputs": {"a": [[1.5, 2]]}}, {"a": tf.float32})
    ({'a': array([[1.5, 2. ]], dtype=float32)}, False)
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf

from serving import json_parse
from serving.json_array import is_b64_object, json_text, one_pass_array, to_array
from serving.status import InvalidArgument


def loads_request(body: bytes, deadline: float | None = None, deep: bool = False) -> dict:
    """The request's JSON object, parsed as TF Serving's rapidjson parses it (json_parse.py;
    `deep`: json_parse.parse's)."""
    try:
        document = json_parse.parse(body, deadline, deep)
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
    """The row format (FillTensorMapFromInstancesList): in one pass over each input's values,
    or row by row where that pass refuses them, to name the first error as TF Serving does."""
    instances = document["instances"]
    if not isinstance(instances, list):
        raise InvalidArgument(f"JSON Value: {json_text(document)} Excepting 'instances' to be an list/array")
    if not instances:
        raise InvalidArgument(f"JSON Value: {json_text(document)} No values in 'instances' array")
    objects = _is_element_object(instances[0])
    if not objects and len(input_dtypes) > 1:
        raise InvalidArgument("instances is a plain list, but expecting list of objects as multiple "
                              "input tensors required as per tensorinfo_map")
    arrays = _rows_in_one_pass(instances, objects, input_dtypes)
    return arrays if arrays is not None else _rows_one_by_one(instances, objects, input_dtypes)


def _rows_in_one_pass(instances: list, objects: bool, input_dtypes: dict) -> dict | None:
    """Each input's values across all rows converted in one pass (one array, no array per
    row: json_array.one_pass_array); None if any row would fail, so _rows_one_by_one names it."""
    if objects:
        names = set(input_dtypes)
        if not all(_is_element_object(element) and element.keys() == names for element in instances):
            return None
        columns = {name: [element[name] for element in instances] for name in input_dtypes}
    else:
        columns = {next(iter(input_dtypes)): instances}
    arrays = {}
    for name, values in columns.items():
        array = one_pass_array(values, input_dtypes[name])
        if array is None:
            return None
        arrays[name] = array
    return arrays


_STACKED_ROWS = 128  # rows converted one by one, stacked into one array at a time


def _rows_one_by_one(instances: list, objects: bool, input_dtypes: dict) -> dict:
    """The rows converted one at a time (FillTensorMapFromInstancesList): slower, and raises
    TF Serving's error for the first row it refuses. Rows are stacked _STACKED_ROWS at a time,
    so no array per row outlives its slice (each costs about 200 bytes more than its values:
    json_costs.decode_cost does not count them)."""
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


def _parse_inputs(value, input_dtypes: dict) -> dict:
    """The columnar format (FillTensorMapFromInputsMap): each input a whole tensor."""
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
