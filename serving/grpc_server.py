"""TF Serving's gRPC services (PredictionService, ModelService) over the shared model store.

Clients use the official stubs unchanged:
    >>> stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel("127.0.0.1:8500"))
    >>> request = predict_pb2.PredictRequest()
    >>> request.model_spec.name = "kerasbert"; request.model_spec.signature_name = "sentiment"
    >>> request.inputs["text"].CopyFrom(tf.make_tensor_proto(["a fine film"]))
    >>> stub.Predict(request, timeout=10.0).outputs["label"]
"""

from __future__ import annotations

import concurrent.futures
import logging

import grpc
import tensorflow as tf
from tensorflow_serving.apis import (classification_pb2, model_service_pb2_grpc, predict_pb2,
                                     prediction_service_pb2_grpc, regression_pb2)

from serving import examples, json_tensor
from serving.model_store import ModelStore
from serving.status import InvalidArgument, grpc_code

log = logging.getLogger(__name__)

def _spec(model_spec):
    version = model_spec.version.value if model_spec.HasField("version") else None
    label = model_spec.version_label or None
    return model_spec.name, version, label


def _abort(context, error: Exception):
    code = grpc_code(error)
    if code == grpc.StatusCode.INTERNAL:
        log.exception("internal error")
    context.abort(code, str(error))


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self, store: ModelStore, predictor):
        self.store, self.predictor = store, predictor

    def Predict(self, request, context):
        try:
            name, version, label = _spec(request.model_spec)
            servable = self.store.get(name, version, label)
            signature = request.model_spec.signature_name or "serving_default"
            dtypes = servable.input_dtypes(signature)
            inputs = {}
            for key, proto in request.inputs.items():
                if key in dtypes and tf.as_dtype(proto.dtype) != dtypes[key]:
                    raise InvalidArgument(
                        f"Expects arg[{key}] to be {json_tensor.dtype_name(dtypes[key])} but "
                        f"{json_tensor.dtype_name(tf.as_dtype(proto.dtype))} is provided")
                inputs[key] = tf.make_ndarray(proto)
            wanted = set(request.output_filter)
            outputs = self.predictor(servable, signature, inputs)
            response = predict_pb2.PredictResponse()
            response.model_spec.name = name
            response.model_spec.version.value = servable.version
            response.model_spec.signature_name = signature
            for key, value in outputs.items():
                if not wanted or key in wanted:
                    response.outputs[key].CopyFrom(tf.make_tensor_proto(value))
            return response
        except Exception as error:
            _abort(context, error)

    def GetModelMetadata(self, request, context):
        try:
            if list(request.metadata_field) != ["signature_def"]:
                raise InvalidArgument("Metadata field signature_def is the only one supported")
            return self.store.metadata(*_spec(request.model_spec))
        except Exception as error:
            _abort(context, error)

    def Classify(self, request, context):
        return self._examples(request, context, examples.classify, classification_pb2.ClassificationResponse())

    def Regress(self, request, context):
        return self._examples(request, context, examples.regress, regression_pb2.RegressionResponse())

    def _examples(self, request, context, run, response):
        try:
            name, version, label = _spec(request.model_spec)
            servable = self.store.get(name, version, label)
            signature = request.model_spec.signature_name or "serving_default"
            response.result.CopyFrom(run(servable, signature, request.input,
                                         self.store.signature_method_name_check))
            response.model_spec.name = name
            response.model_spec.version.value = servable.version
            response.model_spec.signature_name = signature
            return response
        except Exception as error:
            _abort(context, error)


class ModelService(model_service_pb2_grpc.ModelServiceServicer):
    def __init__(self, store: ModelStore):
        self.store = store

    def GetModelStatus(self, request, context):
        try:
            return self.store.status(*_spec(request.model_spec))
        except Exception as error:
            _abort(context, error)


def make_grpc_server(store: ModelStore, port: int, predictor, host: str = "127.0.0.1",
                     max_workers: int = 32, max_message_bytes: int = 64 * 1024 * 1024):
    """A started gRPC server on host:port; returns (server, bound port)."""
    options = [("grpc.max_receive_message_length", max_message_bytes),
               ("grpc.max_send_message_length", max_message_bytes)]
    server = grpc.server(concurrent.futures.ThreadPoolExecutor(max_workers=max_workers), options=options)
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(PredictionService(store, predictor), server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(store), server)
    bound = server.add_insecure_port(f"{host}:{port}")
    server.start()
    return server, bound
