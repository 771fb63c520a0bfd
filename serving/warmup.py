"""SavedModel warm-up records, read and replayed as TF Serving does.

A version may carry `assets.extra/tf_serving_warmup_requests`: a TFRecord file of
`PredictionLog` protos, written by whoever exported it. TF Serving replays them when
it loads the version, before it marks the version AVAILABLE, so that no client pays
for the first call of a signature (function instantiation and graph optimisation:
about 0.5 s for the kerasbert text signatures here).

Example:
    >>> [request.model_spec.signature_name for request in read_warmup_requests(servable.path)]
    ['serving_default']
    >>> replay_warmup_requests(servable)  # runs each once; returns how many ran
    1
"""

from __future__ import annotations

import os

import tensorflow as tf
from tensorflow_serving.apis import classification_pb2, inference_pb2, predict_pb2, prediction_log_pb2

from serving import classify_regress

WARMUP_FILE = os.path.join("assets.extra", "tf_serving_warmup_requests")
MAX_RECORDS = 1000  # TF Serving's limit on warm-up records per version

def read_warmup_requests(version_dir: str) -> list:
    """The requests of a version's warm-up file ([] if it has none)."""
    path = os.path.join(version_dir, WARMUP_FILE)
    if not os.path.isfile(path):
        return []
    requests = []
    for index, record in enumerate(tf.data.TFRecordDataset(path)):
        if index == MAX_RECORDS:
            raise ValueError(f"{path}: more than {MAX_RECORDS} warm-up records")
        log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
        kind = log.WhichOneof("log_type")
        if kind not in ("predict_log", "classify_log", "regress_log", "multi_inference_log"):
            raise ValueError(f"{path}: record {index}: unsupported warm-up log type {kind!r}")
        requests.append(getattr(log, kind).request)
    return requests


def replay_warmup_requests(servable, check_method_name: bool = False) -> int:
    """Runs each warm-up request once against `servable`; returns how many ran."""
    requests = read_warmup_requests(servable.path)
    for request in requests:
        if isinstance(request, inference_pb2.MultiInferenceRequest):  # saved_model_warmup.cc RunMultiInference
            classify_regress.multi_inference(servable, request, check_method_name)
            continue
        signature = request.model_spec.signature_name or "serving_default"
        if isinstance(request, predict_pb2.PredictRequest):
            inputs = {key: tf.make_ndarray(proto) for key, proto in request.inputs.items()}
            servable.run(signature, servable.check_inputs(signature, inputs))
        elif isinstance(request, classification_pb2.ClassificationRequest):
            classify_regress.classify(servable, signature, request.input, check_method_name)
        else:
            classify_regress.regress(servable, signature, request.input, check_method_name)
    return len(requests)
