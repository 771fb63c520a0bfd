"""ModelService/HandleReloadConfigRequest over loopback, as TF Serving's model_service_impl.cc
and ServerCore::ReloadConfig (server_core.cc) take a new ModelServerConfig: a ModelConfigList
only, checked before anything changes, in their words."""

import logging

import grpc
import numpy as np
import pytest
import tensorflow as tf
from google.protobuf import text_format
from tensorflow_serving.apis import (model_management_pb2, model_service_pb2_grpc, predict_pb2,
                                     prediction_service_pb2_grpc)

from serving_helpers import Server
from serving_models import save_half_plus_two, save_toy

TOY = 'config { name: "toy" base_path: "{toy}" model_platform: "tensorflow" }'
HALF = 'config { name: "half" base_path: "{half}" model_platform: "tensorflow" }'


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    root = tmp_path_factory.mktemp("reload")
    save_toy(str(root / "toy" / "2"), 3.0)
    save_half_plus_two(str(root / "half" / "123"))
    (root / "broken" / "1").mkdir(parents=True)
    (root / "broken" / "1" / "saved_model.pb").write_bytes(b"not a SavedModel")
    return root


def reload_request(text, **paths):
    """A request of the ModelServerConfig `text`, each "{name}" in it replaced by paths[name]."""
    for name, path in paths.items():
        text = text.replace("{" + name + "}", str(path))
    request = model_management_pb2.ReloadConfigRequest()
    text_format.Parse(text, request.config)
    return request


def predict(server, name, x):
    """The model's answer to one row, or the RpcError."""
    stub = prediction_service_pb2_grpc.PredictionServiceStub(server.channel)
    request = predict_pb2.PredictRequest()
    request.model_spec.name = name
    if name == "toy":
        request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.array([[x, x]], np.float32)))
    else:
        request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.array([x], np.float32)))
    try:
        response = stub.Predict(request, timeout=30)
    except grpc.RpcError as error:
        return error.code()
    return response.model_spec.version.value, tf.make_ndarray(response.outputs["y"]).ravel().tolist()


def test_a_reload_switches_the_served_model(models):
    server = Server(model_name="toy", model_base_path=str(models / "toy"))
    try:
        stub = model_service_pb2_grpc.ModelServiceStub(server.channel)
        assert predict(server, "toy", 1.0) == (2, [3.0, 3.0])
        request = reload_request(f"model_config_list {{ {HALF} }}", half=models / "half")
        request.metric_names.append("/tensorflow/serving/no_such_metric")
        response = stub.HandleReloadConfigRequest(request, timeout=60)
        assert response.status.error_code == 0 and response.status.error_message == ""
        assert [(m.name, m.WhichOneof("value_increase"), m.int64_value_increase) for m in response.metric] == \
            [("/tensorflow/serving/no_such_metric", "int64_value_increase", 0)]
        # The new model serves once the call returns (ServerCore waits for new models); the
        # one no longer listed is gone.
        assert predict(server, "half", 2.0) == (123, [3.0])
        assert predict(server, "toy", 1.0) == grpc.StatusCode.NOT_FOUND
    finally:
        server.close()


@pytest.fixture(scope="module")
def server(models):
    server = Server(model_name="toy", model_base_path=str(models / "toy"))
    yield server
    server.close()




@pytest.mark.parametrize("text, code, message", [
    ("", "INVALID_ARGUMENT", "ServerModelConfig type not supported by HandleReloadConfigRequest. Only "
     "ModelConfigList is currently supported"),
    ('custom_model_config { type_url: "x/y" }', "INVALID_ARGUMENT",
     "ServerModelConfig type not supported by HandleReloadConfigRequest. Only ModelConfigList is currently supported"),
    (f"model_config_list {{ {HALF} {TOY} {HALF} }}", "INVALID_ARGUMENT",
     "Illegal to list model half multiple times in config list"),
    ('model_config_list { config { name: "half" base_path: "relative/half" model_platform: "tensorflow" } }',
     "INVALID_ARGUMENT", "Expected model half to have an absolute path or URI; got base_path()=relative/half"),
    ('model_config_list { config { name: "toy" base_path: "{toy}" model_platform: "tensorflow_lite" } }',
     "INVALID_ARGUMENT", "Illegal to change a model's platform. For model toy platform was tensorflow and new "
     "platform requested is tensorflow_lite"),
    ('model_config_list { config { name: "toy" base_path: "{toy}" } }', "INVALID_ARGUMENT",
     "Illegal setting neither ModelServerConfig::model_type (deprecated) nor ModelServerConfig::model_platform, "
     "model name is toy"),
    ('model_config_list { config { name: "toy" base_path: "{toy}" model_type: TENSORFLOW '
     'model_platform: "tensorflow" } }', "INVALID_ARGUMENT", "Illegal setting both ModelServerConfig::model_type "
     "(deprecated) and ModelServerConfig::model_platform, model name is toy"),
    ('model_config_list { config { name: "half" base_path: "{half}" model_platform: "pytorch" } }',
     "INVALID_ARGUMENT", "Model half requests unsupported platform pytorch"),
    ('model_config_list { config { name: "toy" base_path: "{toy}" model_platform: "tensorflow" '
     'version_labels { key: "stable" value: 7 } } }', "FAILED_PRECONDITION",
     "Request to assign label to version 7 of model toy, which is not currently available for inference"),
])
def test_a_bad_config_is_refused_and_the_old_one_kept(server, models, caplog, text, code, message):
    stub = model_service_pb2_grpc.ModelServiceStub(server.channel)
    with caplog.at_level(logging.INFO, logger="serving"), pytest.raises(grpc.RpcError) as error:
        stub.HandleReloadConfigRequest(reload_request(text, toy=models / "toy", half=models / "half"), timeout=60)
    assert (error.value.code().name, error.value.details()) == (code, message)
    assert predict(server, "toy", 1.0) == (2, [3.0, 3.0])
    assert predict(server, "half", 2.0) == grpc.StatusCode.NOT_FOUND
    # One line, no traceback (model_service_impl.cc: LOG(ERROR) << "ReloadConfig failed: " ...).
    failed = [r for r in caplog.records if r.levelno >= logging.ERROR]
    assert [(r.getMessage(), r.exc_info) for r in failed] == [(f"ReloadConfig failed: {message}", None)]


def test_a_new_model_that_fails_to_load_fails_the_reload_after_its_retries(models):
    """ServerCore waits for every new model to be available or to have failed for good:
    UNKNOWN, naming each (the new config stays in force, as in TF Serving)."""
    server = Server(model_name="toy", model_base_path=str(models / "toy"), max_num_load_retries=0)
    try:
        stub = model_service_pb2_grpc.ModelServiceStub(server.channel)
        with pytest.raises(grpc.RpcError) as error:
            stub.HandleReloadConfigRequest(reload_request(
                f'model_config_list {{ {TOY} {HALF} config {{ name: "broken" base_path: "{{broken}}" '
                'model_platform: "tensorflow" } }', toy=models / "toy", half=models / "half",
                broken=models / "broken"), timeout=60)
        assert error.value.code() == grpc.StatusCode.UNKNOWN
        assert error.value.details().startswith(
            "1 model(s) did not become available: {{{name: broken version: 1} due to error: ")
        assert error.value.details().endswith("}, }")
        assert predict(server, "half", 2.0) == (123, [3.0])
        assert predict(server, "toy", 1.0) == (2, [3.0, 3.0])
    finally:
        server.close()
