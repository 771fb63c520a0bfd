"""The manager of loaded versions (TF Serving's AspiredVersionsManager behind ServerCore),
shared by the REST and gRPC front ends.

Each configured model has a base path of integer version folders and a version
policy (TF Serving's: latest N, all, or specific versions) plus optional labels.
A poll thread loads versions as they appear and unloads those the policy drops once a
wanted version serves (TF Serving's availability-preserving policy). A request takes a
reference to one `Servable`; unloading only removes it from the
table, so requests in flight finish on the version they started with. A version
that fails to load is tried again later (5 more times, a minute apart, by default).
`start()` returns once every model has a version loaded, as ServerCore waits for the
first config's models before the server listens; a version out of tries by then fails it.

As TF Serving does, a version's warm-up requests (`assets.extra/
tf_serving_warmup_requests`) are replayed before it is served. With `standby`, the
manager also keeps one spare, loaded and warmed copy of each model's newest version.
A new version with the same program (the fingerprint's graph, signature and object
hashes, and the same assets: a retrained model, re-exported) then only needs its
weights restored into the spare, about 0.3 s, instead of a full load and warm-up.
The spare costs one more copy of the weights in memory.

Which versions exist and are wanted is the source's (serving/source.py); a loaded
version is a `Servable` (serving/servable.py).

Example:
    >>> manager = ModelManager([ModelConfig(name="toy", base_path=toy_models, model_platform="tensorflow")])
    >>> manager.start()  # once every model has a version loaded and warmed up
    True
    >>> servable = manager.get("toy")  # the latest version; or version=N, or label="stable"
    >>> servable.version, servable.run("serving_default", servable.check_inputs("serving_default", {"x": [[1.0, 2.0]]}))
    (1, {'rows': array([1]), 'y': array([[2., 4.]], dtype=float32)})
    >>> manager.stop()
"""

from __future__ import annotations

import concurrent.futures
import logging
import threading
import time
import types
from typing import NamedTuple

import grpc
from tensorflow_serving.apis import get_model_metadata_pb2, get_model_status_pb2

from serving.model_memory import ModelMemory, default_memory_limit, estimate_ram_bytes, resident_bytes
from serving.repeated_log import RepeatedLog
from serving.servable import Servable, program_key
from serving.session import check_deadline
from serving.source import (ModelConfig, aspired_versions, check_model_config_list, check_no_platform_changes,
                            check_platforms_supported, model_configs)
from serving.status import (FailedPrecondition, InvalidArgument, NotFound, ResourceExhausted, ServingError, Unknown,
                            grpc_code, shown)
from serving.tflite import TfLiteServable, has_tflite_model
from serving.warmup import replay_warmup_requests

log = logging.getLogger(__name__)
MAX_LISTED = 20  # models a failed ReloadConfig names (then how many more)


class LoadFailure(NamedTuple):
    """The last failed load of a version, and when it may be tried again."""
    error: str
    retries: int  # tries made after the first
    next_try: float  # time.monotonic()
    status: str = ""  # the error as TF Serving's Status prints it: "<CODE>: <message>"
    code: grpc.StatusCode = grpc.StatusCode.INTERNAL  # as GetModelStatus and ReloadConfig tell it
    path: str = ""  # the version's folder


class ModelVersions(NamedTuple):
    """What requests read of one model: its loaded versions and the newest of them, built anew
    at each change and published whole, so a request reads it without a lock."""
    servables: types.MappingProxyType  # version -> Servable
    latest: Servable | None


NO_VERSIONS = ModelVersions(types.MappingProxyType({}), None)


class ModelsUnavailable(ServingError):
    """The first load of the configured models ended with a model that has no version
    available: one failed its load and every retry (load_servables_fast.cc)."""
    code = grpc.StatusCode.UNKNOWN


class ModelManager:
    """Versions of every configured model, kept in line with their base paths."""

    def __init__(self, configs: list[ModelConfig], poll_seconds: float = 1.0, warmup: bool = True,
                 standby: bool = False, max_load_retries: int = 5, load_retry_seconds: float = 60.0,
                 signature_method_name_check: bool = False, tags: tuple[str, ...] = ("serve",),
                 num_load_threads: int = 0, metrics=None, session_config=None, prefer_tflite: bool = False,
                 num_tflite_interpreters: int = 1, allow_version_labels_for_unavailable_models: bool = False,
                 memory: ModelMemory | None = None):
        self.configs = {config.name: config for config in configs}
        # ServerCore's ResourceTracker: every loaded version's estimated RAM within a total
        # (--total_model_memory_limit_bytes; by default half of the machine's memory).
        self.memory = memory if memory is not None else ModelMemory(default_memory_limit())
        # TF Serving's --allow_version_labels_for_unavailable_models, as a reload applies it
        # (ServerCore::UpdateModelVersionLabelMap).
        self.allow_version_labels_for_unavailable_models = allow_version_labels_for_unavailable_models
        self.tags = tags  # TF Serving's --saved_model_tags: the MetaGraphDef to load
        self.session_config = session_config  # a ConfigProto for every version's session, or None
        # TF Serving's --prefer_tflite_model: a version folder's model.tflite, where it has one,
        # is served (by --num_tflite_pools interpreters) rather than its SavedModel.
        self.prefer_tflite, self.num_tflite_interpreters = prefer_tflite, num_tflite_interpreters
        # TF Serving's --num_load_threads: 0 loads one version after another in the poll
        # thread; N loads up to N versions at once.
        self.num_load_threads = num_load_threads
        self.metrics = metrics  # serving.metrics.ServingMetrics, or None
        self.poll_seconds = poll_seconds
        self.warmup, self.standby = warmup, standby
        # TF Serving's --enable_signature_method_name_check: classify/regress only on signatures
        # whose method_name says so (off by default, as TF2 writes every signature as predict).
        self.signature_method_name_check = signature_method_name_check
        # As TF Serving's --max_num_load_retries / --load_retry_interval_micros: a version
        # caught half-written, or on a flaky file system, loads on a later try.
        self.max_load_retries, self.load_retry_seconds = max_load_retries, load_retry_seconds
        self._spares: dict[str, tuple[tuple, object]] = {}  # name -> (program key, loaded object)
        # The manager's own bookkeeping, changed under _lock (only dict and set operations
        # there: a model of 100,000 versions costs each change O(1), or O(its versions) once).
        self._servables: dict[str, dict[int, Servable]] = {name: {} for name in self.configs}
        self._failed: dict[str, dict[int, LoadFailure]] = {name: {} for name in self.configs}
        # What requests read: a ModelVersions per model, replaced (never changed) under _lock
        # and read without it, so no request waits for a load, an unload or a config change.
        self._published: dict[str, ModelVersions] = {}
        self._lock = threading.Lock()
        self._poll_lock = threading.Lock()
        self._reconfiguring = threading.Event()  # a config change waits: a poll pass stops early
        # A poll's findings and a version's failed loads, logged once while they stay the same.
        self._source_said = RepeatedLog(logging.getLogger("serving.source"))
        self._said = RepeatedLog(log)
        self._config_lock = threading.RLock()  # one change of config at a time (ServerCore's config_mu_)
        self._stop = threading.Event()
        self._poll_soon = threading.Event()  # the poll thread's next pass starts now
        self._thread: threading.Thread | None = None

    # --- Versions ---------------------------------------------------------------------

    @staticmethod
    def versions_to_unload(wanted: set[int], loaded: set[int]) -> list[int]:
        """TF Serving's availability-preserving policy (availability_preserving_policy.cc): a
        version no longer wanted is unloaded once a wanted version serves, or when no version
        is wanted at all; until then the newest of them keeps serving. A new version that is
        half-copied or broken, or the served version's folder deleted, then loses no request.

        >>> ModelManager.versions_to_unload(wanted={3}, loaded={1, 2})  # 3 not loaded (yet)
        [1]
        >>> ModelManager.versions_to_unload(wanted={3}, loaded={2, 3})
        [2]
        """
        unwanted = sorted(loaded - wanted)
        if not wanted or not loaded.isdisjoint(wanted):
            return unwanted
        return unwanted[:-1]

    def poll(self) -> None:
        """Loads wanted versions (the source's aspired_versions) not yet loaded; unloads loaded
        ones no longer wanted."""
        with self._poll_lock:  # one pass at a time: the poll thread's, or a reconfigure's
            wanted, loads, estimates, listings = {}, [], {}, {}  # estimates, listings: once a pass by path
            for name, config in self.configs.items():
                paths = aspired_versions(config, self._source_said, listings)
                wanted[name] = set(paths)
                loads += [(name, version, paths[version]) for version in paths
                          if version not in self._servables[name] and self._load_due(name, version)]
            if self.num_load_threads > 0 and len(loads) > 1:
                with concurrent.futures.ThreadPoolExecutor(self.num_load_threads, thread_name_prefix="load") as pool:
                    loaded = list(pool.map(lambda load: self._load_unless_reconfiguring(*load, estimates), loads))
            else:
                loaded = [self._load_unless_reconfiguring(*load, estimates) for load in loads]
            newest = {model: path for (model, _, path), ok in zip(loads, loaded) if ok}
            dropped = False
            for name in self.configs:
                if self.standby and name in newest:  # one spare per model, of its newest version
                    threading.Thread(target=self._prepare_spare, args=(name, newest[name]), daemon=True,
                                     name=f"standby-{name}").start()
                dropped |= self._unload_unwanted(name, wanted[name])
            if dropped:
                self._release_metrics()

    def _load_unless_reconfiguring(self, name: str, version: int, path: str, estimates: dict) -> bool:
        """A poll pass's load; skipped (left to the next pass) once a config change waits. Then
        the GIL is offered to the request threads (a pass over 10,000 versions is Python work)."""
        try:
            return not self._reconfiguring.is_set() and self._try_load(name, version, path, estimates)
        finally:
            time.sleep(0)

    def _try_load(self, name: str, version: int, path: str, estimates: dict | None = None) -> bool:
        estimates = {} if estimates is None else estimates
        if path not in estimates:  # 10,000 models of one export: its files read once a pass
            estimates[path] = estimate_ram_bytes(path)
        # What a load of this path cost last, if more: a copy is charged what the first copy took.
        estimate = max(estimates[path], self.memory.measured(path))
        if not self.memory.reserve((name, version), estimate):  # BasicManager::ApproveLoad
            left = self.memory.left()
            self._record_failure(name, version, path, ResourceExhausted(
                f"Insufficient resources to load servable {{name: {shown(name)} version: {version}}}: its RAM "
                f"estimate, {estimate} bytes (1.2 x its files, or what its last load took), is over the "
                f"{max(left, 0)} bytes left of --total_model_memory_limit_bytes={self.memory.limit}"))
            return False
        started, resident = time.monotonic(), resident_bytes()
        try:
            servable = self._load(name, version, path)
        except Exception as error:  # a broken export must not take the server down
            self.memory.release((name, version))
            self._record_failure(name, version, path, error)
            if self.metrics is not None:
                self.metrics.load(path, False, time.monotonic() - started, model=name)
            return False
        if self.metrics is not None:
            self.metrics.load(path, True, time.monotonic() - started, model=name)
        self.memory.charge((name, version), path, resident_bytes() - resident)
        with self._lock:
            self._failed[name].pop(version, None)
            self._servables[name][version] = servable
            self._publish(name)
        self._said.clear((name, "load", version))
        log.info("loaded %s version %d from %s", name, version, path)
        return True

    def _publish(self, name: str) -> None:
        """Replaces what requests read of `name` (under _lock; one copy of its versions)."""
        servables = self._servables[name]
        self._published[name] = ModelVersions(types.MappingProxyType(dict(servables)),
                                              servables[max(servables)] if servables else None)

    def _unload_unwanted(self, name: str, wanted: set[int]) -> bool:
        """Unloads the versions of `name` the policy dropped, forgets failed loads of versions no
        longer wanted; True if it did either."""
        with self._lock:
            unload = self.versions_to_unload(wanted, self._servables[name].keys())
            for version in unload:
                # Requests holding this servable keep it alive until they finish.
                del self._servables[name][version]
                self.memory.release((name, version))
                log.info("unloaded %s version %d", name, version)
            if unload:
                self._publish(name)
            forgotten = self._failed[name].keys() - wanted
            for version in forgotten:
                del self._failed[name][version]  # exported again later: tried afresh
                self._said.clear((name, "load", version))
        return bool(unload or forgotten)

    def _release_metrics(self) -> None:
        """The metrics series of models no longer configured and of version paths no model holds
        (loaded, or failed and remembered) released: a hostile config's cost ends with it."""
        if self.metrics is None:
            return
        with self._lock:
            paths = {servable.path for versions in self._servables.values() for servable in versions.values()}
            paths.update(failure.path for failures in self._failed.values() for failure in failures.values())
            models = set(self.configs)
        self.metrics.keep_only(models, paths)

    def reconfigure(self, configs: list[ModelConfig], in_background: bool = False) -> None:
        """Takes a new model config list: new models are loaded by the next poll, dropped ones
        unloaded now, and changed version policies and labels apply from the next poll. That
        poll runs here, or `in_background` in the poll thread (if it runs), at once."""
        with self._config_lock:
            self._reconfiguring.set()  # a poll pass under way ends after the load it is in
            try:
                with self._poll_lock, self._lock:
                    self.configs = {config.name: config for config in configs}
                    for name in self.configs:
                        self._servables.setdefault(name, {})
                        self._failed.setdefault(name, {})
                    for name in self._servables.keys() - self.configs.keys():
                        for version in self._servables[name]:
                            self.memory.release((name, version))
                        del self._servables[name], self._failed[name]
                        self._published.pop(name, None)
                        self._spares.pop(name, None)
                        log.info("unloaded model %s: no longer in the config", name)
            finally:
                self._reconfiguring.clear()
            self._release_metrics()
        if in_background and self._thread is not None and self._thread.is_alive():
            self._poll_soon.set()
        else:
            self.poll()

    def reload_config(self, config, deadline: float | None = None, cancelled=None) -> None:
        """Applies a ModelServerConfig as ServerCore::ReloadConfig does (server_core.cc): a
        ModelConfigList only; its names unique, its base paths absolute, no model's platform
        changed, each label on a version now available, every platform served; else refused
        before anything changes. Then as `reconfigure`, and returns once every new model is
        available, or raises Unknown naming those whose newest version failed to load for good
        (every retry spent), the new config staying in force. TF Serving waits without end; here
        the wait ends at `deadline` or once `cancelled()` (the call's client gone)."""
        with self._config_lock:
            configs = model_configs(config, reloading=True)
            check_model_config_list(configs)
            check_no_platform_changes(list(self.configs.values()), configs)
            self._check_labels(configs)
            check_platforms_supported(configs)
            new_models = sorted(c.name for c in configs if c.name not in self.configs)
            # The loads run in the poll thread: a call cancelled, or past its deadline, ends
            # at once (a pass over 10,000 new models takes a while) and the next may stop that pass.
            self.reconfigure(configs, in_background=True)
            self._wait_until_available(new_models, deadline, cancelled)

    def _check_labels(self, configs: list[ModelConfig]) -> None:
        """UpdateModelVersionLabelMap: a label names a version available now, unless
        allow_version_labels_for_unavailable_models (and then not moving an existing label)."""
        for config in configs:
            loaded = self._published.get(config.name, NO_VERSIONS).servables
            old = self.configs.get(config.name)
            for label, version in config.version_labels.items():
                allow = self.allow_version_labels_for_unavailable_models and not (
                    old is not None and label in old.version_labels and old.version_labels[label] != version)
                if not allow and version not in loaded:
                    raise FailedPrecondition(f"Request to assign label to version {version} of model {config.name}, "
                                             "which is not currently available for inference")

    def _newest_state(self, name: str) -> tuple[int, str | None] | None:
        """(version, None) once a version of `name` serves, (version, "<CODE>: error") once its
        newest settled version failed to load with no retry left; None while neither."""
        with self._lock:
            loaded = set(self._servables.get(name, {}))
            failed = {v: f"{f.code.name}: {f.error}" for v, f in self._failed.get(name, {}).items()
                      if f.retries >= self.max_load_retries}
        for version in sorted(loaded | set(failed), reverse=True):
            return version, (None if version in loaded else failed[version])
        return None

    def _wait_until_available(self, names: list[str], deadline: float | None, cancelled) -> None:
        """ServerCore::WaitUntilModelsAvailable over the poll thread's loads and retries."""
        while True:
            states = {name: self._newest_state(name) for name in names}
            if all(state is not None for state in states.values()):
                break
            check_deadline(deadline, "while its new models loaded", cancelled)
            time.sleep(0.05)
        unavailable = {name: state for name, state in states.items() if state[1] is not None}
        if unavailable:  # the first MAX_LISTED of them, and how many more
            listed = list(unavailable.items())[:MAX_LISTED]
            more = f"... and {len(unavailable) - len(listed)} more, " if len(unavailable) > len(listed) else ""
            raise Unknown(f"{len(unavailable)} model(s) did not become available: {{"
                          + "".join(f"{{{{name: {shown(name)} version: {version}}} due to error: {error}}}, "
                                    for name, (version, error) in listed) + more + "}")

    def _load_due(self, name: str, version: int) -> bool:
        """True for a version never tried, or failed with retries left and its wait over."""
        failure = self._failed[name].get(version)
        return failure is None or (failure.retries < self.max_load_retries
                                   and time.monotonic() >= failure.next_try)

    def _record_failure(self, name: str, version: int, path: str, error: Exception) -> None:
        """A failed load, to be tried again later unless out of tries; a load refused for the
        memory budget is not tried again (its harness ends in error, as in TF Serving)."""
        previous = self._failed[name].get(version)
        retries = previous.retries + 1 if previous else 0
        if isinstance(error, ResourceExhausted):
            retries = self.max_load_retries
        left = self.max_load_retries - retries
        if left <= 0:  # giving up is news: told whatever was said before
            self._said.clear((name, "load", version))
        self._said.report((name, "load", version), logging.ERROR,
                          f"failed to load {name} version {version} from {path}: {error}",
                          f" (trying again in {self.load_retry_seconds:g} s; tries left: {left})" if left > 0
                          else " (no tries left)")
        with self._lock:
            self._failed[name][version] = LoadFailure(
                str(error), retries, time.monotonic() + self.load_retry_seconds, f"{grpc_code(error).name}: {error}",
                grpc.StatusCode.RESOURCE_EXHAUSTED if isinstance(error, ResourceExhausted) else grpc.StatusCode.INTERNAL,
                path)

    def _load(self, name: str, version: int, path: str) -> Servable:
        """A warmed Servable: the spare's graph with this version's weights, if they match."""
        with self._lock:
            spare = self._spares.pop(name, None)  # only ever set with standby on
        if self.prefer_tflite and has_tflite_model(path):
            return TfLiteServable(name, version, path, self.num_tflite_interpreters)
        if spare is not None and spare[0] == program_key(path):
            servable = Servable(name, version, path, loaded=spare[1], tags=self.tags)
            log.info("%s version %d: weights restored into the standby copy", name, version)
            return servable
        servable = Servable(name, version, path, tags=self.tags, session_config=self.session_config)
        if self.warmup:
            started, ok = time.monotonic(), False
            try:
                replay_warmup_requests(servable, self.signature_method_name_check)
                ok = True
            finally:
                if self.metrics is not None:
                    self.metrics.warmup(path, ok, time.monotonic() - started)
        return servable

    def _prepare_spare(self, name: str, path: str) -> None:
        """Loads and warms a spare copy of `path` for the next version of `name`."""
        try:
            key = program_key(path)
            if key is None or (self.prefer_tflite and has_tflite_model(path)):
                return
            spare = Servable(name, 0, path, tags=self.tags, session_config=self.session_config)
            replay_warmup_requests(spare, self.signature_method_name_check)
            with self._lock:
                self._spares[name] = (key, spare.loaded)
        except Exception:  # a missing spare only means the next version loads in full
            log.exception("could not prepare a standby copy of %s", path)

    def spare_ready(self, name: str) -> bool:
        with self._lock:
            return name in self._spares

    def start(self, stop: threading.Event | None = None) -> bool:
        """Loads the configured models, then polls their base paths in a thread.

        As TF Serving's ServerCore does before the server listens (ConnectSourcesWithFast-
        InitialLoad), it returns once every model has a version available: a model with no
        version yet is waited for (its base path polled every `poll_seconds`; with 0, once),
        and a version that failed its load and all its retries ends the start with
        ModelsUnavailable. False if `stop` was set first.
        """
        stop = stop or self._stop
        self.poll()
        polled = time.monotonic()
        while (failed := self._first_load_failures()) is None:
            due = self._retry_times() + ([polled + self.poll_seconds] if self.poll_seconds > 0 else [])
            if stop.wait(max(0.0, min(due) - time.monotonic()) if due else None):
                return False
            self.poll()
            polled = time.monotonic()
        if failed:
            # load_servables_fast.cc's message, ServableId::DebugString for each version.
            raise ModelsUnavailable(f"{len(failed)} servable(s) did not become available: {{" + "".join(
                f"{{{{name: {name} version: {version}}} due to error: {status}}}, "
                for name, version, status in failed) + "}")
        self._thread = threading.Thread(target=self._poll_forever, name="model-store-poll", daemon=True)
        self._thread.start()
        return True

    def _retry_times(self) -> list[float]:
        with self._lock:
            return [failure.next_try for failures in self._failed.values() for failure in failures.values()
                    if failure.retries < self.max_load_retries]

    def _first_load_failures(self) -> list[tuple[str, int, str]] | None:
        """None while a model has no version available or failed for good; then the models
        whose first such version (the lowest, as ServableStateMonitor looks) failed, with it
        and its error."""
        failed = []
        with self._lock:
            for name in self.configs:
                ended = {version: failure for version, failure in self._failed[name].items()
                         if failure.retries >= self.max_load_retries}
                reached = sorted(set(self._servables[name]) | set(ended))
                if not reached:
                    return None
                if reached[0] in ended:
                    failed.append((name, reached[0], ended[reached[0]].status))
        return failed

    def _poll_forever(self) -> None:
        while not self._stop.is_set():
            self._poll_soon.wait(self.poll_seconds)  # or at once, for a ReloadConfig
            self._poll_soon.clear()
            if self._stop.is_set():
                return
            try:
                self.poll()
            except Exception:  # keep polling whatever one pass met
                log.exception("model store poll failed")

    def stop(self) -> None:
        self._stop.set()
        self._poll_soon.set()

    # --- Lookups ----------------------------------------------------------------------

    def resolve_label(self, name: str, label: str) -> int:
        config = self.configs.get(name)
        if config is None or label not in config.version_labels:
            raise InvalidArgument(f"Unrecognized servable version label: {shown(label)}")
        return config.version_labels[label]

    def get(self, name: str, version: int | None = None, label: str | None = None) -> Servable:
        """The servable a request asks for: a version, a label, or the latest."""
        if label is not None:
            version = self.resolve_label(name, label)
        versions = self._published.get(name, NO_VERSIONS)  # no lock: a snapshot, replaced whole
        if version is None:
            if versions.latest is None:
                raise NotFound(f"Servable not found for request: Latest({shown(name)})")
            return versions.latest
        if version not in versions.servables:
            raise NotFound(f"Servable not found for request: Specific({shown(name)}, {version})")
        return versions.servables[version]

    def metadata(self, name: str, version: int | None = None, label: str | None = None):
        """GetModelMetadataResponse: every signature def of the requested version."""
        servable = self.get(name, version, label)
        response = get_model_metadata_pb2.GetModelMetadataResponse()
        response.model_spec.name = name
        response.model_spec.version.value = servable.version
        signature_map = get_model_metadata_pb2.SignatureDefMap()
        for key, signature in servable.signature_defs.items():
            signature_map.signature_def[key].CopyFrom(signature)
        response.metadata["signature_def"].Pack(signature_map)
        return response

    def status(self, name: str, version: int | None = None, label: str | None = None):
        """GetModelStatusResponse: AVAILABLE versions (and failed loads), newest first."""
        if name not in self.configs:
            raise NotFound(f"Could not find any versions of model {shown(name)}")
        if label is not None:  # TF Serving ignores a label in a status request
            version = None
        with self._lock:
            loaded = sorted(self._servables[name], reverse=True)
            failed = dict(self._failed[name])
        response = get_model_status_pb2.GetModelStatusResponse()
        for number in sorted(set(loaded) | set(failed), reverse=True):
            if version is not None and number != version:
                continue
            entry = response.model_version_status.add(version=number)
            if number in loaded:
                entry.state = get_model_status_pb2.ModelVersionStatus.AVAILABLE
                entry.status.error_code = 0
            else:
                entry.state = get_model_status_pb2.ModelVersionStatus.END
                entry.status.error_code = failed[number].code.value[0]  # INTERNAL; RESOURCE_EXHAUSTED: refused
                entry.status.error_message = failed[number].error
        if not response.model_version_status:
            raise NotFound(f"Could not find version {version} of model {shown(name)}")
        return response
