"""A version served from its `model.tflite`, as TF Serving's TfLiteSession serves it with
--prefer_tflite_model: TensorFlow's TFLite interpreter, a pool of them (--num_tflite_pools),
and the model's SignatureDefs from its `signature_defs_metadata` (what TFLite's
signature_def_util writes), or one `serving_default` made from its input and output tensors.
Each call resizes the inputs to the arrays fed, as TfLiteSession::Run does, so the shapes
are the interpreter's to judge.

Example:
    >>> servable = TfLiteServable("half_plus_two", 123, half_plus_two_tflite)  # a folder of model.tflite
    >>> servable.run("serving_default", servable.check_inputs("serving_default", {"x": [2.0]}))
    {'y': array([3.], dtype=float32)}
"""

from __future__ import annotations

import logging
import os
import queue
import warnings

import flatbuffers.flexbuffers as flexbuffers
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import meta_graph_pb2
from tensorflow.lite.python import schema_py_generated as tflite_schema

from serving.servable import Signatures
from serving.status import InvalidArgument, TensorFlowError

log = logging.getLogger(__name__)

MODEL_FILE = "model.tflite"
SIGNATURE_METADATA = b"signature_defs_metadata"
PREDICT_METHOD = "tensorflow/serving/predict"


def has_tflite_model(path: str) -> bool:
    return os.path.isfile(os.path.join(path, MODEL_FILE))


def metadata_signature_defs(model: bytes) -> dict[str, meta_graph_pb2.SignatureDef]:
    """The SignatureDefs kept in a TFLite model's `signature_defs_metadata` buffer (a
    flexbuffer map of name -> serialized SignatureDef); {} if it has none."""
    root = tflite_schema.Model.GetRootAsModel(model, 0)
    for i in range(root.MetadataLength()):
        metadata = root.Metadata(i)
        if metadata.Name() != SIGNATURE_METADATA:
            continue
        entries = flexbuffers.GetRoot(root.Buffers(metadata.Buffer()).DataAsNumpy().tobytes()).AsMap
        signatures = {}
        for key, value in zip(entries.Keys, entries.Values):
            signature = meta_graph_pb2.SignatureDef()
            signature.ParseFromString(bytes(value.AsBlob) if value.IsBlob else value.AsStringBytes)
            signatures[key.AsKey] = signature
        return signatures
    return {}


def legacy_name(tensor_name: str) -> str:
    """TfToTfLiteLegacyTensorName: TF's `x:0` as early TFLite converters named it, `x`."""
    return tensor_name.split(":", 1)[0]


def tensor_info(detail: dict) -> meta_graph_pb2.TensorInfo:
    info = meta_graph_pb2.TensorInfo(name=detail["name"], dtype=tf.as_dtype(detail["dtype"]).as_datatype_enum)
    for size in detail["shape"]:
        info.tensor_shape.dim.add(size=int(size))
    return info


class TfLiteServable(Signatures):
    """One version from its model.tflite, run by `num_interpreters` interpreters (one call each
    at a time)."""

    def __init__(self, name: str, version: int, path: str, num_interpreters: int = 1):
        self.name, self.version, self.path = name, version, path
        with open(os.path.join(path, MODEL_FILE), "rb") as f:
            model = f.read()
        self._interpreters: queue.Queue = queue.Queue()
        with warnings.catch_warnings():  # tf.lite.Interpreter's notice of ai_edge_litert
            warnings.simplefilter("ignore")
            for _ in range(max(1, num_interpreters)):
                interpreter = tf.lite.Interpreter(model_content=model)
                interpreter.allocate_tensors()
                self._interpreters.put(interpreter)
        interpreter = self._interpreters.queue[0]
        self._inputs = {d["name"]: d for d in interpreter.get_input_details()}
        self._outputs = {d["name"]: d for d in interpreter.get_output_details()}
        self.signature_defs = self._signature_defs(model)

    def _signature_defs(self, model: bytes) -> dict[str, meta_graph_pb2.SignatureDef]:
        """TfLiteSession::Create: the metadata's SignatureDefs, their tensor names fixed to the
        interpreter's (FixTfLiteTensorName), or one serving_default of every input and output."""
        signatures = metadata_signature_defs(model)
        if not signatures:
            log.warning("No signature def found in TFLite model. Generating one.")
            signature = meta_graph_pb2.SignatureDef(method_name=PREDICT_METHOD)
            for key, detail in self._inputs.items():
                signature.inputs[legacy_name(key)].CopyFrom(tensor_info(detail))
            for key, detail in self._outputs.items():
                signature.outputs[legacy_name(key)].CopyFrom(tensor_info(detail))
            return {tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY: signature}
        for name, signature in signatures.items():
            for kind, known in (("input", self._inputs), ("output", self._outputs)):
                for alias, info in getattr(signature, kind + "s").items():
                    if info.name not in known and legacy_name(info.name) not in known:
                        raise ValueError(f"Signature {kind} {alias} references an unknown tensor: "
                                         f"Unknown tensor '{info.name}'.")
                    if info.name not in known:
                        info.name = legacy_name(info.name)
        return signatures

    def run(self, signature: str, arrays: dict[str, np.ndarray], deadline: float | None = None) -> dict[str, np.ndarray]:
        """One call on a free interpreter: inputs resized to the arrays fed, then invoked.
        (`deadline` is not handed to TFLite, which has no timeout; it is checked before.)"""
        definition = self.signature(signature)
        interpreter = self._interpreters.get()
        try:
            feeds = [(self._inputs[definition.inputs[key].name]["index"], array) for key, array in arrays.items()]
            resized = False
            for index, array in feeds:
                if tuple(interpreter.get_tensor(index).shape) != array.shape:
                    interpreter.resize_tensor_input(index, list(array.shape), strict=False)
                    resized = True
            if resized:
                interpreter.allocate_tensors()
            for index, array in feeds:
                interpreter.set_tensor(index, array)
            interpreter.invoke()
            return {key: interpreter.get_tensor(self._outputs[info.name]["index"]).copy()
                    for key, info in sorted(definition.outputs.items())}
        except ValueError as error:  # what the interpreter refuses: a shape, a dtype
            raise InvalidArgument(str(error)) from None
        except RuntimeError as error:
            raise TensorFlowError(tf.errors.InternalError(None, None, str(error))) from None
        finally:
            self._interpreters.put(interpreter)

    def close(self) -> None:
        pass
