"""Warm-up records for an exported version, in the format TF Serving replays.

`<version>/assets.extra/tf_serving_warmup_requests` is a TFRecord file of `PredictionLog`
protos (at most 1,000). TF Serving (and `python -m serving`) runs each one when it loads
the version, before it serves it, so no client pays for a signature's first call.

Example:
    >>> version = f"{tmp_path}/saved_models/kerasbert/1"  # an exported version
    >>> write_warmup_requests(version, [predict_request("sentiment", {"text": [b"a fine film"]})])
    '.../saved_models/kerasbert/1/assets.extra/tf_serving_warmup_requests'
"""

from __future__ import annotations

import os

import tensorflow as tf
from tensorflow_serving.apis import classification_pb2, predict_pb2, prediction_log_pb2, regression_pb2

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")

_LOG_FIELDS = {predict_pb2.PredictRequest: "predict_log", classification_pb2.ClassificationRequest: "classify_log",
               regression_pb2.RegressionRequest: "regress_log"}


def predict_request(signature: str, inputs: dict) -> predict_pb2.PredictRequest:
    """A PredictRequest for `signature`, each input (a list or array) as a TensorProto."""
    request = predict_pb2.PredictRequest()
    request.model_spec.signature_name = signature
    for key, value in inputs.items():
        request.inputs[key].CopyFrom(tf.make_tensor_proto(value))
    return request


def write_warmup_requests(export_dir: str, requests: list) -> str:
    """Writes Predict/Classification/Regression requests as the version's warm-up file, the
    same bytes for the same requests (inputs serialized in a fixed order)."""
    path = os.path.join(export_dir, WARMUP_FILE)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with tf.io.TFRecordWriter(path) as writer:
        for request in requests:
            log = prediction_log_pb2.PredictionLog()
            getattr(log, _LOG_FIELDS[type(request)]).request.CopyFrom(request)
            writer.write(log.SerializeToString(deterministic=True))  # map entries in key order: exports repeat byte for byte
    return path
