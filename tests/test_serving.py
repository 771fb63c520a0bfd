"""The local TF Serving stand-in over loopback: REST and gRPC, errors, versions, hot loading."""

import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import (classification_pb2, get_model_metadata_pb2, get_model_status_pb2,
                                     model_service_pb2_grpc, predict_pb2, prediction_service_pb2_grpc,
                                     regression_pb2)

from conftest import ROOT
from serving.__main__ import parse_flags
from serving_models import save_toy
from helpers import free_ports
from serving_helpers import Server


@pytest.fixture(scope="module")
def model_base(tmp_path_factory):
    base = tmp_path_factory.mktemp("models") / "toy"
    save_toy(str(base / "1"), 2.0)
    save_toy(str(base / "2"), 3.0)
    return base


@pytest.fixture(scope="module")
def server(model_base):
    server = Server(model_name="toy", model_base_path=str(model_base))
    yield server
    server.close()


def test_status_and_metadata(server):
    code, body, content_type = server.request("/v1/models/toy")
    assert code == 200 and content_type == "application/json"
    assert body == {"model_version_status": [{"version": "2", "state": "AVAILABLE",
                                              "status": {"error_code": "OK", "error_message": ""}}]}
    code, body, _ = server.request("/v1/models/toy/metadata")
    assert code == 200 and body["model_spec"] == {"name": "toy", "version": "2", "signature_name": ""}
    signatures = body["metadata"]["signature_def"]["signature_def"]
    assert {"serving_default", "strings", "pair", "classify", "__saved_model_init_op"} <= set(signatures)
    assert signatures["classify"]["method_name"] == "tensorflow/serving/classify"
    x = signatures["serving_default"]["inputs"]["x"]
    assert x["dtype"] == "DT_FLOAT" and [d["size"] for d in x["tensor_shape"]["dim"]] == ["-1", "2"]


def test_predict_row_and_columnar_formats(server):
    code, body, _ = server.request("/v1/models/toy:predict", {"instances": [[1.0, 0.1], [2, 3]]})
    assert code == 200
    assert body == {"predictions": [{"rows": 2, "y": [3.0, 0.3]}, {"rows": 2, "y": [6.0, 9.0]}]}
    code, body, _ = server.request("/v1/models/toy/versions/2:predict", {"inputs": [[1.5, -2.0]]})
    assert code == 200 and body == {"outputs": {"rows": [1], "y": [[4.5, -6.0]]}}
    # The default policy serves only the latest version.
    assert server.request("/v1/models/toy/versions/1:predict", {"inputs": [[1.5, -2.0]]})[0] == 404
    code, body, _ = server.request("/v1/models/toy:predict", {"signature_name": "pair",
                                                              "instances": [{"a": 1, "b": 0.5}, {"a": 2, "b": 1}]})
    assert code == 200 and body == {"predictions": [2.5, 5.0]}


def test_float_formatting_matches_tf_serving(server):
    raw = urllib.request.urlopen(urllib.request.Request(
        server.url("/v1/models/toy:predict"),
        data=json.dumps({"inputs": [[0.1, 1e-7]]}).encode()), timeout=30).read().decode()
    # float32 0.3 prints as 0.3 (6 significant digits read back equal), 3e-07 stays scientific.
    assert '"y": [[0.3, 3e-07]]' in raw


def test_strings_b64_in_and_bytes_out(server):
    text = "héllo"
    code, body, _ = server.request("/v1/models/toy:predict", {
        "signature_name": "strings",
        "instances": [{"b64": base64.b64encode(text.encode()).decode()}, "ab"]})
    assert code == 200
    assert body["predictions"][0] == {"length": 5, "upper_bytes": {"b64": base64.b64encode("HéLLO".encode()).decode()}}
    assert body["predictions"][1]["length"] == 2


@pytest.mark.parametrize("path, body, method, code, message", [
    ("/v1/models/toy:predict", b"{not json", None, 400, "JSON Parse error"),
    ("/v1/models/toy:predict", {"instances": [[1.0, 2.0]], "inputs": [[1.0, 2.0]]}, None, 400, "only one of"),
    ("/v1/models/toy:predict", {"signature_name": "nope", "instances": [[1.0, 2.0]]}, None, 400,
     'Serving signature name: "nope" not found'),
    ("/v1/models/toy:predict", {"signature_name": "pair", "instances": [{"a": 1.0, "b": 1.0}]}, None, 400,
     "Type: Number is not of expected type: int64"),
    ("/v1/models/toy:predict", {"instances": [[1.0, 2.0], [1.0]]}, None, 400, "Expecting tensor size"),
    ("/v1/models/toy:predict", {}, None, 400, "Missing 'inputs' or 'instances' key"),
    ("/v1/models/missing:predict", {"instances": [[1.0, 2.0]]}, None, 404, "Servable not found for request"),
    ("/v1/models/toy/versions/9:predict", {"instances": [[1.0, 2.0]]}, None, 404, "Specific(toy, 9)"),
    ("/v1/models/toy/labels/stable:predict", {"instances": [[1.0, 2.0]]}, None, 400, "Unrecognized servable version label"),
    ("/v1/models/toy:predict", None, "GET", 400, "Malformed request: GET"),
    ("/v1/models/toy", b"{}", "PUT", 400, "Malformed request: PUT"),
    ("/v1/models/toy:classify", {"instances": [[1.0, 2.0]]}, None, 400, "key 'examples' is expected"),
    ("/v1/models/toy:classify", {"examples": []}, None, 400, "'examples' value is an empty array"),
    ("/v1/models/toy:classify", {"examples": [{"x": [1.0, 2.0]}]}, None, 400,
     "No classification inputs found in SignatureDef"),  # serving_default's one input is x, not inputs
    ("/v1/models/toy:regress", {"signature_name": "classify", "examples": [{"x": [1.0, 2.0]}]}, None, 400,
     "Expected one output Tensor."),  # classify has classes and scores
    ("/v1/models/toy:classify", {"signature_name": "classify", "examples": [{"x": [1.0, 2]}]}, None, 400,
     "Unexpected element type in feature: x expecting type: float"),
    ("/v1/models/toy:classify", {"signature_name": "classify", "examples": [{"x": [[1.0]]}]}, None, 400,
     "Feature: x has element with unexpected JSON type: Array"),
    ("/v1/models/toy:classify", {"signature_name": "classify", "examples": [{"y": [1.0, 2.0]}]}, None, 400,
     "Feature: x (data type: float) is required but could not be found"),
    ("/v1/models/toy:classify", {"signature_name": "nope", "examples": [{"x": 1}]}, None, 400,
     "No signature was found with the name: nope"),
])
def test_errors_are_json_with_tf_serving_status_codes(server, path, body, method, code, message):
    got, answer, content_type = server.request(path, body, method)
    assert (got, content_type) == (code, "application/json")
    assert set(answer) == {"error"} and message in answer["error"]
    assert server.request("/v1/models/toy")[0] == 200  # still up


def test_classify_and_regress_with_examples_context_and_b64(server):
    code, body, _ = server.request("/v1/models/toy:classify", {
        "signature_name": "classify", "examples": [{"x": [0.0, 0.5]}, {"x": [1.0, 1.0]}]})
    assert code == 200
    scores = tf.nn.softmax(np.array([[0.0, 1.5], [3.0, 3.0]], np.float32)).numpy()  # version 2 scales by 3
    assert [[label for label, _ in row] for row in body["results"]] == [["neg", "pos"]] * 2
    np.testing.assert_allclose([[score for _, score in row] for row in body["results"]], scores, rtol=1e-6)
    # Context features join every example; ints are int64 features, b64 objects bytes ones.
    code, body, _ = server.request("/v1/models/toy/versions/2:regress", {
        "signature_name": "regress", "context": {"bias": 10},
        "examples": [{"x": [1.0, 2.0]}, {"x": [0.5, 0.5], "note": {"b64": base64.b64encode(b"\xff").decode()}}]})
    assert (code, body) == (200, {"results": [19.0, 13.0]})


def test_grpc_classify_and_regress(server):
    stub = prediction_service_pb2_grpc.PredictionServiceStub(server.channel)
    request = classification_pb2.ClassificationRequest()
    request.model_spec.name, request.model_spec.signature_name = "toy", "classify"
    request.input.example_list.examples.add().features.feature["x"].float_list.value.extend([2.0, 0.0])
    response = stub.Classify(request, timeout=30)
    assert response.model_spec.version.value == 2
    classes = response.result.classifications[0].classes
    assert [c.label for c in classes] == ["neg", "pos"]
    np.testing.assert_allclose([c.score for c in classes], tf.nn.softmax([6.0, 0.0]).numpy(), rtol=1e-6)
    regression = regression_pb2.RegressionRequest()
    regression.model_spec.name, regression.model_spec.signature_name = "toy", "regress"
    context = regression.input.example_list_with_context
    context.context.features.feature["bias"].int64_list.value.append(-1)
    context.examples.add().features.feature["x"].float_list.value.extend([1.0, 1.0])
    assert [r.value for r in stub.Regress(regression, timeout=30).result.regressions] == [5.0]
    regression.model_spec.signature_name = "serving_default"
    with pytest.raises(grpc.RpcError) as error:
        stub.Regress(regression, timeout=30)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    # serving_default (outputs y and rows) fails regressor.cc's checks at the output count
    assert error.value.details().startswith("Expected one output Tensor. (signature serving_default; "
                                                "the model's regress signatures: regress;")


def test_local_server_process_is_stopped_on_error_and_on_sigterm(model_base, tmp_path):
    from serving.process import LocalServer

    # `python -m serving` as LocalServer starts it, given a flag it does not know and one TF Serving's
    # Python stand-in takes but cannot act on: both named, and the server serves.
    flags = ["--xla_cpu_compilation_enabled=true", "--no_such_flag=1"]
    with pytest.raises(RuntimeError, match="boom"):
        with LocalServer("toy", str(model_base), log_path=str(tmp_path / "server.log"), extra_flags=flags) as local:
            assert local.wait_for_version(2) == 2
            raise RuntimeError("boom")
    assert local.process.poll() == 0  # SIGTERM: clean shutdown
    output = (tmp_path / "server.log").read_text()
    assert "unknown argument: --no_such_flag=1" in output
    assert "--xla_cpu_compilation_enabled=True has no effect" in output
    script = tmp_path / "hold.py"
    script.write_text("import sys, time\n"
                      "from serving.process import LocalServer, stop_on_sigterm\n"
                      "stop_on_sigterm()\n"
                      "with LocalServer('toy', sys.argv[1]) as local:\n"
                      "    local.wait_for_version()\n"
                      "    print(local.process.pid, flush=True)\n"
                      "    time.sleep(300)\n")
    holder = subprocess.Popen([sys.executable, str(script), str(model_base)], stdout=subprocess.PIPE, text=True,
                              env={**os.environ, "PYTHONPATH": ROOT}, cwd=ROOT)
    server_pid = int(holder.stdout.readline())
    holder.send_signal(signal.SIGTERM)
    holder.wait(60)
    with pytest.raises(ProcessLookupError):  # stopped and reaped by the holder's `finally`
        os.kill(server_pid, 0)


def test_oversized_body_is_refused_and_server_stays_up(model_base):
    import http.client

    server = Server(model_name="toy", model_base_path=str(model_base), max_body_bytes=100_000)
    try:
        code, body, _ = server.request("/v1/models/toy:predict", {"instances": [[1.0, 2.0]] * 50_000})
        assert code == 413 and "exceeds the limit" in body["error"]
        # A client still uploading a large body gets the answer, not a reset connection, and
        # its keep-alive connection serves the next request.
        connection = http.client.HTTPConnection("127.0.0.1", server.rest_port, timeout=30)
        big = json.dumps({"instances": [[1.0, 2.0]] * 100_000}).encode()  # 1.2 MB, 12x the limit
        connection.request("POST", "/v1/models/toy:predict", big)
        response = connection.getresponse()
        assert response.status == 413 and "exceeds the limit" in json.loads(response.read())["error"]
        connection.request("POST", "/v1/models/toy:predict", json.dumps({"instances": [[1.0, 2.0]]}))
        assert connection.getresponse().status == 200
        connection.close()
    finally:
        server.close()


def test_grpc_predict_metadata_status_and_errors(server):
    stub = prediction_service_pb2_grpc.PredictionServiceStub(server.channel)
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "toy"
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.array([[1.0, 2.0]], np.float32)))
    response = stub.Predict(request, timeout=30)
    assert response.model_spec.version.value == 2
    np.testing.assert_allclose(tf.make_ndarray(response.outputs["y"]), [[3.0, 6.0]])
    metadata = get_model_metadata_pb2.GetModelMetadataRequest()
    metadata.model_spec.name = "toy"
    metadata.metadata_field.append("signature_def")
    signature_map = get_model_metadata_pb2.SignatureDefMap()
    stub.GetModelMetadata(metadata, timeout=30).metadata["signature_def"].Unpack(signature_map)
    assert "strings" in signature_map.signature_def
    status = model_service_pb2_grpc.ModelServiceStub(server.channel).GetModelStatus(
        get_model_status_pb2.GetModelStatusRequest(model_spec={"name": "toy"}), timeout=30)
    assert [(s.version, s.state) for s in status.model_version_status] == [(2, 30)]  # AVAILABLE
    request.model_spec.version.value = 9
    with pytest.raises(grpc.RpcError) as error:
        stub.Predict(request, timeout=30)
    assert error.value.code() == grpc.StatusCode.NOT_FOUND
    request.model_spec.ClearField("version")
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.array([[1, 2]], np.int32)))
    with pytest.raises(grpc.RpcError) as error:
        stub.Predict(request, timeout=30)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_config_file_policies_labels_and_hot_loading(tmp_path, model_base):
    base = tmp_path / "toy"
    shutil.copytree(model_base / "1", base / "1")
    config = tmp_path / "models.config"
    config.write_text(f'''model_config_list {{ config {{
        name: "toy" base_path: "{base}" model_platform: "tensorflow"
        model_version_policy {{ latest {{ num_versions: 2 }} }}
        version_labels {{ key: "stable" value: 1 }} }} }}''')
    # As TF Serving, a label in the first config needs the flag: no version is available yet.
    server = Server(model_config_file=str(config), file_system_poll_wait_seconds=0.2,
                    allow_version_labels_for_unavailable_models=True)
    try:
        assert server.request("/v1/models/toy/labels/stable:predict", {"inputs": [[1.0, 1.0]]})[1] == \
            {"outputs": {"rows": [1], "y": [[2.0, 2.0]]}}
        # A new version appears: built elsewhere, then renamed in (as pipelines.export does).
        shutil.copytree(model_base / "2", tmp_path / "staging")
        os.rename(tmp_path / "staging", base / "2")
        deadline = time.time() + 5
        while server.request("/v1/models/toy")[1]["model_version_status"][0]["version"] != "2":
            assert time.time() < deadline, "version 2 was not picked up"
            time.sleep(0.1)
        assert server.request("/v1/models/toy:predict", {"inputs": [[1.0, 1.0]]})[1]["outputs"]["y"] == [[3.0, 3.0]]
        assert server.request("/v1/models/toy/versions/1:predict", {"inputs": [[1.0, 1.0]]})[0] == 200
        # A third version (renamed in whole, as above): latest-2 policy unloads version 1.
        shutil.copytree(model_base / "2", tmp_path / "staging3")
        os.rename(tmp_path / "staging3", base / "3")
        deadline = time.time() + 5
        while server.request("/v1/models/toy/versions/1:predict", {"inputs": [[1.0, 1.0]]})[0] != 404:
            assert time.time() < deadline, "version 1 was not unloaded"
            time.sleep(0.1)
        versions = [s["version"] for s in server.request("/v1/models/toy")[1]["model_version_status"]]
        assert versions == ["3", "2"]  # newest first
    finally:
        server.close()


def test_cli_flags_and_shipped_configs_parse():
    flags = parse_flags(["--port=9000", "--rest_api_port=9001", "--model_name=m", "--model_base_path=/x",
                         "--enable_batching", "--batching_parameters_file=serving/batching.config",
                         "--file_system_poll_wait_seconds=2", "--some_tf_serving_flag=1"])
    assert (flags.port, flags.rest_api_port, flags.enable_batching, flags.host) == (9000, 9001, True, "127.0.0.1")
    from serving.__main__ import StartupError, run_server
    with pytest.raises(StartupError, match="batching_parameters_file is set without setting "
                                           "server_options.enable_batching to true"):
        run_server(parse_flags(["--model_base_path=/x", "--batching_parameters_file=b"]))
    from serving.batching import parse_batching_parameters
    from serving.source import parse_model_config_text
    configs = parse_model_config_text(open(os.path.join(ROOT, "serving", "models.config")).read())
    assert configs[0].name == "kerasbert" and configs[0].model_version_policy.latest.num_versions == 2
    parameters = parse_batching_parameters(open(os.path.join(ROOT, "serving", "batching.config")).read())
    assert parameters.max_batch_size.value == 32 and parameters.num_batch_threads.value == 2


def test_serves_a_kerasbert_export_like_the_keras_model(tmp_path, capsys):
    from helpers import TEXTS_A, TEXTS_B, expected_outputs, tiny_model_dir

    from kerasbert.export import export_saved_model

    model, pre = tiny_model_dir(str(tmp_path / "run"), "bi")
    export_saved_model(str(tmp_path / "run"), str(tmp_path / "exports"))
    expected, _ = expected_outputs(model, pre)
    server = Server(model_name="kerasbert", model_base_path=str(tmp_path / "exports"), enable_batching=True)
    try:
        code, body, _ = server.request("/v1/models/kerasbert:predict", {"instances": TEXTS_A})
        assert code == 200  # serving_default is sentiment
        np.testing.assert_allclose([p["probabilities"] for p in body["predictions"]],
                                   expected["sentiment"]["probabilities"], atol=1e-5)
        code, body, _ = server.request("/v1/models/kerasbert:predict", {
            "signature_name": "similarity", "inputs": {"text_a": TEXTS_A, "text_b": TEXTS_B}})
        np.testing.assert_allclose(body["outputs"], expected["similarity"]["score"], atol=1e-5)
        code, body, _ = server.request("/v1/models/kerasbert:classify", {
            "signature_name": "sentiment_classify", "examples": [{"text": t} for t in TEXTS_A]})
        assert code == 200 and [label for label, _ in body["results"][0]] == [
                "very negative", "negative", "neutral", "positive", "very positive"]
        np.testing.assert_allclose([[s for _, s in row] for row in body["results"]],
                                   expected["sentiment"]["probabilities"], atol=1e-5)
        code, body, _ = server.request("/v1/models/kerasbert:regress", {
            "signature_name": "similarity_regress",
            "examples": [{"text_a": a, "text_b": b} for a, b in zip(TEXTS_A, TEXTS_B)]})
        np.testing.assert_allclose(body["results"], expected["similarity"]["score"], atol=1e-5)
        from serving import client

        capsys.readouterr()  # the server's start-up lines
        for protocol, port in (("rest", server.rest_port), ("grpc", server.grpc_port)):
            assert client.main(["--signature", "similarity", "--text", TEXTS_A[0], "--text_b", TEXTS_B[0],
                                "--protocol", protocol, "--port", str(port), "--json"]) == 0
            assert json.loads(capsys.readouterr().out)["score"] == pytest.approx(
                [expected["similarity"]["score"][0]], abs=1e-5)
            assert client.main(["--signature", "similarity", "--text", TEXTS_A[0], "--text_b", TEXTS_B[0],
                                "--protocol", protocol, "--port", str(port)]) == 0
            assert capsys.readouterr().out == f"score: {expected['similarity']['score'][0]:.4f}\n"
        assert client.main(["--signature", "similarity", "--text", "one sentence", "--port",
                            str(server.rest_port), "--retries", "0"]) == 1  # a pair signature, one text
        assert "signature 'similarity' takes inputs text_a, text_b; received text" in capsys.readouterr().err
    finally:
        server.close()


def test_client_rest_and_grpc_and_retry_on_unavailable(server):
    from serving.client import ServingClient, ServingError

    for protocol in ("rest", "grpc"):
        client = ServingClient("toy", rest_port=server.rest_port, grpc_port=server.grpc_port, protocol=protocol)
        outputs = client.predict("serving_default", {"x": [[1.0, 2.0]]})
        np.testing.assert_allclose(outputs["y"], [[3.0, 6.0]])
        # One output: REST answers it bare; the client names it as gRPC does.
        assert client.predict("pair", {"a": [1], "b": [0.5]}) == {"sum": [2.5]}
    with pytest.raises(ServingError) as error:
        ServingClient("toy", rest_port=server.rest_port).predict("nope", {"x": [[1.0, 2.0]]})
    assert error.value.code == 400  # not retried: only 503 is
    closed_port = free_ports(1)[0]  # nothing listens: every attempt is refused
    started = time.time()
    with pytest.raises(ServingError) as error:
        ServingClient("toy", rest_port=closed_port, retries=2, backoff=0.1).predict("x", {"x": [[1.0]]})
    # Retried as a 503 is, and said as what it is (seen before: reported as the server's "503").
    assert error.value.code == "UNREACHABLE" and time.time() - started >= 0.3  # backoff 0.1 + 0.2
    assert f"no server answered at 127.0.0.1:{closed_port}" in str(error.value)
    with pytest.raises(ServingError) as error:  # REST sent to the gRPC port: said so, not a traceback
        ServingClient("toy", rest_port=server.grpc_port, retries=0).predict("serving_default", {"x": [[1.0, 2.0]]})
    assert error.value.code == "NOT_REST" and "is it the gRPC port?" in str(error.value)


def test_rest_api_timeout_answers_deadline_exceeded(model_base):
    """--rest_api_timeout_in_ms: a predict still running past it is answered 504, as TF Serving
    answers DEADLINE_EXCEEDED; the server goes on serving."""
    from serving.memory_budget import ServerBudgets
    from serving.manager import ModelManager
    from serving.source import ModelConfig
    from serving.rest import RestServer
    from serving.session import DirectSession

    store = ModelManager([ModelConfig(name="toy", base_path=str(model_base))])
    store.poll()

    class Slow(DirectSession):
        def run(self, servable, signature, inputs, deadline=None, cancelled=None):
            if inputs["x"][0][0] < 0:  # the slow request
                time.sleep(6.0)
            return super().run(servable, signature, inputs, deadline, cancelled)

    # 2 s: a first TensorFlow call on a loaded machine can take most of a second.
    rest = RestServer(store, Slow(), ServerBudgets(1 << 20), port=0, timeout_ms=2000)
    url = f"http://127.0.0.1:{rest.start()}/v1/models/toy:predict"
    try:
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(urllib.request.Request(url, json.dumps({"instances": [[-1.0, 2.0]]}).encode()),
                                   timeout=30)
        assert error.value.code == 504 and "Deadline Exceeded" in json.loads(error.value.read())["error"]
        with urllib.request.urlopen(urllib.request.Request(url, json.dumps({"instances": [[1.0, 2.0]]}).encode()),
                                    timeout=30) as response:
            assert json.loads(response.read()) == {"predictions": [{"rows": 1, "y": [3.0, 6.0]}]}  # version 2
    finally:
        rest.stop()


def test_each_error_kind_has_tf_serving_codes():
    """One table: model_servers/http_server.cc ToHTTPStatusCode, and the gRPC code of the status."""
    import grpc

    from serving import status

    kinds = {status.InvalidArgument: (400, grpc.StatusCode.INVALID_ARGUMENT),
             status.FailedPrecondition: (400, grpc.StatusCode.FAILED_PRECONDITION),
             status.NotFound: (404, grpc.StatusCode.NOT_FOUND),
             status.ResourceExhausted: (429, grpc.StatusCode.RESOURCE_EXHAUSTED),
             status.DeadlineExceeded: (504, grpc.StatusCode.DEADLINE_EXCEEDED),
             RuntimeError: (500, grpc.StatusCode.INTERNAL)}
    for kind, codes in kinds.items():
        assert (status.http_status(kind("x")), status.grpc_code(kind("x"))) == codes

