"""A servable: one loaded version of a model, as TF Serving's SavedModelBundle is: the
MetaGraphDef with the serving tags, its SignatureDefs, and a TensorFlow session on its graph
(TF1- and TF2-written SavedModels alike). A request's inputs are checked by name and dtype
only, as TF Serving's predict_util.cc does; the graph decides what shapes it takes, and a
shape it cannot take is the op's own error (INVALID_ARGUMENT). What loads it and when is
the manager's (serving/manager.py); a `model.tflite` is served by serving/tflite.py instead.

Example:
    >>> servable = Servable("toy", 1, f"{toy_models}/1")  # tests/serving_models.py's save_toy: y = 2 x
    >>> servable.signature_names()
    ['classify', 'pair', 'regress', 'serving_default', 'strings']
    >>> servable.run("serving_default", servable.check_inputs("serving_default", {"x": [[1.0, 2.0]]}))["y"]
    array([[2., 4.]], dtype=float32)
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
import time
from typing import NamedTuple

import grpc
import numpy as np
import tensorflow as tf
from google.protobuf import message
from tensorflow.core.protobuf import config_pb2, saved_model_pb2
from tensorflow.python.client import pywrap_tf_session as tf_session

from serving.protos import status_error
from serving.row_costs import load_row_costs
from serving.status import InvalidArgument, TensorFlowError, shown, tf_error_message

INIT_OP_SIGNATURE = "__saved_model_init_op"  # a SignatureDef no request can name


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


MAX_PROTO_BYTES = 2**31 - 1  # protobuf parses no message larger (CodedInputStream's limit)


def serving_meta_graph(path: str, tags: tuple[str, ...] = ("serve",)):
    """The MetaGraphDef of the SavedModel at `path` whose tags are `tags`, read from its proto
    (the schema TF Serving reads too) rather than through TF's private saved_model_utils.

    A saved_model.pb over protobuf's 2 GiB cannot be a SavedModel: refused before a byte is
    read (a sparse 3 GB file was read whole, +2.9 GB a load try), with TF's own error for it
    and for one that does not parse (ReadBinaryProto: DATA_LOSS "Can't parse <path> as binary
    proto")."""
    file = os.path.join(path, "saved_model.pb")
    if os.path.getsize(file) > MAX_PROTO_BYTES:
        raise status_error(grpc.StatusCode.DATA_LOSS, f"Can't parse {file} as binary proto")
    saved_model = saved_model_pb2.SavedModel()
    with open(file, "rb") as f:
        try:
            saved_model.ParseFromString(f.read())
        except message.DecodeError:
            raise status_error(grpc.StatusCode.DATA_LOSS, f"Can't parse {file} as binary proto") from None
    for meta_graph in saved_model.meta_graphs:
        if set(meta_graph.meta_info_def.tags) == set(tags):
            return meta_graph
    found = [sorted(m.meta_info_def.tags) for m in saved_model.meta_graphs]
    raise ValueError(f"{path}: MetaGraphDef associated with tags {sorted(tags)} could not be found in "
                     f"SavedModel (it has {found})")


class Bundle(NamedTuple):
    """TF Serving's SavedModelBundle: a session on the graph of one MetaGraphDef."""
    graph: tf.Graph
    session: tf.compat.v1.Session


def load_bundle(path: str, tags: tuple[str, ...], config: config_pb2.ConfigProto | None = None) -> Bundle:
    """Imports the MetaGraphDef tagged `tags`, restores its variables and runs its init op
    (TF's loader, as TF Serving's LoadSavedModel), in a session of its own."""
    graph = tf.Graph()
    session = tf.compat.v1.Session(graph=graph, config=config)
    logger = tf.get_logger()
    level = logger.level
    logger.setLevel(logging.ERROR)  # the v1 loader's deprecation notice: this is its intended use
    try:
        with graph.as_default():
            tf.compat.v1.saved_model.loader.load(session, list(tags), path)
    except BaseException:
        session.close()
        raise
    finally:
        logger.setLevel(level)
    graph.finalize()  # nothing is added to a served graph: each call runs tensors already in it
    return Bundle(graph, session)


def restore_variables(bundle: Bundle, meta_graph, path: str) -> None:
    """Restores the variables of the version at `path` into `bundle` (one loaded from the same
    program), through the graph's own saver."""
    saver = meta_graph.saver_def
    if not saver.restore_op_name:
        raise ValueError(f"{path}: the SavedModel has no saver, so its variables cannot be restored into "
                         "a loaded copy")
    bundle.session.run(saver.restore_op_name,
                       {saver.filename_tensor_name: os.path.join(path, "variables", "variables")})


class Signatures:
    """What a servable answers from its SignatureDefs alone: their names, the dtypes and ranks
    they declare, and the check of a request's inputs. A subclass sets `signature_defs` (name ->
    SignatureDef) and runs a signature (`run`)."""

    signature_defs: dict

    def signature_names(self) -> list[str]:
        """The signatures a request can name (not the SavedModel's __saved_model_init_op)."""
        return sorted(name for name in self.signature_defs if name != INIT_OP_SIGNATURE)

    def signature(self, name: str):
        """The SignatureDef named `name`; InvalidArgument, listing the others, if there is none."""
        if name not in self.signature_defs or name == INIT_OP_SIGNATURE:
            raise InvalidArgument(f"Serving signature name: \"{shown(name)}\" not found in signature def (the model's "
                                  f"signatures: {', '.join(self.signature_names())})")
        return self.signature_defs[name]

    def input_dtypes(self, name: str) -> dict[str, tf.DType]:
        return {key: tf.as_dtype(info.dtype) for key, info in sorted(self.signature(name).inputs.items())}

    def output_dtypes(self, name: str) -> dict[str, tf.DType]:
        return {key: tf.as_dtype(info.dtype) for key, info in sorted(self.signature(name).outputs.items())}

    def output_ranks(self, name: str) -> dict[str, int | None]:
        """Each output's rank as the SignatureDef declares it (None: unknown, or no shape at all,
        as in SignatureDefs older TF wrote)."""
        return {key: len(info.tensor_shape.dim) if info.HasField("tensor_shape") and not info.tensor_shape.unknown_rank
                else None for key, info in sorted(self.signature(name).outputs.items())}

    def check_inputs(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """`inputs` as arrays of the signature's dtypes; InvalidArgument for a wrong name or a
        value that is not of its type. Shapes are the graph's to judge, as in TF Serving.
        Arrays that already have the right dtype are not copied.

        A batching server checks each request so, before it joins a batch: one bad request
        must not fail the others it would be batched with.
        """
        dtypes = self.input_dtypes(signature)
        check_input_names(dtypes, inputs)
        return {key: as_array(key, inputs[key], dtype) for key, dtype in dtypes.items()}


class Servable(Signatures):
    """One loaded version of a SavedModel: its signatures, and a session that runs them.

    With `loaded` (the Bundle of a version with the same program_key), the version's weights
    are restored into it instead of loading anew. `session_config`: the ConfigProto of the
    session (thread pools; TF Serving's --tensorflow_*_parallelism).
    """

    def __init__(self, name: str, version: int, path: str, loaded: Bundle | None = None,
                 tags: tuple[str, ...] = ("serve",), session_config: config_pb2.ConfigProto | None = None):
        self.name, self.version, self.path = name, version, path
        meta_graph = serving_meta_graph(path, tags)  # first: a missing tag set fails here, clearly
        if loaded is None:
            loaded = load_bundle(path, tags, session_config)
        else:
            restore_variables(loaded, meta_graph, path)
        self.loaded = loaded
        self.signature_defs = meta_graph.signature_def
        self.row_costs = load_row_costs(path)  # {signature: {input: StringCost}} it declares
        self._fetched: dict[str, tuple] = {}  # signature -> _fetches(signature)
        self._lock = threading.Lock()

    def _fetches(self, signature: str):
        """(input names, fed tensors, output names, fetched tensors) of a signature, in the
        order a session run takes them; resolved once per signature."""
        with self._lock:
            if signature not in self._fetched:
                definition = self.signature(signature)
                graph = self.loaded.graph
                inputs, outputs = sorted(definition.inputs), sorted(definition.outputs)
                fed = [graph.get_tensor_by_name(definition.inputs[key].name)._as_tf_output() for key in inputs]
                fetched = [graph.get_tensor_by_name(definition.outputs[key].name)._as_tf_output() for key in outputs]
                self._fetched[signature] = inputs, fed, outputs, fetched
            return self._fetched[signature]

    def run(self, signature: str, arrays: dict[str, np.ndarray], deadline: float | None = None) -> dict[str, np.ndarray]:
        """One call of the signature on arrays that check_inputs returned. With `deadline`
        (time.monotonic()), the call is given what is left of it (RunOptions.timeout_in_ms,
        as TF Serving hands a request's deadline to its session): past it, TensorFlow stops
        the call with DEADLINE_EXCEEDED."""
        inputs, fed, outputs, fetched = self._fetches(signature)
        options = None
        if deadline is not None:
            options = config_pb2.RunOptions(timeout_in_ms=max(1, int((deadline - time.monotonic()) * 1000)))
        try:
            values = run_session(self.loaded.session, dict(zip(fed, (arrays[key] for key in inputs))), fetched,
                                 options)
        except tf.errors.OpError as error:  # its own status: InvalidArgument, ResourceExhausted, ...
            raise TensorFlowError(error) from None
        except UnicodeDecodeError as error:  # the op's message echoed bytes that are not UTF-8 (a bad
            # serialized Example: "Could not parse example input, value: '...'"), so it never
            # became its OpError; its bytes are the message, kept with the bad bytes escaped
            raise InvalidArgument(tf_error_message(ValueError(error.object.decode("utf-8", "backslashreplace")))) \
                from None
        except (TypeError, ValueError) as error:
            raise InvalidArgument(tf_error_message(error)) from None
        return {key: np.asarray(value) for key, value in zip(outputs, values)}

    def close(self) -> None:
        """Frees the session (its variables); only for a servable no request holds."""
        self.loaded.session.close()


def run_session(session: tf.compat.v1.Session, feeds: dict, fetches: list, options=None) -> list:
    """The session's C++ run on `feeds` (TF_Output -> array), as TF Serving calls Session::Run.

    Not Session.run: it checks a fed array's shape against the placeholder's in Python, which
    the C++ session does not (a feed replaces the placeholder), so TF Serving feeds [1] to a
    [None, 1] input and the graph decides. tests/test_servable.py holds this to that.
    """
    buffer = tf_session.TF_NewBufferFromString(options.SerializeToString()) if options is not None else None
    try:
        return session._call_tf_sessionrun(buffer, feeds, fetches, [], None)
    finally:
        if buffer is not None:
            tf_session.TF_DeleteBuffer(buffer)


def as_array(key: str, value, dtype: tf.DType) -> np.ndarray:
    """`value` as an array of `dtype` (object for strings), not copied if it already is one."""
    wanted = object if dtype == tf.string else dtype.as_numpy_dtype
    if isinstance(value, np.ndarray) and value.dtype == wanted:
        return value
    try:
        return tf.constant(value, dtype=dtype).numpy()
    except (TypeError, ValueError) as error:
        raise InvalidArgument(f"Input {key}: {error}") from None


def check_input_names(expected, sent) -> None:
    """TF Serving's checks of a request's input names (predict_util.cc VerifyRequestInputsSize,
    then saved_model GetInputValues): the counts first, then each name sent."""
    expected, sent = sorted(expected), sorted(sent)
    if len(sent) != len(expected):
        extra = [name for name in sent if name not in expected]
        missing = [name for name in expected if name not in sent]
        raise InvalidArgument(
            f"input size does not match signature: {len(sent)}!={len(expected)} len({{{shown(','.join(sent))}}}) != "
            f"len({{{','.join(expected)}}}). Sent extra: {{{shown(','.join(extra))}}}. Missing but required: "
            f"{{{','.join(missing)}}}.")
    for name in sent:
        if name not in expected:
            raise InvalidArgument(f"input tensor alias not found in signature: {shown(name)}. Inputs expected to be in "
                                  f"the set {{{','.join(expected)}}}.")
