"""`python -m serving` operated as TF Serving is: every flag of main.cc, Prometheus metrics
that count what was sent, the gRPC health service, TLS, and the flags that bound threads,
messages and transports. Over real sockets on loopback."""

import http.client
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import classification_pb2, predict_pb2, prediction_service_pb2_grpc, regression_pb2

from conftest import ROOT, without_tensorflow
from serving_helpers import certificates, metric, rest
from serving_models import save_hostile, save_toy

# model_servers/main.cc's flags, read from tensorflow/serving at commit
# 9d981c5c2708d23c5407c7c1e30309e6f9798874 (2026-07-30), with server.h's defaults
# ("4 x CPUs" written as such).
MAIN_CC_FLAGS = {
    "port": "8500", "grpc_socket_path": "", "rest_api_port": "0", "rest_api_num_threads": "4xCPUs",
    "rest_api_timeout_in_ms": "30000", "rest_api_enable_cors_support": "false", "enable_batching": "false",
    "allow_version_labels_for_unavailable_models": "false", "batching_parameters_file": "",
    "enable_per_model_batching_parameters": "false", "model_config_file": "",
    "model_config_file_poll_wait_seconds": "0", "model_name": "default", "model_base_path": "",
    "num_load_threads": "0", "num_unload_threads": "0", "max_num_load_retries": "5",
    "load_retry_interval_micros": "60000000", "file_system_poll_wait_seconds": "1",
    "flush_filesystem_caches": "true", "tensorflow_session_parallelism": "0",
    "tensorflow_session_config_file": "", "tensorflow_intra_op_parallelism": "0",
    "tensorflow_inter_op_parallelism": "0", "use_alts_credentials": "false", "ssl_config_file": "",
    "platform_config_file": "", "per_process_gpu_memory_fraction": "0", "saved_model_tags": "",
    "grpc_channel_arguments": "", "grpc_max_threads": "4xCPUs", "enable_model_warmup": "true",
    "num_request_iterations_for_warmup": "0", "version": "false", "monitoring_config_file": "",
    "remove_unused_fields_from_bundle_metagraph": "true", "prefer_tflite_model": "false",
    "num_tflite_pools": "CPUs", "num_tflite_interpreters_per_pool": "1",
    "enable_signature_method_name_check": "false", "xla_cpu_compilation_enabled": "false",
    "xla_gpu_compilation_enabled": "false", "enable_profiler": "true", "thread_pool_factory_config_file": "",
    "mixed_precision": "", "skip_initialize_tpu": "false", "enable_grpc_healthcheck_service": "false",
    "enable_serialization_as_tensor_content": "false",
}


def test_every_flag_of_main_cc_is_accepted_with_tf_servings_default():
    from serving.flags import CPUS, FLAGS

    ours = {flag.name: flag.default for flag in FLAGS}
    for name, default in MAIN_CC_FLAGS.items():
        assert name in ours, f"--{name} is not accepted"
        expected = {"4xCPUs": 4 * CPUS, "CPUs": CPUS}.get(default, default)
        got = ours[name]
        assert (str(got).lower() if isinstance(got, bool) else f"{got:g}" if isinstance(got, float) else str(got)) \
            == str(expected), name


def test_the_server_starts_with_every_flag_at_its_default(tmp_path):
    """A deployment script written for tensorflow_model_server, every flag spelled out."""
    from helpers import free_ports

    save_toy(str(tmp_path / "toy" / "1"), 2.0)
    grpc_port, rest_port = free_ports(2)
    values = {**MAIN_CC_FLAGS, "port": str(grpc_port), "rest_api_port": str(rest_port), "model_name": "toy",
              "model_base_path": str(tmp_path / "toy")}
    values = {name: {"4xCPUs": str(4 * os.cpu_count()), "CPUs": str(os.cpu_count())}.get(v, v)
              for name, v in values.items()}
    command = [sys.executable, "-m", "serving"] + [f"--{name}={value}" for name, value in values.items()]
    process = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True)
    try:
        wait_for_rest(rest_port, "toy", process)
    finally:
        process.terminate()
        output = process.communicate(timeout=30)[0]
    assert "unknown argument" not in output and "has no effect" not in output, output
    assert process.returncode == 0
    # The server's own log: a normal load is INFO; TensorFlow's C++ start-up lines hidden.
    assert re.search(r"INFO loaded toy version 1 from ", output), output
    assert not re.search(r"cuInit|cudart_stub|oneDNN custom operations|cpu_feature_guard|WARNING", output), output


def test_an_ineffective_flag_says_so_in_one_line(caplog):
    from serving.flags import parse_flags, report_ignored

    flags = parse_flags(["--model_base_path=/m", "--xla_cpu_compilation_enabled=true", "--mixed_precision=bfloat16",
                         "--enable_model_warmup=true"])
    with caplog.at_level("WARNING", logger="serving"):
        report_ignored(flags)
    assert [record.getMessage() for record in caplog.records] == [
        "--xla_cpu_compilation_enabled=True has no effect: it needs TensorFlow Serving's C++ runtime",
        "--mixed_precision=bfloat16 has no effect: it needs TensorFlow Serving's C++ runtime"]


def test_help_lists_every_flag_with_tf_servings_wording():
    output = subprocess.run([sys.executable, "-m", "serving", "--help"], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, "PYTHONPATH": ROOT}, timeout=60).stdout
    for name in MAIN_CC_FLAGS:
        assert f"--{name}=" in output, name
    assert "Enable the standard gRPC healthcheck service." in output
    assert "Max grpc server threads to handle grpc messages." in output


def test_version_prints_the_servers_and_tensorflows_versions(tmp_path):
    output = subprocess.run([sys.executable, "-m", "serving", "--version"], cwd=ROOT, capture_output=True, text=True,
                            env={**os.environ, **without_tensorflow(tmp_path)}, timeout=120)  # answers at once
    assert output.returncode == 0
    assert re.fullmatch(r"TensorFlow ModelServer: kerasbert-serving \S+\nTensorFlow Library: 2\.\d+\.\d+\n",
                        output.stdout), output.stdout
    assert output.stderr == ""


# --- Monitoring -------------------------------------------------------------------------------


def wait_for_rest(port, model, process=None, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        assert process is None or process.poll() is None, "the server exited"
        try:
            connection = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
            connection.request("GET", f"/v1/models/{model}")
            if connection.getresponse().status == 200:
                return
        except OSError:
            pass
        time.sleep(0.25)
    raise TimeoutError("the server did not come up")


@pytest.fixture(scope="module")
def monitored(tmp_path_factory):
    """A batching server exporting Prometheus metrics at a path of its config, with the gRPC
    health service on."""
    from serving.process import LocalServer

    root = tmp_path_factory.mktemp("monitored")
    save_toy(str(root / "toy" / "1"), 2.0)
    (root / "monitoring.config").write_text('prometheus_config { enable: true path: "/metrics/here" }')
    (root / "batching.config").write_text("max_batch_size { value: 8 } batch_timeout_micros { value: 1000 }")
    with LocalServer("toy", str(root / "toy"), log_path=str(root / "server.log"),
                     extra_flags=[f"--monitoring_config_file={root / 'monitoring.config'}", "--enable_batching",
                                  f"--batching_parameters_file={root / 'batching.config'}",
                                  "--enable_grpc_healthcheck_service"]) as server:
        server.wait_for_version(1)
        yield server


def test_request_counters_count_exactly_what_was_sent(monitored):
    """util/prometheus_exporter.cc names, servables/tensorflow/util.cc labels: every request
    by model and status; latencies of the successful ones by API and entrypoint."""
    port = monitored.rest_port
    before = rest(port, "GET", "/metrics/here")[1].decode()
    for _ in range(5):
        assert rest(port, "POST", "/v1/models/toy:predict", {"instances": [[1.0, 2.0]]})[0] == 200
    for _ in range(3):
        assert rest(port, "POST", "/v1/models/toy:predict", {"instances": ["not a number"]})[0] == 400
    channel = grpc.insecure_channel(f"127.0.0.1:{monitored.grpc_port}")
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "toy"
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.array([[1.0, 2.0]], np.float32)))
    for _ in range(2):
        stub.Predict(request, timeout=30)
    request.model_spec.name = "nope"
    with pytest.raises(grpc.RpcError):
        stub.Predict(request, timeout=30)
    channel.close()
    status, page, headers = rest(port, "GET", "/metrics/here")
    assert status == 200 and headers["Content-Type"] == "text/plain"
    after = page.decode()

    def delta(name, **labels):
        return metric(after, name, **labels) - metric(before, name, **labels)

    count = ":tensorflow:serving:request_count"
    assert delta(count, model_name="toy", status="OK") == 7  # 5 REST + 2 gRPC
    assert delta(count, model_name="toy", status="INVALID_ARGUMENT") == 3
    assert delta(count, model_name="(unknown)", status="NOT_FOUND") == 1  # never a client-chosen name
    latency = ":tensorflow:serving:request_latency_count"
    assert delta(latency, model_name="toy", API="predict", entrypoint="REST") == 5
    assert delta(latency, model_name="toy", API="Predict", entrypoint="GRPC") == 2
    assert delta(":tensorflow:serving:runtime_latency_count", model_name="toy", API="Predict") == 7
    assert delta(":tensorflow:serving:batching_session:input_batch_size_count") == 7
    assert delta(":tensorflow:serving:batching_session:wrapped_run_count") >= 1
    assert metric(after, ":tensorflow:cc:saved_model:load_attempt_count", status="success") == 1
    assert "# TYPE :tensorflow:serving:request_latency histogram" in after
    budget = ":kerasbert:serving:memory_budget_bytes"
    assert metric(after, budget, budget="decoding", kind="capacity") == 12 * 64 * 2**20 + 2**16  # 12 x it + 64 KiB
    assert 0 < metric(after, budget, budget="decoding", kind="peak") <= 12 * 64 * 2**20 + 2**16


def test_classify_and_regress_are_timed_and_counted_alike_over_rest_and_grpc(monitored):
    """classifier.cc and regressor.cc time the model call (runtime_latency by API) and the
    examples are counted (request_example_counts): one place does both for REST and gRPC
    (classify_regress.ExampleRunner); each front end counts its requests."""
    port = monitored.rest_port
    before = rest(port, "GET", "/metrics/here")[1].decode()
    examples = [{"x": [0.0, 0.5]}, {"x": [1.0, 2.0]}]
    for method in ("classify", "regress"):
        body = {"signature_name": method, "examples": examples}
        assert rest(port, "POST", f"/v1/models/toy:{method}", body)[0] == 200
    channel = grpc.insecure_channel(f"127.0.0.1:{monitored.grpc_port}")
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    classification, regression = classification_pb2.ClassificationRequest(), regression_pb2.RegressionRequest()
    for request, signature in ((classification, "classify"), (regression, "regress")):
        request.model_spec.name, request.model_spec.signature_name = "toy", signature
        for x in ([0.0, 0.5], [1.0, 2.0], [3.0, 4.0]):
            request.input.example_list.examples.add().features.feature["x"].float_list.value.extend(x)
    stub.Classify(classification, timeout=30)
    stub.Regress(regression, timeout=30)
    channel.close()
    after = rest(port, "GET", "/metrics/here")[1].decode()

    def delta(name, **labels):
        return metric(after, name, **labels) - metric(before, name, **labels)

    runtime = ":tensorflow:serving:runtime_latency_count"
    assert delta(runtime, model_name="toy", API="Classify") == 2  # 1 REST + 1 gRPC
    assert delta(runtime, model_name="toy", API="Regress") == 2
    assert delta(":tensorflow:serving:request_example_counts_count", model="toy") == 4
    assert delta(":tensorflow:serving:request_example_count_total", model="toy") == 2 * 2 + 2 * 3
    latency = ":tensorflow:serving:request_latency_count"
    for api, entrypoint in (("classify", "REST"), ("regress", "REST"), ("Classify", "GRPC"), ("Regress", "GRPC")):
        assert delta(latency, model_name="toy", API=api, entrypoint=entrypoint) == 1
    assert delta(":tensorflow:serving:request_count", model_name="toy", status="OK") == 4


def test_the_default_prometheus_path_and_no_export_without_the_config(tmp_path, example_server):
    """Without a monitoring config: the session's child server (../conftest.py's `server`)."""
    from serving.metrics import DEFAULT_PATH
    from serving.process import LocalServer

    save_toy(str(tmp_path / "toy" / "1"), 2.0)
    (tmp_path / "monitoring.config").write_text("prometheus_config { enable: true }")
    with LocalServer("toy", str(tmp_path / "toy"), extra_flags=[
            f"--monitoring_config_file={tmp_path / 'monitoring.config'}"]) as exported:
        exported.wait_for_version(1)
        assert DEFAULT_PATH == "/monitoring/prometheus/metrics"
        status, page, _ = rest(exported.rest_port, "GET", DEFAULT_PATH)
        assert status == 200 and b":tensorflow:serving:request_count" in page
    assert rest(example_server.rest_port, "GET", DEFAULT_PATH)[0] == 404


# --- Health -----------------------------------------------------------------------------------


def test_health_is_serving_then_not_serving_once_shutdown_begins(tmp_path):
    """server.cc: SetServingStatus("ModelService"/"PredictionService", true) once built; the
    health service reports NOT_SERVING when the server shuts down (SIGTERM)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc

    from serving.process import LocalServer

    save_toy(str(tmp_path / "toy" / "1"), 2.0)
    with LocalServer("toy", str(tmp_path / "toy"), extra_flags=["--enable_grpc_healthcheck_service"]) as server:
        server.wait_for_version(1)
        channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
        stub = health_pb2_grpc.HealthStub(channel)
        for service in ("ModelService", "PredictionService"):
            assert stub.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status == \
                health_pb2.HealthCheckResponse.SERVING
        with pytest.raises(grpc.RpcError) as error:
            stub.Check(health_pb2.HealthCheckRequest(service="NoSuchService"), timeout=10)
        assert error.value.code() == grpc.StatusCode.NOT_FOUND
        watch = stub.Watch(health_pb2.HealthCheckRequest(service="PredictionService"), timeout=30)
        assert next(watch).status == health_pb2.HealthCheckResponse.SERVING
        server.process.send_signal(signal.SIGTERM)
        assert next(watch).status == health_pb2.HealthCheckResponse.NOT_SERVING
        channel.close()


# --- TLS --------------------------------------------------------------------------------------


def test_tls_with_client_verification(tmp_path):
    """server.cc BuildServerCredentials with an SSLConfig: a client trusting the test CA and
    holding a certificate it signed is served; one without a certificate, one that does not
    trust the CA, and a plaintext one are refused."""
    from serving.process import LocalServer

    pems = certificates(tmp_path)
    config = tmp_path / "ssl.config"
    config.write_text("".join(f"{field}: {json.dumps(pems[source].decode())}\n" for field, source in
                              (("server_key", "server_key"), ("server_cert", "server_cert"), ("custom_ca", "ca")))
                      + "client_verify: true\n")
    save_toy(str(tmp_path / "toy" / "1"), 2.0)
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "toy"
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.array([[1.0, 2.0]], np.float32)))
    with LocalServer("toy", str(tmp_path / "toy"), extra_flags=[f"--ssl_config_file={config}"]) as server:
        server.wait_for_version(1)
        target = f"127.0.0.1:{server.grpc_port}"

        def predict(channel):
            try:
                return prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=10)
            finally:
                channel.close()

        trusted = grpc.ssl_channel_credentials(pems["ca"], pems["client_key"], pems["client_cert"])
        answer = predict(grpc.secure_channel(target, trusted))
        assert tf.make_ndarray(answer.outputs["y"]).tolist() == [[2.0, 4.0]]
        for refused in (grpc.secure_channel(target, grpc.ssl_channel_credentials(pems["ca"])),  # no certificate
                        grpc.secure_channel(target, grpc.ssl_channel_credentials(  # does not trust the CA
                            None, pems["client_key"], pems["client_cert"])),
                        grpc.insecure_channel(target)):
            with pytest.raises(grpc.RpcError) as error:
                predict(refused)
            assert error.value.code() == grpc.StatusCode.UNAVAILABLE


# --- Flags that bound threads, messages and transports ---------------------------------------


class Slow:
    """A direct session that holds each call `seconds` and records the most calls at once."""

    def __init__(self, seconds=0.3):
        self.seconds, self.running, self.most, self.lock = seconds, 0, 0, threading.Lock()

    def run(self, servable, signature, inputs, deadline=None, cancelled=None):
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        time.sleep(self.seconds)
        with self.lock:
            self.running -= 1
        return servable.run(signature, servable.check_inputs(signature, inputs))


@pytest.fixture(scope="module")
def toy_store(tmp_path_factory):
    from serving.manager import ModelManager
    from serving.source import ModelConfig

    base = tmp_path_factory.mktemp("store") / "toy"
    save_toy(str(base / "1"), 2.0)
    store = ModelManager([ModelConfig(name="toy", base_path=str(base))])
    store.poll()
    return store


@pytest.mark.parametrize("threads", [1, 3])
def test_rest_api_num_threads_bounds_the_calls_in_flight(toy_store, threads):
    from serving.memory_budget import ServerBudgets
    from serving.rest import RestServer

    session = Slow()
    server = RestServer(toy_store, session, ServerBudgets(1 << 20), port=0, num_threads=threads)
    port = server.start()
    try:
        results = []
        calls = [threading.Thread(target=lambda: results.append(
            rest(port, "POST", "/v1/models/toy:predict", {"instances": [[1.0, 2.0]]})[0])) for _ in range(6)]
        for call in calls:
            call.start()
        for call in calls:
            call.join(30)
        assert results == [200] * 6 and session.most == threads
    finally:
        server.stop()


def test_grpc_max_threads_refuses_calls_beyond_its_slots(toy_store):
    """--grpc_max_threads calls run and up to twice grpc.max_concurrent_streams wait for a
    thread (call_slots); one more is refused RESOURCE_EXHAUSTED at once, never queued."""
    from serving.grpc_server import make_grpc_server
    from serving.memory_budget import ServerBudgets

    session = Slow(1.0)
    server, port, _ = make_grpc_server(toy_store, free_port(), session, ServerBudgets(1 << 20), max_threads=1,
                                       channel_arguments=[("grpc.max_concurrent_streams", 1)])
    try:
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "toy"
        request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.array([[1.0, 2.0]], np.float32)))

        def stub():  # a connection of its own: each holds one stream
            channel = grpc.insecure_channel(f"127.0.0.1:{port}", options=[("grpc.use_local_subchannel_pool", 1)])
            return prediction_service_pb2_grpc.PredictionServiceStub(channel)
        admitted = [stub().Predict.future(request, timeout=30) for _ in range(3)]  # 1 running, 2 waiting
        time.sleep(0.5)
        with pytest.raises(grpc.RpcError) as error:
            stub().Predict(request, timeout=30)
        assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert [call.result().outputs["y"].float_val for call in admitted] == [[2.0, 4.0]] * 3
        assert session.most == 1
    finally:
        server.stop(0)


def free_port():
    from helpers import free_ports

    return free_ports(1)[0]


def test_grpc_channel_arguments_set_the_message_limit(toy_store):
    from serving.flags import parse_channel_arguments
    from serving.grpc_server import make_grpc_server
    from serving.memory_budget import ServerBudgets
    from serving.session import DirectSession

    arguments = parse_channel_arguments("grpc.max_receive_message_length=1024,grpc.max_connection_age_ms=60000")
    server, port, _ = make_grpc_server(toy_store, free_port(), DirectSession(), ServerBudgets(1 << 20),
                                       channel_arguments=arguments)
    try:
        stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "toy"
        request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.ones((2, 2), np.float32)))
        assert stub.Predict(request, timeout=30).outputs["y"].float_val == [2.0] * 4
        request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.ones((200, 2), np.float32)))  # 1.6 KB
        with pytest.raises(grpc.RpcError) as error:
            stub.Predict(request, timeout=30)
        assert error.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    finally:
        server.stop(0)


def test_grpc_on_a_unix_socket_only(toy_store, tmp_path):
    """--port=0 with --grpc_socket_path: no TCP port, the socket serves."""
    from serving.grpc_server import make_grpc_server
    from serving.memory_budget import ServerBudgets
    from serving.session import DirectSession

    socket_path = str(tmp_path / "grpc.sock")
    server, port, _ = make_grpc_server(toy_store, 0, DirectSession(), ServerBudgets(1 << 20), socket_path=socket_path)
    try:
        assert port == 0
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "toy"
        request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.ones((1, 2), np.float32)))
        stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(f"unix:{socket_path}"))
        assert stub.Predict(request, timeout=30).outputs["y"].float_val == [2.0, 2.0]
    finally:
        server.stop(0)
    from serving.__main__ import run_server
    from serving.flags import parse_flags

    with pytest.raises(SystemExit, match="grpc_socket_path must be set"):
        run_server(parse_flags(["--port=0", "--model_base_path=/m"]))


def test_serialization_as_tensor_content(toy_store):
    """--enable_serialization_as_tensor_content: outputs as tensor_content; by default, as
    their typed field (Tensor::AsProtoField)."""
    from serving.grpc_server import make_grpc_server
    from serving.memory_budget import ServerBudgets
    from serving.session import DirectSession

    for as_content in (False, True):
        server, port, _ = make_grpc_server(toy_store, free_port(), DirectSession(), ServerBudgets(1 << 20),
                                           tensor_content=as_content)
        try:
            request = predict_pb2.PredictRequest()
            request.model_spec.name = "toy"
            request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.ones((1, 2), np.float32)))
            answer = prediction_service_pb2_grpc.PredictionServiceStub(
                grpc.insecure_channel(f"127.0.0.1:{port}")).Predict(request, timeout=30).outputs["y"]
            assert bool(answer.tensor_content) == as_content and bool(answer.float_val) != as_content
            assert tf.make_ndarray(answer).tolist() == [[2.0, 2.0]]
        finally:
            server.stop(0)


def test_cors_headers_with_rest_api_enable_cors_support(toy_store):
    """http_rest_api_util.cc AddCORSHeaders, on every answer when the flag is on."""
    from serving.memory_budget import ServerBudgets
    from serving.rest import RestServer
    from serving.session import DirectSession

    for enabled in (False, True):
        server = RestServer(toy_store, DirectSession(), ServerBudgets(1 << 20), port=0, enable_cors=enabled)
        port = server.start()
        try:
            _, _, headers = rest(port, "POST", "/v1/models/toy:predict", {"instances": [[1.0, 2.0]]})
            assert (headers.get("Access-Control-Allow-Origin") == "*") == enabled
            assert (headers.get("Access-Control-Allow-Methods") == "POST, GET") == enabled
        finally:
            server.stop()


def test_saved_model_tags_choose_the_meta_graph(tmp_path):
    from serving.manager import ModelManager
    from serving.source import ModelConfig

    save_hostile(str(tmp_path / "m" / "1"))
    store = ModelManager([ModelConfig(name="m", base_path=str(tmp_path / "m"))], tags=("serve", "gpu"),
                       load_retry_seconds=3600)
    store.poll()
    status = store.status("m").model_version_status[0]
    assert status.state == status.END and "tags ['gpu', 'serve'] could not be found" in status.status.error_message
    store = ModelManager([ModelConfig(name="m", base_path=str(tmp_path / "m"))], tags=("serve",))
    store.poll()
    assert store.get("m").version == 1


def test_num_load_threads_loads_that_many_versions_at_once(tmp_path, monkeypatch):
    from serving import manager as manager_module
    from serving.manager import ModelManager
    from serving.source import ModelConfig

    for name in "abcd":
        save_toy(str(tmp_path / name / "1"), 2.0)
    configs = [ModelConfig(name=name, base_path=str(tmp_path / name)) for name in "abcd"]
    for threads, expected in ((0, 1), (2, 2)):
        running, most, lock = [0], [0], threading.Lock()
        load = manager_module.ModelManager._load

        def counted_load(self, *args, load=load, running=running, most=most):
            with lock:
                running[0] += 1
                most[0] = max(most[0], running[0])
            time.sleep(0.2)
            try:
                return load(self, *args)
            finally:
                with lock:
                    running[0] -= 1

        monkeypatch.setattr(manager_module.ModelManager, "_load", counted_load)
        store = ModelManager(configs, num_load_threads=threads)
        store.poll()
        monkeypatch.undo()
        assert most[0] == expected and all(store.get(name).version == 1 for name in "abcd")
