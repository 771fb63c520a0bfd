"""A servable: one loaded version of a model (a SavedModel), as TF Serving's
SavedModelBundle is: its signatures, the dtypes and shapes they take, the check of a
request's inputs against them, and one call of a signature. What loads it and when is the
manager's (serving/manager.py).

Example:
    >>> servable = Servable("kerasbert", 1, "saved_models/kerasbert/1")
    >>> servable.run("sentiment", servable.check_inputs("sentiment", {"text": np.array([b"great"], object)}))
    {'label': array([...]), 'probabilities': array([[...]], dtype=float32)}
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

from serving.status import InvalidArgument, TensorFlowError, tf_error_message


def program_key(path: str) -> tuple | None:
    """What two versions share when one may reuse the other's loaded graph.

    None when the SavedModel has no fingerprint.pb (written since TF 2.12).
    """
    try:
        fingerprint = tf.saved_model.experimental.read_fingerprint(path)
    except (FileNotFoundError, tf.errors.NotFoundError):
        return None
    assets = hashlib.sha256()
    for folder, _, files in sorted(os.walk(os.path.join(path, "assets"))):
        for file in sorted(files):
            assets.update(os.path.relpath(os.path.join(folder, file), path).encode())
            with open(os.path.join(folder, file), "rb") as f:
                assets.update(hashlib.sha256(f.read()).digest())
    return (fingerprint.graph_def_program_hash, fingerprint.signature_def_hash,
            fingerprint.saved_object_graph_hash, assets.hexdigest())


def serving_meta_graph(path: str, tags: tuple[str, ...] = ("serve",)):
    """The MetaGraphDef of the SavedModel at `path` whose tags are `tags`, read from its proto
    (the schema TF Serving reads too) rather than through TF's private saved_model_utils."""
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    for meta_graph in saved_model.meta_graphs:
        if set(meta_graph.meta_info_def.tags) == set(tags):
            return meta_graph
    found = [sorted(m.meta_info_def.tags) for m in saved_model.meta_graphs]
    raise ValueError(f"{path}: MetaGraphDef associated with tags {sorted(tags)} could not be found in "
                     f"SavedModel (it has {found})")


class Servable:
    """One loaded version: its signatures and their input/output dtypes.

    With `loaded` (an object tf.saved_model.load returned for a version with the same
    program_key), the version's weights are restored into it instead of loading anew.
    """

    def __init__(self, name: str, version: int, path: str, loaded=None, tags: tuple[str, ...] = ("serve",)):
        self.name, self.version, self.path = name, version, path
        self.meta_graph = serving_meta_graph(path, tags)  # first: a missing tag set fails here, clearly
        if loaded is None:
            loaded = tf.saved_model.load(path, tags=list(tags))
        else:
            variables = os.path.join(path, "variables", "variables")
            tf.train.Checkpoint(root=loaded).read(variables).assert_existing_objects_matched()
        self.loaded = loaded
        self.signature_defs = self.meta_graph.signature_def

    def signature_names(self) -> list[str]:
        """The signatures a request can name (not the SavedModel's __saved_model_init_op)."""
        return sorted(name for name in self.signature_defs if not name.startswith("__"))

    def signature(self, name: str):
        if name not in self.loaded.signatures:
            raise InvalidArgument(f"Serving signature name: \"{name}\" not found in signature def (the model's "
                                  f"signatures: {', '.join(self.signature_names())})")
        return self.loaded.signatures[name]

    def input_specs(self, name: str) -> dict[str, tf.TensorSpec]:
        return dict(sorted(self.signature(name).structured_input_signature[1].items()))

    def input_dtypes(self, name: str) -> dict[str, tf.DType]:
        return {key: spec.dtype for key, spec in self.input_specs(name).items()}

    def output_dtypes(self, name: str) -> dict[str, tf.DType]:
        return {key: spec.dtype for key, spec in self.signature(name).structured_outputs.items()}

    def check_inputs(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """`inputs` as arrays of the signature's dtypes; InvalidArgument for a wrong name, type
        or shape. Arrays that already have the right dtype are not copied.

        A batching server checks each request so, before it joins a batch: one bad request
        must not fail the others it would be batched with.
        """
        specs = self.input_specs(signature)
        check_input_names(specs, inputs)
        arrays = {}
        for key, spec in specs.items():
            array = inputs[key]
            wanted = object if spec.dtype == tf.string else spec.dtype.as_numpy_dtype
            if not isinstance(array, np.ndarray) or array.dtype != wanted:
                try:
                    array = tf.constant(array, dtype=spec.dtype).numpy()
                except (TypeError, ValueError) as error:
                    raise InvalidArgument(f"Input {key}: {error}") from None
            if not spec.shape.is_compatible_with(array.shape):
                raise InvalidArgument(f"Input {key}: shape {list(array.shape)} does not match the "
                                      f"signature's {spec.shape.as_list()}")
            arrays[key] = array
        return arrays

    def run(self, signature: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One call of the signature on arrays that check_inputs returned."""
        function = self.signature(signature)
        try:
            outputs = function(**{key: tf.constant(array) for key, array in arrays.items()})
        except tf.errors.OpError as error:  # its own status: InvalidArgument, ResourceExhausted, ...
            raise TensorFlowError(error) from None
        except (TypeError, ValueError) as error:
            raise InvalidArgument(tf_error_message(error)) from None
        return {key: value.numpy() for key, value in outputs.items()}


def check_input_names(expected, sent) -> None:
    """TF Serving's checks of a request's input names (predict_util.cc VerifyRequestInputsSize,
    then saved_model GetInputValues): the counts first, then each name sent."""
    expected, sent = sorted(expected), sorted(sent)
    if len(sent) != len(expected):
        extra = [name for name in sent if name not in expected]
        missing = [name for name in expected if name not in sent]
        raise InvalidArgument(
            f"input size does not match signature: {len(sent)}!={len(expected)} len({{{','.join(sent)}}}) != "
            f"len({{{','.join(expected)}}}). Sent extra: {{{','.join(extra)}}}. Missing but required: "
            f"{{{','.join(missing)}}}.")
    for name in sent:
        if name not in expected:
            raise InvalidArgument(f"input tensor alias not found in signature: {name}. Inputs expected to be in "
                                  f"the set {{{','.join(expected)}}}.")
