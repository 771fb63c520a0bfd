"""Issue 87: the admin surface cannot take the server down. A model of 10,000 version folders
(empty saved_model.pb files, policy all) costs the other models nothing: requests read a
snapshot and never wait for the manager's bookkeeping, and a config change does not wait for
the poll pass to try every version."""

import collections
import threading

import numpy as np
import pytest

from serving.manager import ModelManager
from serving.source import ModelConfig
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

    def counted(name, version, path):
        tried.append(version)
        if len(tried) == 100:
            started.set()
        return load(name, version, path)

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
