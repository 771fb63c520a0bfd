"""PredictionService/MultiInference over loopback, as TF Serving's multi_inference.cc and
multi_inference_helper.cc run it: one model, one Input, each task a classify or regress
signature; their tests' messages (servables/tensorflow/multi_inference_test.cc)."""

import grpc
import pytest
from tensorflow_serving.apis import (classification_pb2, inference_pb2, prediction_service_pb2_grpc,
                                     regression_pb2)

from serving_helpers import Server, metric, rest
from serving_models import save_toy

CLASSIFY, REGRESS = "tensorflow/serving/classify", "tensorflow/serving/regress"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("multi")
    save_toy(str(root / "toy" / "1"), 2.0)
    save_toy(str(root / "toy" / "2"), 3.0)
    (root / "monitoring.config").write_text("prometheus_config { enable: true }")
    (root / "models.config").write_text(f'model_config_list {{ config {{ name: "toy" base_path: "{root / "toy"}" '
                                        'model_platform: "tensorflow" model_version_policy { all {} } } }')
    server = Server(model_config_file=str(root / "models.config"),
                    monitoring_config_file=str(root / "monitoring.config"))
    yield server
    server.close()


@pytest.fixture
def stub(server):
    return prediction_service_pb2_grpc.PredictionServiceStub(server.channel)


def fill_input(target):
    """Two examples sharing a context feature (bias 10)."""
    context = target.example_list_with_context
    context.context.features.feature["bias"].int64_list.value.append(10)
    context.examples.add().features.feature["x"].float_list.value.extend([0.0, 0.5])
    context.examples.add().features.feature["x"].float_list.value.extend([1.0, 2.0])


def multi_request(*tasks, name="toy", version=None):
    """A request of (signature, method) tasks on `name`, the first task pinned to `version`."""
    request = inference_pb2.MultiInferenceRequest()
    for signature, method in tasks:
        task = request.tasks.add(method_name=method)
        task.model_spec.name, task.model_spec.signature_name = name, signature
    if version is not None:
        request.tasks[0].model_spec.version.value = version
    fill_input(request.input)
    return request


@pytest.mark.parametrize("version", [None, 1])
def test_classify_and_regress_tasks_answer_as_classify_and_regress_do(stub, version):
    response = stub.MultiInference(multi_request(("classify", CLASSIFY), ("regress", REGRESS), version=version),
                                   timeout=30)
    classification = classification_pb2.ClassificationRequest()
    regression = regression_pb2.RegressionRequest()
    for request, signature in ((classification, "classify"), (regression, "regress")):
        request.model_spec.name, request.model_spec.signature_name = "toy", signature
        if version is not None:
            request.model_spec.version.value = version
        fill_input(request.input)
    classified, regressed = stub.Classify(classification, timeout=30), stub.Regress(regression, timeout=30)

    assert [r.WhichOneof("result") for r in response.results] == ["classification_result", "regression_result"]
    assert response.results[0].classification_result == classified.result
    assert response.results[1].regression_result == regressed.result
    scale = 3.0 if version is None else 2.0
    assert [r.value for r in regressed.result.regressions] == [0.5 * scale + 10, 3.0 * scale + 10]
    for result, signature in zip(response.results, ("classify", "regress")):
        assert (result.model_spec.name, result.model_spec.version.value, result.model_spec.signature_name) == \
            ("toy", version or 2, signature)


def test_the_examples_are_counted_once_per_request(server, stub):
    """multi_inference.cc records the request's examples once (RecordRequestExampleCount),
    however many tasks; prediction_service_impl.cc records no request count or latency."""
    page = lambda: rest(server.rest_port, "GET", "/monitoring/prometheus/metrics")[1].decode()  # noqa: E731
    before = page()
    stub.MultiInference(multi_request(("classify", CLASSIFY), ("regress", REGRESS)), timeout=30)
    after = page()
    total = ":tensorflow:serving:request_example_count_total"
    assert metric(after, total, model="toy") - metric(before, total, model="toy") == 2
    for name, labels in ((":tensorflow:serving:request_count", {"model_name": "toy", "status": "OK"}),
                         (":tensorflow:serving:request_latency_count", {"model_name": "toy"}),
                         (":tensorflow:serving:runtime_latency_count", {"model_name": "toy"})):
        assert metric(after, name, **labels) == metric(before, name, **labels), name


def renamed(index, name):
    def change(request):
        request.tasks[index].model_spec.name = name
        return request
    return change


def pinned(index, version=None, label=None):
    def change(request):
        spec = request.tasks[index].model_spec
        if version is not None:
            spec.version.value = version
        if label is not None:
            spec.version_label = label
        return request
    return change


def emptied(request):
    request.input.Clear()
    return request


@pytest.mark.parametrize("tasks, change, code, message", [
    ([], None, "INVALID_ARGUMENT", "ModelSpec has no name specified."),
    ([("classify", CLASSIFY), ("regress", REGRESS)], renamed(0, ""), "INVALID_ARGUMENT",
     "ModelSpec has no name specified."),
    ([("classify", CLASSIFY), ("regress", REGRESS)], renamed(1, ""), "INVALID_ARGUMENT",
     "Found ModelSpec with an empty model name."),
    ([("classify", CLASSIFY), ("regress", REGRESS)], renamed(1, "other"), "INVALID_ARGUMENT",
     "All ModelSpecs in a MultiInferenceRequest must access the same model name."),
    ([("classify", CLASSIFY), ("regress", REGRESS)], renamed(0, "nope"), "NOT_FOUND",
     "Servable not found for request: Latest(nope)"),
    ([("regress", REGRESS), ("regress", REGRESS)], None, "INVALID_ARGUMENT",
     "Duplicate evaluation of signature: regress"),
    ([("classify", CLASSIFY), ("nope", REGRESS)], None, "INVALID_ARGUMENT",
     "Requested signature not found in model graph: nope"),
    ([("classify", CLASSIFY), ("serving_default", "tensorflow/serving/predict")], None, "UNIMPLEMENTED",
     "Unsupported signature method_name: tensorflow/serving/predict"),
    ([("classify", "")], None, "UNIMPLEMENTED", "Unsupported signature method_name: "),
    ([("classify", CLASSIFY), ("strings", REGRESS)], None, "INVALID_ARGUMENT", "Expected one output Tensor."),
    ([("pair", CLASSIFY)], None, "INVALID_ARGUMENT", "Expected one input Tensor."),
    ([("regress", CLASSIFY)], None, "INVALID_ARGUMENT",
     'Expected classification signature outputs to contain at least one of "classes" or "scores". '),
    ([("classify", CLASSIFY), ("regress", REGRESS)], emptied, "INVALID_ARGUMENT", "Input is empty."),
    # tasks pinned to different versions: not run on the first task's silently
    ([("classify", CLASSIFY), ("regress", REGRESS)], lambda r: pinned(1, version=1)(pinned(0, version=2)(r)),
     "INVALID_ARGUMENT", "All ModelSpecs in a MultiInferenceRequest must access the same model version: task 1 "
     "names version 1, the first task version 2."),
    ([("classify", CLASSIFY), ("regress", REGRESS)], pinned(1, version=1), "INVALID_ARGUMENT",
     "All ModelSpecs in a MultiInferenceRequest must access the same model version: task 1 names version 1, "
     "the first task the latest version."),
    ([("classify", CLASSIFY), ("regress", REGRESS)], pinned(1, label="x" * 10**6), "INVALID_ARGUMENT",
     "All ModelSpecs in a MultiInferenceRequest must access the same model version: task 1 names label xxx"),
    # names a client sent are echoed cut to a few hundred characters
    ([("classify", CLASSIFY), ("x" * 10**6, REGRESS)], None, "INVALID_ARGUMENT",
     "Requested signature not found in model graph: " + "x" * 256 + "... (1000000 characters)"),
    ([("classify", CLASSIFY), ("regress", REGRESS)], lambda r: renamed(1, "y" * 10**6)(renamed(0, "y" * 10**6)(r)),
     "NOT_FOUND", "Servable not found for request: Latest(" + "y" * 256 + "... (1000000 characters))"),
    # every task is checked before the input
    ([("classify", CLASSIFY), ("nope", REGRESS)], emptied, "INVALID_ARGUMENT",
     "Requested signature not found in model graph: nope"),
])
def test_each_rule_answers_tf_servings_status(stub, tasks, change, code, message):
    request = multi_request(*tasks)
    if change is not None:
        request = change(request)
    with pytest.raises(grpc.RpcError) as error:
        stub.MultiInference(request, timeout=30)
    assert error.value.code().name == code
    assert error.value.details().startswith(message), error.value.details()[:500]
    assert len(error.value.details()) < 1000



def test_a_multi_inference_warmup_record_replays(tmp_path):
    """saved_model_warmup.cc replays a multi_inference_log as it replays the others; a record
    the model cannot take fails the version's load."""
    import tensorflow as tf
    from tensorflow_serving.apis import prediction_log_pb2

    from serving.manager import ModelManager
    from serving.source import ModelConfig
    from serving.warmup import WARMUP_FILE, replay_warmup_requests

    def write(version, request):
        save_toy(str(tmp_path / "toy" / str(version)), 1.0)
        (tmp_path / "toy" / str(version) / WARMUP_FILE).parent.mkdir()
        with tf.io.TFRecordWriter(str(tmp_path / "toy" / str(version) / WARMUP_FILE)) as writer:
            writer.write(prediction_log_pb2.PredictionLog(
                multi_inference_log=prediction_log_pb2.MultiInferenceLog(request=request)).SerializeToString())

    write(1, multi_request(("classify", CLASSIFY), ("regress", REGRESS)))
    store = ModelManager([ModelConfig(name="toy", base_path=str(tmp_path / "toy"))])
    store.poll()
    assert store.status("toy").model_version_status[0].status.error_code == 0
    assert replay_warmup_requests(store.get("toy")) == 1
    write(2, multi_request(("classify", CLASSIFY), ("nope", REGRESS)))
    store.poll()
    status = store.status("toy", 2).model_version_status[0].status
    assert (status.error_code, status.error_message) == (13, "Requested signature not found in model graph: nope")
