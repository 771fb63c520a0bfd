"""Loaded SavedModel versions, shared by the REST and gRPC front ends.

Each configured model has a base path of integer version folders and a version
policy (TF Serving's: latest N, all, or specific versions) plus optional labels.
A poll thread loads versions as they appear and unloads those the policy drops once a
wanted version serves (TF Serving's availability-preserving policy). A request takes a
reference to one `Servable`; unloading only removes it from the
table, so requests in flight finish on the version they started with. A version
that fails to load is tried again later (5 more times, a minute apart, by default).

As TF Serving does, a version's warm-up requests (`assets.extra/
tf_serving_warmup_requests`) are replayed before it is served. With `standby`, the
store also keeps one spare, loaded and warmed copy of each model's newest version.
A new version with the same program (the fingerprint's graph, signature and object
hashes, and the same assets: a retrained model, re-exported) then only needs its
weights restored into the spare, about 0.3 s, instead of a full load and warm-up.
The spare costs one more copy of the weights in memory.

Example:
    >>> store = ModelStore(parse_model_config_text(open("serving/models.config").read()))
    >>> store.poll()
    >>> servable = store.get("kerasbert", version=None, label="stable")
    >>> servable.predict("sentiment", {"text": np.array([b"great"], object)})
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import logging
import os
import threading
import time
from typing import NamedTuple

import numpy as np
import tensorflow as tf
from google.protobuf import text_format
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow_serving.apis import get_model_metadata_pb2, get_model_status_pb2
from tensorflow_serving.config import model_server_config_pb2

from serving.status import InvalidArgument, NotFound, TensorFlowError, tf_error_message
from serving.warmup import replay_warmup_requests

log = logging.getLogger(__name__)
ModelConfig = model_server_config_pb2.ModelConfig


def parse_model_config_text(text: str, reloading: bool = False) -> list[ModelConfig]:
    """A `--model_config_file` (ModelServerConfig text proto) as ModelConfig messages.

    When `reloading` a running server's config, a file without a `model_config_list` (an
    empty file, or one caught between truncation and writing) is refused, as
    ServerCore::ReloadConfig refuses it (server_core.cc: "It is only legal to transition
    from one ModelConfigList to another"); at start-up it means no models.

    >>> [c.name for c in parse_model_config_text('model_config_list { config { name: "a" } }')]
    ['a']
    """
    config = model_server_config_pb2.ModelServerConfig()
    text_format.Parse(text, config)
    if reloading and not config.HasField("model_config_list"):
        raise ValueError("Cannot transition to requested config. It is only legal to transition "
                         "from one ModelConfigList to another.")
    return list(config.model_config_list.config)


def parse_version(folder: str) -> int | None:
    """A version folder's number as TF Serving reads it (absl::SimpleAtoi into an int64):
    ASCII digits with an optional sign and surrounding ASCII white space; None otherwise.

    >>> parse_version("007"), parse_version("12"), parse_version("\u00b2"), parse_version("1.5")
    (7, 12, None, None)
    """
    text = folder.strip(" \t\n\v\f\r")
    digits = text[1:] if text[:1] in ("+", "-") else text
    if not digits or not digits.isascii() or not digits.isdigit():
        return None
    number = int(text)
    return number if -(2**63) <= number < 2**63 else None


def single_model_config(name: str, base_path: str) -> ModelConfig:
    """What `--model_name` and `--model_base_path` mean: one model, latest version."""
    return ModelConfig(name=name, base_path=base_path, model_platform="tensorflow")


def no_versions_message(name: str, base_path: str) -> str:
    """What the poll logs when `base_path` gives `name` no version to serve: TF Serving's words
    (file_system_storage_path_source.cc) for a missing base path and for one without version
    folders, and for a version folder given as the base path, its parent to pass instead.

    >>> no_versions_message("m", "/no/such/path")
    'FileSystemStoragePathSource encountered a filesystem access error: Could not find base path /no/such/path for servable m with error NOT_FOUND: /no/such/path; No such file or directory'
    """
    if not os.path.isdir(base_path):
        what = "Not a directory" if os.path.exists(base_path) else "No such file or directory"
        return (f"FileSystemStoragePathSource encountered a filesystem access error: Could not find base path "
                f"{base_path} for servable {name} with error NOT_FOUND: {base_path}; {what}")
    message = (f"No versions of servable {name} found under base path {base_path}. Did you forget to name "
               "your leaf directory as a number (eg. '/1/')?")
    if os.path.isfile(os.path.join(base_path, "saved_model.pb")):
        parent = os.path.dirname(os.path.normpath(base_path)) or "."
        message += (f" {base_path} holds a SavedModel itself: it is a version folder; pass its parent, "
                    f"{parent}, as the base path")
    return message


def program_key(path: str) -> tuple | None:
    """What two versions share when one may reuse the other's loaded graph.

    None when the SavedModel has no fingerprint.pb (written since TF 2.12).
    """
    try:
        fingerprint = tf.saved_model.experimental.read_fingerprint(path)
    except (FileNotFoundError, tf.errors.NotFoundError):
        return None
    assets = hashlib.sha256()
    for folder, _, files in sorted(os.walk(os.path.join(path, "assets"))):
        for file in sorted(files):
            assets.update(os.path.relpath(os.path.join(folder, file), path).encode())
            with open(os.path.join(folder, file), "rb") as f:
                assets.update(hashlib.sha256(f.read()).digest())
    return (fingerprint.graph_def_program_hash, fingerprint.signature_def_hash,
            fingerprint.saved_object_graph_hash, assets.hexdigest())


def serving_meta_graph(path: str, tags: tuple[str, ...] = ("serve",)):
    """The MetaGraphDef of the SavedModel at `path` whose tags are `tags`, read from its proto
    (the schema TF Serving reads too) rather than through TF's private saved_model_utils."""
    saved_model = saved_model_pb2.SavedModel()
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        saved_model.ParseFromString(f.read())
    for meta_graph in saved_model.meta_graphs:
        if set(meta_graph.meta_info_def.tags) == set(tags):
            return meta_graph
    found = [sorted(m.meta_info_def.tags) for m in saved_model.meta_graphs]
    raise ValueError(f"{path}: MetaGraphDef associated with tags {sorted(tags)} could not be found in "
                     f"SavedModel (it has {found})")


class LoadFailure(NamedTuple):
    """The last failed load of a version, and when it may be tried again."""
    error: str
    retries: int  # tries made after the first
    next_try: float  # time.monotonic()


class Servable:
    """One loaded version: its signatures and their input/output dtypes.

    With `loaded` (an object tf.saved_model.load returned for a version with the same
    program_key), the version's weights are restored into it instead of loading anew.
    """

    def __init__(self, name: str, version: int, path: str, loaded=None, tags: tuple[str, ...] = ("serve",)):
        self.name, self.version, self.path = name, version, path
        self.meta_graph = serving_meta_graph(path, tags)  # first: a missing tag set fails here, clearly
        if loaded is None:
            loaded = tf.saved_model.load(path, tags=list(tags))
        else:
            variables = os.path.join(path, "variables", "variables")
            tf.train.Checkpoint(root=loaded).read(variables).assert_existing_objects_matched()
        self.loaded = loaded
        self.signature_defs = self.meta_graph.signature_def

    def signature_names(self) -> list[str]:
        """The signatures a request can name (not the SavedModel's __saved_model_init_op)."""
        return sorted(name for name in self.signature_defs if not name.startswith("__"))

    def signature(self, name: str):
        if name not in self.loaded.signatures:
            raise InvalidArgument(f"Serving signature name: \"{name}\" not found in signature def (the model's "
                                  f"signatures: {', '.join(self.signature_names())})")
        return self.loaded.signatures[name]

    def input_specs(self, name: str) -> dict[str, tf.TensorSpec]:
        return dict(sorted(self.signature(name).structured_input_signature[1].items()))

    def input_dtypes(self, name: str) -> dict[str, tf.DType]:
        return {key: spec.dtype for key, spec in self.input_specs(name).items()}

    def output_dtypes(self, name: str) -> dict[str, tf.DType]:
        return {key: spec.dtype for key, spec in self.signature(name).structured_outputs.items()}

    def check_inputs(self, signature: str, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """`inputs` as arrays of the signature's dtypes; InvalidArgument for a wrong name, type
        or shape. Arrays that already have the right dtype are not copied.

        A batching server checks each request so, before it joins a batch: one bad request
        must not fail the others it would be batched with.
        """
        specs = self.input_specs(signature)
        check_input_names(specs, inputs)
        arrays = {}
        for key, spec in specs.items():
            array = inputs[key]
            wanted = object if spec.dtype == tf.string else spec.dtype.as_numpy_dtype
            if not isinstance(array, np.ndarray) or array.dtype != wanted:
                try:
                    array = tf.constant(array, dtype=spec.dtype).numpy()
                except (TypeError, ValueError) as error:
                    raise InvalidArgument(f"Input {key}: {error}") from None
            if not spec.shape.is_compatible_with(array.shape):
                raise InvalidArgument(f"Input {key}: shape {list(array.shape)} does not match the "
                                      f"signature's {spec.shape.as_list()}")
            arrays[key] = array
        return arrays

    def run(self, signature: str, arrays: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """One call of the signature on arrays that check_inputs returned."""
        function = self.signature(signature)
        try:
            outputs = function(**{key: tf.constant(array) for key, array in arrays.items()})
        except tf.errors.OpError as error:  # its own status: InvalidArgument, ResourceExhausted, ...
            raise TensorFlowError(error) from None
        except (TypeError, ValueError) as error:
            raise InvalidArgument(tf_error_message(error)) from None
        return {key: value.numpy() for key, value in outputs.items()}


def check_input_names(expected, sent) -> None:
    """TF Serving's checks of a request's input names (predict_util.cc VerifyRequestInputsSize,
    then saved_model GetInputValues): the counts first, then each name sent."""
    expected, sent = sorted(expected), sorted(sent)
    if len(sent) != len(expected):
        extra = [name for name in sent if name not in expected]
        missing = [name for name in expected if name not in sent]
        raise InvalidArgument(
            f"input size does not match signature: {len(sent)}!={len(expected)} len({{{','.join(sent)}}}) != "
            f"len({{{','.join(expected)}}}). Sent extra: {{{','.join(extra)}}}. Missing but required: "
            f"{{{','.join(missing)}}}.")
    for name in sent:
        if name not in expected:
            raise InvalidArgument(f"input tensor alias not found in signature: {name}. Inputs expected to be in "
                                  f"the set {{{','.join(expected)}}}.")


class ModelStore:
    """Versions of every configured model, kept in line with their base paths."""

    def __init__(self, configs: list[ModelConfig], poll_seconds: float = 1.0, warmup: bool = True,
                 standby: bool = False, max_load_retries: int = 5, load_retry_seconds: float = 60.0,
                 signature_method_name_check: bool = False, tags: tuple[str, ...] = ("serve",),
                 num_load_threads: int = 0, metrics=None):
        self.configs = {config.name: config for config in configs}
        self.tags = tags  # TF Serving's --saved_model_tags: the MetaGraphDef to load
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
        self._servables: dict[str, dict[int, Servable]] = {name: {} for name in self.configs}
        self._failed: dict[str, dict[int, LoadFailure]] = {name: {} for name in self.configs}
        self._lock = threading.Lock()
        self._poll_lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # --- Version bookkeeping --------------------------------------------------------

    @staticmethod
    def versions_on_disk(base_path: str) -> dict[int, str]:
        """{version: its folder's name}, for folders holding a saved_model.pb. Two folders with
        one number ("7" and "007"): the last in name order is used, as TF Serving uses one."""
        if not os.path.isdir(base_path):
            return {}
        found: dict[int, str] = {}
        for name in sorted(os.listdir(base_path)):
            version = parse_version(name)
            if version is None or not os.path.isfile(os.path.join(base_path, name, "saved_model.pb")):
                continue
            if version in found:
                log.warning("Duplicate version directories detected. Version %d will be loaded from %s, %s "
                            "will be ignored.", version, name, found[version])
            found[version] = name
        return dict(sorted(found.items()))

    @staticmethod
    def wanted_versions(config: ModelConfig, on_disk: list[int]) -> list[int]:
        policy = config.model_version_policy
        kind = policy.WhichOneof("policy_choice")
        if kind == "all":
            return on_disk
        if kind == "specific":
            return [v for v in on_disk if v in set(policy.specific.versions)]
        count = policy.latest.num_versions if kind == "latest" and policy.latest.num_versions else 1
        return on_disk[-count:]

    @staticmethod
    def versions_to_unload(wanted: list[int], loaded: list[int]) -> list[int]:
        """TF Serving's availability-preserving policy (availability_preserving_policy.cc): a
        version no longer wanted is unloaded once a wanted version serves, or when no version
        is wanted at all; until then the newest of them keeps serving. A new version that is
        half-copied or broken, or the served version's folder deleted, then loses no request.

        >>> ModelStore.versions_to_unload(wanted=[3], loaded=[1, 2])  # 3 not loaded (yet)
        [1]
        >>> ModelStore.versions_to_unload(wanted=[3], loaded=[2, 3])
        [2]
        """
        unwanted = sorted(v for v in loaded if v not in wanted)
        if not wanted or any(v in wanted for v in loaded):
            return unwanted
        return unwanted[:-1]

    def poll(self) -> None:
        """Loads wanted versions not yet loaded; unloads loaded ones no longer wanted. A base
        path that is missing or holds no version folder is logged at every pass, as TF Serving's
        file-system source does."""
        with self._poll_lock:  # one pass at a time: the poll thread's, or a reconfigure's
            wanted, loads = {}, []
            for name, config in self.configs.items():
                folders = self.versions_on_disk(config.base_path)
                if not folders:  # TF Serving logs a missing base path as an error, no versions as a warning
                    report = log.warning if os.path.isdir(config.base_path) else log.error
                    report("%s", no_versions_message(name, config.base_path))
                wanted[name] = self.wanted_versions(config, list(folders))
                loads += [(name, version, os.path.join(config.base_path, folders[version]))
                          for version in wanted[name]
                          if version not in self._servables[name] and self._load_due(name, version)]
            if self.num_load_threads > 0 and len(loads) > 1:
                with concurrent.futures.ThreadPoolExecutor(self.num_load_threads, thread_name_prefix="load") as pool:
                    loaded = list(pool.map(lambda load: self._try_load(*load), loads))
            else:
                loaded = [self._try_load(*load) for load in loads]
            for name in self.configs:
                paths = [path for (model, _, path), ok in zip(loads, loaded) if model == name and ok]
                if self.standby and paths:  # one spare per model, of its newest version
                    threading.Thread(target=self._prepare_spare, args=(name, paths[-1]), daemon=True,
                                     name=f"standby-{name}").start()
                self._unload_unwanted(name, wanted[name])

    def _try_load(self, name: str, version: int, path: str) -> bool:
        started = time.monotonic()
        try:
            servable = self._load(name, version, path)
        except Exception as error:  # a broken export must not take the server down
            self._record_failure(name, version, path, error)
            if self.metrics is not None:
                self.metrics.load(path, False, time.monotonic() - started, model=name)
            return False
        if self.metrics is not None:
            self.metrics.load(path, True, time.monotonic() - started, model=name)
        with self._lock:
            self._failed[name].pop(version, None)
            self._servables[name][version] = servable
        log.info("loaded %s version %d from %s", name, version, path)
        return True

    def _unload_unwanted(self, name: str, wanted: list[int]) -> None:
        with self._lock:
            for version in self.versions_to_unload(wanted, list(self._servables[name])):
                # Requests holding this servable keep it alive until they finish.
                del self._servables[name][version]
                log.info("unloaded %s version %d", name, version)
            for version in [v for v in self._failed[name] if v not in wanted]:
                del self._failed[name][version]  # exported again later: tried afresh

    def reconfigure(self, configs: list[ModelConfig]) -> None:
        """Takes a new model config list: new models are loaded by the next poll, dropped ones
        unloaded now, and changed version policies and labels apply from the next poll."""
        with self._poll_lock, self._lock:
            self.configs = {config.name: config for config in configs}
            for name in self.configs:
                self._servables.setdefault(name, {})
                self._failed.setdefault(name, {})
            for name in [n for n in self._servables if n not in self.configs]:
                del self._servables[name], self._failed[name]
                self._spares.pop(name, None)
                log.info("unloaded model %s: no longer in the config", name)
        self.poll()

    def _load_due(self, name: str, version: int) -> bool:
        """True for a version never tried, or failed with retries left and its wait over."""
        failure = self._failed[name].get(version)
        return failure is None or (failure.retries < self.max_load_retries
                                   and time.monotonic() >= failure.next_try)

    def _record_failure(self, name: str, version: int, path: str, error: Exception) -> None:
        previous = self._failed[name].get(version)
        retries = previous.retries + 1 if previous else 0
        left = self.max_load_retries - retries
        log.error("failed to load %s version %d from %s: %s (%s)", name, version, path, error,
                  f"trying again in {self.load_retry_seconds:g} s; tries left: {left}" if left > 0
                  else "no tries left")
        with self._lock:
            self._failed[name][version] = LoadFailure(str(error), retries,
                                                      time.monotonic() + self.load_retry_seconds)

    def _load(self, name: str, version: int, path: str) -> Servable:
        """A warmed Servable: the spare's graph with this version's weights, if they match."""
        with self._lock:
            spare = self._spares.pop(name, None)  # only ever set with standby on
        if spare is not None and spare[0] == program_key(path):
            servable = Servable(name, version, path, loaded=spare[1], tags=self.tags)
            log.info("%s version %d: weights restored into the standby copy", name, version)
            return servable
        servable = Servable(name, version, path, tags=self.tags)
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
            if key is None:
                return
            spare = Servable(name, 0, path, tags=self.tags)
            replay_warmup_requests(spare, self.signature_method_name_check)
            with self._lock:
                self._spares[name] = (key, spare.loaded)
        except Exception:  # a missing spare only means the next version loads in full
            log.exception("could not prepare a standby copy of %s", path)

    def spare_ready(self, name: str) -> bool:
        with self._lock:
            return name in self._spares

    def start(self) -> None:
        self.poll()
        self._thread = threading.Thread(target=self._poll_forever, name="model-store-poll", daemon=True)
        self._thread.start()

    def _poll_forever(self) -> None:
        while not self._stop.wait(self.poll_seconds):
            try:
                self.poll()
            except Exception:  # keep polling whatever one pass met
                log.exception("model store poll failed")

    def stop(self) -> None:
        self._stop.set()

    # --- Lookups ----------------------------------------------------------------------

    def resolve_label(self, name: str, label: str) -> int:
        config = self.configs.get(name)
        if config is None or label not in config.version_labels:
            raise InvalidArgument(f"Unrecognized servable version label: {label}")
        return config.version_labels[label]

    def get(self, name: str, version: int | None = None, label: str | None = None) -> Servable:
        """The servable a request asks for: a version, a label, or the latest."""
        if label is not None:
            version = self.resolve_label(name, label)
        with self._lock:
            versions = self._servables.get(name, {})
            if version is None:
                if not versions:
                    raise NotFound(f"Servable not found for request: Latest({name})")
                return versions[max(versions)]
            if version not in versions:
                raise NotFound(f"Servable not found for request: Specific({name}, {version})")
            return versions[version]

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
            raise NotFound(f"Could not find any versions of model {name}")
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
                entry.status.error_code = 13  # INTERNAL: the load failed
                entry.status.error_message = failed[number].error
        if not response.model_version_status:
            raise NotFound(f"Could not find version {version} of model {name}")
        return response
