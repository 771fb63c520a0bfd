"""Start-up errors as TF Serving reports them, from real `python -m serving` processes: a
start-up file that cannot be read or does not parse, a config ServerCore refuses, a model
whose first load fails with all its retries (each: TF Serving's lines, exit 255, no Python
traceback); and the ports open only once the configured models are loaded."""

import logging
import os
import subprocess
import sys
import threading
import time
import urllib.request

import grpc
import pytest

from helpers import free_ports

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FAILED = "Failed to start server. Error: "


def serve(*flags, timeout=120):
    """(exit code, stderr lines) of a server that is expected to exit on its own."""
    grpc_port, rest_port = free_ports(2)
    result = subprocess.run([sys.executable, "-m", "serving", f"--port={grpc_port}", f"--rest_api_port={rest_port}",
                             *flags], cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"},
                            capture_output=True, text=True, timeout=timeout)
    assert "Traceback" not in result.stderr + result.stdout, result.stderr
    return result.returncode, result.stderr.splitlines()


def config_file(tmp_path, text):
    path = tmp_path / "models.config"
    path.write_text(text)
    return str(path)


def model(name, base_path, extra=""):
    return f'config {{ name: "{name}" base_path: "{base_path}" model_platform: "tensorflow" {extra}}} '


def test_a_malformed_model_config_file_is_protobufs_line_and_tf_servings_status(tmp_path):
    path = config_file(tmp_path, "improperly formatted file")  # TF Serving's bad_model_config.txt
    code, lines = serve(f"--model_config_file={path}")
    assert code == 255
    parse_lines = [line for line in lines if "Error parsing text-format" in line]
    assert len(parse_lines) == 1 and parse_lines[0].endswith(
        'Error parsing text-format tensorflow.serving.ModelServerConfig: 1:1: Message type '
        '"tensorflow.serving.ModelServerConfig" has no field named "improperly".'), lines
    assert lines[-1] == f"{FAILED}INVALID_ARGUMENT: Invalid protobuf file: '{path}'"
    assert len(lines) == 2, lines

    path = config_file(tmp_path, 'model_config_list {\n  config {{ name: "m" } }\n')
    code, lines = serve(f"--model_config_file={path}")
    assert code == 255 and lines[0].endswith(
        "Error parsing text-format tensorflow.serving.ModelServerConfig: 2:11: Expected identifier, got: {"), lines


def test_an_unreadable_model_config_file_is_tensorflows_file_error(tmp_path):
    code, lines = serve(f"--model_config_file={tmp_path / 'missing.config'}")
    assert code == 255 and lines == [f"{FAILED}NOT_FOUND: {tmp_path / 'missing.config'}; No such file or directory"]


@pytest.mark.parametrize("entries, status", [
    (model("m", "/models/a") + model("m", "/models/b"),
     "INVALID_ARGUMENT: Illegal to list model m multiple times in config list"),
    (model("m", "models/m"),
     "INVALID_ARGUMENT: Expected model m to have an absolute path or URI; got base_path()=models/m"),
    ('config { name: "m" base_path: "/models/m" } ',
     "INVALID_ARGUMENT: Illegal setting neither ModelServerConfig::model_type (deprecated) nor "
     "ModelServerConfig::model_platform, model name is m"),
    ('config { name: "m" base_path: "/models/m" model_platform: "pytorch" } ',
     "INVALID_ARGUMENT: Model m requests unsupported platform pytorch"),
    # At start-up no version is available yet: a label needs the flag.
    (model("m", "/models/m", 'version_labels { key: "stable" value: 1 } '),
     "FAILED_PRECONDITION: Request to assign label to version 1 of model m, which is not currently available "
     "for inference"),
], ids=["same-name", "relative-path", "no-platform", "other-platform", "label"])
def test_a_config_server_core_refuses_fails_the_start(tmp_path, entries, status):
    code, lines = serve(f"--model_config_file={config_file(tmp_path, f'model_config_list {{ {entries}}}')}")
    assert code == 255 and lines[-1] == FAILED + status, lines


@pytest.mark.parametrize("flag, proto", [
    ("--batching_parameters_file", "tensorflow.serving.BatchingParameters"),
    ("--monitoring_config_file", "tensorflow.serving.MonitoringConfig"),
    ("--ssl_config_file", "tensorflow.serving.SSLConfig"),
])
def test_other_start_up_files_name_their_proto_type(tmp_path, flag, proto):
    bad = tmp_path / "bad.config"
    bad.write_text("no_such_field: 1")
    extra = ["--enable_batching"] if flag == "--batching_parameters_file" else []
    code, lines = serve("--model_base_path=/models/m", f"{flag}={bad}", *extra)
    assert code == 255, lines
    assert any(line.endswith(f'Error parsing text-format {proto}: 1:1: Message type "{proto}" has no field named '
                             '"no_such_field".') for line in lines), lines
    assert lines[-1] == f"{FAILED}INVALID_ARGUMENT: Invalid protobuf file: '{bad}'"


def test_a_version_that_fails_every_load_retry_fails_the_start(tmp_path):
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "saved_model.pb").write_bytes(b"not a SavedModel")
    started = time.monotonic()
    code, lines = serve("--model_name=m", f"--model_base_path={tmp_path / 'm'}", "--max_num_load_retries=1",
                        "--load_retry_interval_micros=500000")
    assert code == 255, lines
    assert sum("failed to load m version 1" in line for line in lines) == 2, lines  # the first try and one retry
    assert time.monotonic() - started > 0.5
    assert lines[-1].startswith(f"{FAILED}UNKNOWN: 1 servable(s) did not become available: "
                                "{{{name: m version: 1} due to error: "), lines  # "{", then "{" + the id's
    assert lines[-1].endswith("}, }"), lines


def test_the_ports_open_once_the_models_are_loaded(tmp_path):
    """A model without versions is waited for, ports closed (as TF Serving's
    WaitUntilServablesReachState), and logged once (TF Serving logs it at every poll; issue 87);
    its first version opens them."""
    from tests.serving_models import save_toy

    save_toy(str(tmp_path / "staging"), 2.0)
    grpc_port, rest_port = free_ports(2)
    log_path = tmp_path / "server.log"
    with open(log_path, "w") as log:
        process = subprocess.Popen([sys.executable, "-m", "serving", f"--port={grpc_port}",
                                    f"--rest_api_port={rest_port}", "--model_name=toy",
                                    f"--model_base_path={tmp_path / 'toy'}", "--file_system_poll_wait_seconds=0.2"],
                                   cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"},
                                   stdout=log, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 120
        while log_path.read_text().count(f"Could not find base path {tmp_path / 'toy'}") < 1:
            assert time.monotonic() < deadline and process.poll() is None, log_path.read_text()
            time.sleep(0.1)
        time.sleep(1.0)  # five more polls: not said again
        assert log_path.read_text().count(f"Could not find base path {tmp_path / 'toy'}") == 1
        assert process.poll() is None  # waiting, not failed
        with grpc.insecure_channel(f"127.0.0.1:{grpc_port}") as channel, \
                pytest.raises(grpc.FutureTimeoutError):  # no port yet
            grpc.channel_ready_future(channel).result(timeout=0.5)
        (tmp_path / "toy").mkdir()
        os.rename(tmp_path / "staging", tmp_path / "toy" / "1")
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{rest_port}/v1/models/toy", timeout=5) as response:
                    assert b'"AVAILABLE"' in response.read()
                    break
            except OSError:
                assert time.monotonic() < deadline and process.poll() is None, log_path.read_text()
                time.sleep(0.2)
    finally:
        process.terminate()
        process.wait(30)
    assert process.returncode == 0 and "Traceback" not in log_path.read_text()


def test_a_stopped_in_process_server_stops_while_it_waits_for_its_models(tmp_path):
    from serving.__main__ import run_server
    from serving.flags import ServerFlags

    grpc_port, rest_port = free_ports(2)
    ready, stop = threading.Event(), threading.Event()
    flags = ServerFlags(port=grpc_port, rest_api_port=rest_port, model_name="m", model_base_path=str(tmp_path / "m"),
                        file_system_poll_wait_seconds=0.1)
    thread = threading.Thread(target=run_server, args=(flags, ready, stop), daemon=True)
    thread.start()
    time.sleep(0.5)
    stop.set()
    thread.join(30)
    assert not thread.is_alive() and not ready.is_set()


def test_a_broken_config_reload_is_reported_in_one_line_without_a_traceback(tmp_path, caplog):
    from serving.__main__ import watch_model_config

    path = tmp_path / "models.config"
    good = f'model_config_list {{ {model("m", "/models/m")}}}'
    path.write_text(good)
    applied, stop = [], threading.Event()

    class Store:
        def reconfigure(self, configs):
            applied.append([c.name for c in configs])

    with caplog.at_level(logging.INFO, logger="serving"):
        thread = threading.Thread(target=watch_model_config, args=(Store(), str(path), 0.05, good, stop), daemon=True)
        thread.start()
        try:
            path.write_text("model_config_list { config {{ ")
            deadline = time.monotonic() + 10
            while "keeping the model config in force" not in caplog.text:
                assert time.monotonic() < deadline
                time.sleep(0.05)
        finally:
            stop.set()
    assert applied == [] and not any(record.exc_info for record in caplog.records)
    assert "Error parsing text-format tensorflow.serving.ModelServerConfig: 1:29: Expected identifier, got: {" \
        in caplog.text
    assert f"Failed to read ModelServerConfig file: Invalid protobuf file: '{path}'" in caplog.text


@pytest.mark.parametrize("holder_shares", [False, True], ids=["plain", "so_reuseport"])
def test_a_grpc_port_in_use_fails_the_start(tmp_path, holder_shares):
    import socket

    taken = socket.socket()
    # A holder that allows sharing (another gRPC server: gRPC's default) must not be joined.
    taken.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, int(holder_shares))
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        result = subprocess.run([sys.executable, "-m", "serving", f"--port={taken.getsockname()[1]}",
                                 f"--model_config_file={config_file(tmp_path, 'model_config_list {}')}"],
                                cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True,
                                timeout=120)
    finally:
        taken.close()
    assert result.returncode == 255 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.splitlines()[-1] == f"{FAILED}INVALID_ARGUMENT: Failed to BuildAndStart gRPC server"
