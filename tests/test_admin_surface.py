"""Issue 87: the admin surface cannot take the server down. A model of 10,000 version folders
(empty saved_model.pb files, policy all) costs the other models nothing: requests read a
snapshot and never wait for the manager's bookkeeping, and a config change does not wait for
the poll pass to try every version."""

import collections
import os
import threading
import time

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import (get_model_status_pb2, model_management_pb2, model_pb2, model_service_pb2_grpc,
                                     predict_pb2, prediction_service_pb2_grpc)
from tensorflow_serving.config import model_server_config_pb2

from serving.manager import ModelManager
from serving.metrics import ServingMetrics
from serving.model_memory import ModelMemory, estimate_ram_bytes
from serving.source import ModelConfig
from serving_helpers import Server
from tests.serving_models import save_toy

VERSIONS = 10_000  # the old manager held its lock ~1 s a poll for these (quadratic bookkeeping)


class WatchedLock:
    """A lock that counts, by thread name, the acquisitions that found it held."""

    def __init__(self):
        self._lock = threading.Lock()
        self.waited = collections.Counter()

    def acquire(self, blocking=True, timeout=-1):
        if self._lock.acquire(blocking=False):
            return True
        self.waited[threading.current_thread().name] += 1
        return self._lock.acquire(blocking, timeout)

    def release(self):
        self._lock.release()

    def __enter__(self):
        self.acquire()
        return self

    def __exit__(self, *exc):
        self.release()


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    root = tmp_path_factory.mktemp("versions")
    save_toy(str(root / "toy" / "1"), 2.0)
    for version in range(1, VERSIONS + 1):
        (root / "big" / str(version)).mkdir(parents=True)
        (root / "big" / str(version) / "saved_model.pb").touch()
    return root


def configs(bases, big=True):
    toy = ModelConfig(name="toy", base_path=str(bases / "toy"), model_platform="tensorflow")
    if not big:
        return [toy]
    many = ModelConfig(name="big", base_path=str(bases / "big"), model_platform="tensorflow")
    many.model_version_policy.all.SetInParent()
    return [toy, many]


def test_requests_never_wait_while_a_model_of_10000_versions_is_polled(bases, caplog):
    manager = ModelManager(configs(bases, big=False), warmup=False, max_load_retries=0)
    manager.poll()
    manager._lock = WatchedLock()
    polled = threading.Thread(target=manager.reconfigure, args=(configs(bases),), name="poll")
    polled.start()
    threading.current_thread().name, requests = "requests", 0
    try:
        while polled.is_alive() or requests == 0:
            servable = manager.get("toy")
            assert servable.run("serving_default", {"x": np.ones((1, 2), np.float32)})["y"].tolist() == [[2.0, 2.0]]
            requests += 1
    finally:
        threading.current_thread().name = "MainThread"
        polled.join()
    status = manager.status("big").model_version_status
    assert len(status) == VERSIONS and status[0].version == VERSIONS and status[0].status.error_code == 13
    assert manager._lock.waited["requests"] == 0, (requests, manager._lock.waited)


def test_a_config_change_does_not_wait_for_a_poll_of_10000_versions(bases, monkeypatch):
    manager = ModelManager(configs(bases), warmup=False, max_load_retries=0)
    tried, started = [], threading.Event()
    load = manager._try_load

    def counted(name, version, path, *estimates):
        tried.append(version)
        if len(tried) == 100:
            started.set()
        return load(name, version, path, *estimates)

    monkeypatch.setattr(manager, "_try_load", counted)
    polled = threading.Thread(target=manager.poll)
    polled.start()
    assert started.wait(120)
    manager.reconfigure(configs(bases, big=False))  # the big model dropped: its pass ends early
    assert len(tried) < VERSIONS
    polled.join()
    assert manager.get("toy").version == 1
    with pytest.raises(LookupError):
        manager.status("big")


def series(metrics: ServingMetrics) -> list[str]:
    """The series of `metrics`' page (name and labels, without their values)."""
    return [line.rsplit(" ", 1)[0] for line in metrics.exposition().decode().splitlines()
            if line and not line.startswith("#")]


def test_the_metrics_series_of_a_hostile_config_are_released_when_it_is_replaced(bases, tmp_path):
    """Issue 87's bench: after a ReloadConfig of 10,000 models and 10,000 empty versions was
    replaced, the server kept 10,000 more series (a failed load's count, by version path) for good."""
    for version in range(1, 51):
        (tmp_path / "empty" / str(version)).mkdir(parents=True)
        (tmp_path / "empty" / str(version) / "saved_model.pb").touch()
    empty = ModelConfig(name="empty", base_path=str(tmp_path / "empty"), model_platform="tensorflow")
    empty.model_version_policy.all.SetInParent()
    toy, copy = (ModelConfig(name=name, base_path=str(bases / "toy"), model_platform="tensorflow")
                 for name in ("toy", "copy"))
    metrics = ServingMetrics()
    manager = ModelManager([toy], warmup=False, max_load_retries=0, metrics=metrics)
    manager.poll()
    metrics.request("toy", "predict", "REST", "OK", seconds=0.01)
    idle = series(metrics)
    manager.reconfigure([toy, copy, empty])
    metrics.request("copy", "predict", "REST", "OK", seconds=0.01)
    assert len(series(metrics)) > len(idle) + 50  # a failed load's count per empty version; copy's requests
    manager.reconfigure([toy])
    assert series(metrics) == idle


def test_a_poll_lists_a_base_path_that_many_models_share_once(bases, monkeypatch):
    """Issue 87's bench: each poll pass listed the one export that 10,000 models named 10,000
    times, every second, while the config was in force."""
    copies = [ModelConfig(name=f"copy{i}", base_path=str(bases / "toy"), model_platform="tensorflow")
              for i in range(100)]
    manager = ModelManager(copies, warmup=False, memory=ModelMemory(0))  # every load refused
    manager.poll()
    listed = collections.Counter()
    listdir = os.listdir
    monkeypatch.setattr(os, "listdir", lambda path: listed.update([str(path)]) or listdir(path))
    manager.poll()
    assert listed == {str(bases / "toy"): 1}


def model_server_config(**bases):
    """A ModelServerConfig of the models `bases` names (name -> base path)."""
    config = model_server_config_pb2.ModelServerConfig()
    for name, base in bases.items():
        config.model_config_list.config.add(name=name, base_path=str(base), model_platform="tensorflow")
    return config


def toy_predict(channel, timeout):
    request = predict_pb2.PredictRequest()
    request.model_spec.name = "toy"
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(np.array([[1.0, 2.0]], np.float32)))
    stub = prediction_service_pb2_grpc.PredictionServiceStub(channel)
    return stub.Predict(request, timeout=timeout).outputs["y"].float_val


def test_admin_calls_cannot_starve_requests_and_one_reload_runs_at_a_time(bases, tmp_path):
    """Issue 87: ten ReloadConfigs waiting on a model that never loads held every gRPC
    thread; other clients' Predict and GetModelStatus timed out (10 s, 5 s)."""
    (tmp_path / "empty").mkdir()  # a model with no version yet: its reload waits for one
    server = Server(model_name="toy", model_base_path=str(bases / "toy"), grpc_max_threads=2)
    models = model_service_pb2_grpc.ModelServiceStub(server.channel)
    waiting = model_management_pb2.ReloadConfigRequest(
        config=model_server_config(toy=bases / "toy", waiting=tmp_path / "empty"))
    try:
        running = models.HandleReloadConfigRequest.future(waiting)  # no deadline: waits for "waiting"
        time.sleep(0.5)
        others = [models.HandleReloadConfigRequest.future(waiting, timeout=timeout) for timeout in [60] * 9 + [None]]
        time.sleep(0.5)
        assert [toy_predict(server.channel, timeout=5) for _ in range(3)] == [[2.0, 4.0]] * 3
        refused = [call for call in others if call.done()]
        # beyond the admin threads, or without a deadline: UNAVAILABLE at once
        assert len(refused) >= 6 and {call.code() for call in refused} == {grpc.StatusCode.UNAVAILABLE}
        assert others[-1] in refused
        assert not running.done()
        running.cancel()
        for call in others:
            call.cancel()
        deadline = time.monotonic() + 30
        while True:  # the admin threads free again once the waiting calls see their cancel
            try:
                status = models.GetModelStatus(get_model_status_pb2.GetModelStatusRequest(
                    model_spec=model_pb2.ModelSpec(name="toy")), timeout=5)
                break
            except grpc.RpcError as error:
                assert error.code() == grpc.StatusCode.UNAVAILABLE and time.monotonic() < deadline
                time.sleep(0.2)
        assert status.model_version_status[0].state == get_model_status_pb2.ModelVersionStatus.AVAILABLE
        restore = model_management_pb2.ReloadConfigRequest(config=model_server_config(toy=bases / "toy"))
        assert models.HandleReloadConfigRequest(restore, timeout=30).status.error_code == 0
    finally:
        server.close()


def test_loads_beyond_the_model_memory_budget_are_refused_resource_exhausted(bases, caplog, monkeypatch):
    """Issue 87: one ReloadConfig of 10,000 models pointing at one export loaded 6,286 copies
    (6 GB) before it was killed; ServerCore admits loads against total_model_memory_limit_bytes."""
    monkeypatch.setattr("serving.manager.resident_bytes", lambda: 0)  # loads that cost their estimate
    estimate = estimate_ram_bytes(str(bases / "toy" / "1"))
    assert estimate > 1.2 * os.path.getsize(bases / "toy" / "1" / "saved_model.pb")
    copies = [ModelConfig(name=f"copy{i}", base_path=str(bases / "toy"), model_platform="tensorflow")
              for i in range(10)]
    manager = ModelManager(copies, warmup=False, memory=ModelMemory(int(2.5 * estimate)))
    manager.poll()
    assert [manager.get(f"copy{i}").version for i in range(2)] == [1, 1]
    assert manager.memory.used == 2 * estimate
    for i in range(2, 10):
        [status] = manager.status(f"copy{i}").model_version_status
        assert status.status.error_code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
        assert status.status.error_message.startswith(f"Insufficient resources to load servable {{name: copy{i} "
                                                      "version: 1}: its RAM estimate")
    refused = [r for r in caplog.records if "Insufficient resources" in r.getMessage()]
    assert len(refused) == 8 and {r.levelname for r in refused} == {"ERROR"}
    manager.poll()  # not tried again, as a harness refused its resources ends in error
    assert len([r for r in caplog.records if "Insufficient resources" in r.getMessage()]) == 8
    manager.reconfigure(copies[1:2])  # copy0 unloaded: its reservation returned
    assert manager.memory.used == estimate


def test_a_copy_is_charged_what_a_load_of_its_export_took(bases, monkeypatch):
    """Issue 87's bench: a budget of 4 x the files' estimate admitted 3 more copies of a tiny
    export, each 1.2 x 0.6 MB by the estimate and ~225 MiB in the server (+984 MiB in all)."""
    estimate = estimate_ram_bytes(str(bases / "toy" / "1"))
    resident = iter(range(0, 10**9, 50 * estimate))  # each load grows the process by 50 x its estimate
    monkeypatch.setattr("serving.manager.resident_bytes", lambda: next(resident))
    copies = [ModelConfig(name=f"copy{i}", base_path=str(bases / "toy"), model_platform="tensorflow")
              for i in range(10)]
    manager = ModelManager(copies, warmup=False, memory=ModelMemory(100 * estimate))
    manager.poll()
    loaded = [i for i in range(10) if manager.status(f"copy{i}").model_version_status[0].status.error_code == 0]
    assert loaded == [0, 1] and manager.memory.used == 100 * estimate  # each charged what it took
    [status] = manager.status("copy2").model_version_status
    assert status.status.error_code == grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]
    assert f"its RAM estimate, {50 * estimate} bytes" in status.status.error_message


def test_a_reload_beyond_the_budget_says_what_it_could_not_load_and_keeps_what_serves(bases, monkeypatch):
    monkeypatch.setattr("serving.manager.resident_bytes", lambda: 0)  # loads that cost their estimate
    estimate = estimate_ram_bytes(str(bases / "toy" / "1"))
    server = Server(model_name="toy", model_base_path=str(bases / "toy"),
                    total_model_memory_limit_bytes=int(2.5 * estimate))
    try:
        models = model_service_pb2_grpc.ModelServiceStub(server.channel)
        request = model_management_pb2.ReloadConfigRequest(
            config=model_server_config(toy=bases / "toy", **{f"copy{i}": bases / "toy" for i in range(5)}))
        with pytest.raises(grpc.RpcError) as raised:
            models.HandleReloadConfigRequest(request, timeout=60)
        assert raised.value.code() == grpc.StatusCode.UNKNOWN
        details = raised.value.details()
        assert details.startswith("4 model(s) did not become available: {{{name: copy1 version: 1} due to error: "
                                  "RESOURCE_EXHAUSTED: Insufficient resources to load servable {name: copy1 "
                                  "version: 1}"), details
        assert toy_predict(server.channel, timeout=10) == [2.0, 4.0]
        assert server.request("/v1/models/copy0:predict", {"instances": [[1.0, 2.0]]})[0] == 200
    finally:
        server.close()


def test_a_call_without_a_deadline_has_none():
    """grpc tells a call without a deadline as ~10^10 s remaining; waited for, that overflowed
    (a ReloadConfig waiting for the decoding budget: INTERNAL "timestamp out of range")."""
    from serving.grpc_server import _deadline

    class Context:
        def __init__(self, remaining):
            self.remaining = remaining

        def time_remaining(self):
            return self.remaining

    assert _deadline(Context(None)) is None and _deadline(Context(1e10)) is None
    assert 0 < _deadline(Context(5.0)) - time.monotonic() <= 5.0

