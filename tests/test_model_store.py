"""The model store: warm-up replay before a version is served, load retries, the warm standby copy."""

import logging
import os
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from conftest import ROOT
from kerasbert.warmup_requests import predict_request, write_warmup_requests
from serving.manager import ModelManager
from serving.servable import program_key
from serving.source import ModelConfig
from serving.warmup import read_warmup_requests, replay_warmup_requests
from tests.serving_models import Counted, save_toy


def save_counted(path, warmups: int):
    counted = Counted()
    tf.saved_model.save(counted, str(path), signatures={"serving_default": counted.identity, "count": counted.count})
    write_warmup_requests(str(path), [predict_request("serving_default", {"x": np.ones(3, np.float32)})] * warmups)


def calls_of(servable) -> int:
    """How often a Counted version's serving_default has run."""
    return int(servable.run("count", {})["calls"])


def test_warmup_requests_run_before_the_version_is_served(tmp_path):
    save_counted(tmp_path / "m" / "1", warmups=2)
    assert len(read_warmup_requests(str(tmp_path / "m" / "1"))) == 2
    for warmup, calls in ((True, 2), (False, 0)):
        store = ModelManager([ModelConfig(name="m", base_path=str(tmp_path / "m"))], warmup=warmup)
        store.poll()
        assert calls_of(store.get("m")) == calls


def test_the_same_warmup_requests_write_the_same_bytes_in_every_process(tmp_path):
    """An export repeats byte for byte: a request's inputs (a protobuf map, whose order is
    the process's) serialize alike in fresh processes (two, with their own hash seeds) and here."""
    inputs = {"question": [b"who?"], "context": [b"Ann."], "id": [b"1"]}
    code = f"import sys; from kerasbert.warmup_requests import predict_request, write_warmup_requests; " \
           f"write_warmup_requests(sys.argv[1], [predict_request('answer', {inputs!r})])"
    runs = [subprocess.Popen([sys.executable, "-c", code, str(tmp_path / str(seed))], cwd=ROOT,
                             env={**os.environ, "PYTHONHASHSEED": str(seed)}) for seed in range(2)]
    write_warmup_requests(str(tmp_path / "here"), [predict_request("answer", inputs)])
    assert [run.wait(timeout=120) for run in runs] == [0] * 2
    written = {(tmp_path / folder / "assets.extra" / "tf_serving_warmup_requests").read_bytes()
               for folder in ("0", "1", "here")}
    assert len(written) == 1


def test_a_broken_warmup_file_fails_the_load_not_the_server(tmp_path):
    save_counted(tmp_path / "m" / "1", warmups=1)
    bad = predict_request("no_such_signature", {"x": np.ones(1, np.float32)})
    write_warmup_requests(str(tmp_path / "m" / "1"), [bad])
    store = ModelManager([ModelConfig(name="m", base_path=str(tmp_path / "m"))])
    store.poll()
    status = store.status("m").model_version_status[0]
    assert status.status.error_code == 13 and "no_such_signature" in status.status.error_message


def test_a_failed_load_is_tried_again_after_the_retry_interval(tmp_path, caplog):
    # A version caught half-written: saved_model.pb is there, variables/ not yet.
    save_counted(tmp_path / "whole" / "1", warmups=0)
    (tmp_path / "m" / "1").mkdir(parents=True)
    (tmp_path / "m" / "1" / "saved_model.pb").write_bytes((tmp_path / "whole" / "1" / "saved_model.pb").read_bytes())
    store = ModelManager([ModelConfig(name="m", base_path=str(tmp_path / "m"))], max_load_retries=2,
                       load_retry_seconds=1.0)
    store.poll()
    assert store.status("m").model_version_status[0].status.error_code == 13

    (tmp_path / "m" / "1").rename(tmp_path / "half")
    (tmp_path / "whole" / "1").rename(tmp_path / "m" / "1")  # the copy completes
    store.poll()  # too soon: the retry waits its interval
    assert store.status("m").model_version_status[0].status.error_code == 13
    time.sleep(1.1)
    store.poll()
    assert store.get("m").version == 1
    assert store.status("m").model_version_status[0].status.error_code == 0

    # A version that stays broken is tried max_load_retries more times, then left alone.
    (tmp_path / "m" / "2").mkdir()
    (tmp_path / "m" / "2" / "saved_model.pb").write_bytes(b"not a SavedModel")
    config = ModelConfig(name="m", base_path=str(tmp_path / "m"))
    config.model_version_policy.all.SetInParent()
    store = ModelManager([config], max_load_retries=2, load_retry_seconds=0.0)
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="serving.manager"):
        for _ in range(5):
            store.poll()
    # Logged when it first fails and when it runs out of tries; the identical try between counted.
    errors = [r.getMessage() for r in caplog.records if r.levelno == logging.ERROR]
    assert [e.startswith("failed to load m version 2") for e in errors] == [True, True]
    assert errors[-1].endswith("(no tries left)")
    assert "repeated 1 more times since logged (('m', 'load', 2))" in caplog.text
    assert caplog.text.count("loaded m version 1") == 1 and store.get("m").version == 1

    # Out of tries; removed and exported again, the version is tried afresh.
    (tmp_path / "m" / "2").rename(tmp_path / "broken")
    store.poll()
    (tmp_path / "m" / "1").rename(tmp_path / "m" / "2")
    store.poll()
    assert store.get("m").version == 2 and len(store.status("m").model_version_status) == 1


def wait_for_spare(store, name, seconds=60):
    deadline = time.time() + seconds
    while not store.spare_ready(name):
        assert time.time() < deadline, "the standby copy was never ready"
        time.sleep(0.05)


def test_standby_copy_takes_a_new_version_with_the_same_program(tmp_path, caplog):
    base = tmp_path / "toy"
    save_toy(str(base / "1"), scale=2.0)
    config = ModelConfig(name="toy", base_path=str(base))
    config.model_version_policy.all.SetInParent()
    store = ModelManager([config], standby=True)
    store.poll()
    wait_for_spare(store, "toy")
    save_toy(str(base / "2"), scale=3.0)  # retrained weights, same graph
    assert program_key(str(base / "1")) == program_key(str(base / "2"))
    with caplog.at_level(logging.INFO, logger="serving.manager"):
        store.poll()
    assert "toy version 2: weights restored into the standby copy" in caplog.text
    x = {"x": np.array([[1.0, 2.0]], np.float32)}
    np.testing.assert_allclose(store.get("toy", 2).run("serving_default", x)["y"], [[3.0, 6.0]])
    np.testing.assert_allclose(store.get("toy", 1).run("serving_default", x)["y"], [[2.0, 4.0]])
    assert store.get("toy", 2).loaded is not store.get("toy", 1).loaded

    # A different program is loaded in full, never into a copy of another graph.
    wait_for_spare(store, "toy")
    save_counted(base / "3", warmups=1)
    assert program_key(str(base / "3")) != program_key(str(base / "2"))
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="serving.manager"):
        store.poll()
    assert "restored into the standby copy" not in caplog.text
    assert calls_of(store.get("toy", 3)) == 1


def test_classify_and_regress_warmup_records_replay(tmp_path):
    from tensorflow_serving.apis import classification_pb2, regression_pb2

    save_toy(str(tmp_path / "toy" / "1"), scale=1.0)
    requests = [classification_pb2.ClassificationRequest(), regression_pb2.RegressionRequest()]
    for request, signature in zip(requests, ("classify", "regress")):
        request.model_spec.signature_name = signature
        request.input.example_list.examples.add().features.feature["x"].float_list.value.extend([1.0, 2.0])
    write_warmup_requests(str(tmp_path / "toy" / "1"), requests)
    store = ModelManager([ModelConfig(name="toy", base_path=str(tmp_path / "toy"))])
    store.poll()
    assert store.status("toy").model_version_status[0].status.error_code == 0
    assert replay_warmup_requests(store.get("toy")) == 2
    # A record the signature cannot take (three values for a 2-value feature) fails that version's load.
    requests[1].input.example_list.examples[0].features.feature["x"].float_list.value.append(3.0)
    save_toy(str(tmp_path / "toy" / "2"), scale=1.0)
    write_warmup_requests(str(tmp_path / "toy" / "2"), requests)
    store.poll()
    assert store.status("toy", 2).model_version_status[0].status.error_code == 13


def test_the_served_version_stays_until_a_newer_one_serves(tmp_path):
    """TF Serving's availability-preserving policy: a broken or half-copied newest version,
    or the served version's folder deleted, never leaves the model without a version."""
    import shutil

    base = tmp_path / "toy"
    for version in (1, 2):
        save_toy(str(base / str(version)), scale=version)
    store = ModelManager([ModelConfig(name="toy", base_path=str(base))], load_retry_seconds=3600)
    store.poll()
    assert store.get("toy").version == 2

    (base / "3").mkdir()
    (base / "3" / "saved_model.pb").write_bytes(b"corrupt")  # broken newest version
    store.poll()
    assert store.get("toy").version == 2 and store.status("toy", 3).model_version_status[0].status.error_code

    shutil.rmtree(base / "3")
    served = store.get("toy")
    shutil.rmtree(base / "2")  # the served version's folder deleted mid-flight
    x = {"x": np.array([[1.0, 1.0]], np.float32)}
    np.testing.assert_allclose(served.run("serving_default", x)["y"], [[2.0, 2.0]])  # still answers
    store.poll()  # loads version 1 before letting version 2 go
    assert store.get("toy").version == 1
    shutil.rmtree(base / "1")
    store.poll()  # no version wanted at all: unloaded, as TF Serving does
    with pytest.raises(LookupError):
        store.get("toy")


def serves(store, name, version=None):
    try:
        return store.get(name, version) is not None
    except LookupError:
        return False


def wait_until(condition, seconds=120):
    deadline = time.time() + seconds
    while not condition():
        assert time.time() < deadline, "timed out"
        time.sleep(0.05)


def test_a_changed_model_config_is_applied_and_a_broken_one_ignored(tmp_path, caplog, request):
    import threading

    from serving.__main__ import watch_model_config
    from serving.source import parse_model_config_text

    for name in ("a", "b"):
        for version in (1, 2):
            save_toy(str(tmp_path / name / str(version)), scale=version)
    config_file = tmp_path / "models.config"
    one = f'model_config_list {{ config {{ name: "a" base_path: "{tmp_path / "a"}" model_platform: "tensorflow" }} }}'
    config_file.write_text(one)
    store = ModelManager(parse_model_config_text(one))
    store.poll()
    stop = threading.Event()
    watcher = threading.Thread(target=watch_model_config, args=(store, str(config_file), 0.05, one, stop), daemon=True)
    watcher.start()
    request.addfinalizer(lambda: (stop.set(), watcher.join(10)))  # the watch ends with the test

    two = one.replace(" } }", f' model_version_policy {{ all {{}} }} }} config {{ name: "b" base_path: '
                               f'"{tmp_path / "b"}" model_platform: "tensorflow" }} }}')
    config_file.write_text(two)  # a second model, and every version of the first
    wait_until(lambda: serves(store, "b") and serves(store, "a", 1))
    assert store.get("b").version == 2 and store.get("a", 1).version == 1

    with caplog.at_level(logging.ERROR, logger="serving"):
        config_file.write_text(two.replace("config {", "config {{", 1))  # a syntax error
        wait_until(lambda: "keeping the model config in force" in caplog.text)
        # An empty file (as a writer leaves it between truncating and writing) is refused
        # too, as ServerCore::ReloadConfig refuses a config that is not a ModelConfigList.
        config_file.write_text("")
        wait_until(lambda: "only legal to transition" in caplog.text)
    assert store.get("b").version == 2 and store.get("a", 1).version == 1  # nothing changed

    config_file.write_text(one)  # the second model dropped again
    wait_until(lambda: not serves(store, "b"))
    assert store.get("a").version == 2


@pytest.mark.parametrize("base", ["typo", "toy/1"])
def test_a_server_with_no_versions_to_serve_says_so_once(tmp_path, caplog, base):
    """As TF Serving, the server waits for the model's first version before it opens its
    ports (ServerCore waits for every configured model), and logs why; where TF Serving logs
    it again at every poll, here it is said once and its repeats counted (issue 87: 10,000
    models at a missing path logged 1.5 MB a second)."""
    import threading

    from helpers import free_ports
    from serving.__main__ import ServerFlags, run_server

    save_toy(str(tmp_path / "toy" / "1"), 2.0)
    base_path = str(tmp_path / base)

    def said():
        return [r.getMessage() for r in caplog.records if f"base path {base_path}" in r.getMessage()]

    grpc_port, rest_port = free_ports(2)
    flags = ServerFlags(port=grpc_port, rest_api_port=rest_port, model_name="toy", model_base_path=base_path,
                        file_system_poll_wait_seconds=0.1)
    ready, stop = threading.Event(), threading.Event()
    with caplog.at_level(logging.WARNING, logger="serving.source"):
        server = threading.Thread(target=run_server, args=(flags, ready, stop), daemon=True)
        server.start()
        try:
            stop.wait(2)  # some 20 polls
        finally:
            stop.set()
            server.join(30)
    assert len(said()) == 1  # at start-up only
    assert not ready.is_set() and not server.is_alive()  # never served; stopped while it waited
    if base == "typo":
        assert f"Could not find base path {base_path} for servable toy" in said()[-1]
    else:
        assert f"No versions of servable toy found under base path {base_path}." in said()[-1]
        assert f"pass its parent, {tmp_path / 'toy'}, as the base path" in said()[-1]
