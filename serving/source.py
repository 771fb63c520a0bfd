"""The source of servable versions, as TF Serving's FileSystemStoragePathSource is: which
models the config names (`--model_config_file`, or `--model_name` with
`--model_base_path`), which integer version folders each base path holds, and which of them
its version policy (latest N, all, specific) wants loaded. It reads; it loads nothing
(serving/manager.py does).

Example:
    >>> [c.name for c in parse_model_config_text('model_config_list { config { name: "a" } }')]
    ['a']
    >>> wanted_versions(ModelConfig(name="a"), [1, 2, 3])  # no policy: the latest
    [3]
"""

from __future__ import annotations

import logging
import os
import re

from google.protobuf import text_format
from tensorflow_serving.config import model_server_config_pb2

from serving.repeated_log import RepeatedLog
from serving.status import FailedPrecondition, InvalidArgument

log = logging.getLogger(__name__)
ModelConfig = model_server_config_pb2.ModelConfig
ModelServerConfig = model_server_config_pb2.ModelServerConfig


def read_model_config_file(path: str) -> tuple[str, list[ModelConfig]]:
    """A `--model_config_file` at start-up, as BuildAndStart reads it (ParseProtoTextFile<
    ModelServerConfig>): its text and models, or TF Serving's error for a file that cannot
    be read or does not parse (serving/protos.py, parse_text_file)."""
    from serving.protos import read_text_proto_file

    text, config = read_text_proto_file(ModelServerConfig, path)
    return text, list(config.model_config_list.config)


def uri_is_relative_path(uri: str) -> bool:
    """server_core.cc's UriIsRelativePath: no scheme, no host, and not an absolute path.

    >>> uri_is_relative_path("models/m"), uri_is_relative_path("/models/m"), uri_is_relative_path("gs://b/m")
    (True, False, False)
    """
    if re.match(r"^[a-zA-Z][0-9a-zA-Z.]*://", uri):  # io::ParseURI: a scheme, then host and path
        return False
    return not uri.startswith("/")


def check_start_up_config(configs: list[ModelConfig], allow_version_labels_for_unavailable_models: bool) -> None:
    """What ServerCore refuses in the first config, before it loads anything, in its order and
    words (server_core.cc: ValidateModelConfigList, UpdateModelVersionLabelMap,
    CreateStoragePathRoutes): a model listed twice, a relative base path, a version label
    (no version is available yet: a label needs
    --allow_version_labels_for_unavailable_models at start-up), a platform missing or not
    "tensorflow".

    >>> check_start_up_config([ModelConfig(name="m", base_path="/m", model_platform="tensorflow")] * 2, False)
    Traceback (most recent call last):
    serving.status.InvalidArgument: Illegal to list model m multiple times in config list
    """
    check_model_config_list(configs)
    if not allow_version_labels_for_unavailable_models:
        for config in configs:
            for version in config.version_labels.values():
                raise FailedPrecondition(f"Request to assign label to version {version} of model {config.name}, "
                                         "which is not currently available for inference")
    check_platforms_supported(configs)


def model_configs(config: model_server_config_pb2.ModelServerConfig,
                  reloading: bool = False) -> list[ModelConfig]:
    """The ModelConfig messages of a ModelServerConfig: its `model_config_list`, whether it
    comes from a `--model_config_file` or a ReloadConfigRequest.

    When `reloading` a running server's config, a config without a `model_config_list` (an
    empty file, or one caught between truncation and writing) is refused, as
    ServerCore::ReloadConfig refuses it (server_core.cc); at start-up it means no models.

    >>> model_configs(model_server_config_pb2.ModelServerConfig(), reloading=True)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    serving.status.FailedPrecondition: Cannot transition to requested config. It is only legal to transition ...
    """
    if reloading and not config.HasField("model_config_list"):
        raise FailedPrecondition("Cannot transition to requested config. It is only legal to transition "
                                 "from one ModelConfigList to another.")
    return list(config.model_config_list.config)


def parse_model_config_text(text: str, reloading: bool = False) -> list[ModelConfig]:
    """A `--model_config_file` (ModelServerConfig text proto) as ModelConfig messages
    (`model_configs`, which says what `reloading` refuses).

    >>> [c.name for c in parse_model_config_text('model_config_list { config { name: "a" } }')]
    ['a']
    """
    config = model_server_config_pb2.ModelServerConfig()
    text_format.Parse(text, config)
    return model_configs(config, reloading)


# --- ServerCore::ReloadConfig's checks of a new ModelConfigList (server_core.cc) -----------

SUPPORTED_PLATFORMS = ("tensorflow",)  # the one platform TF Serving's model server registers


def model_platform(config: ModelConfig) -> str:
    """The model's platform (GetPlatform): `model_platform`, or the deprecated `model_type`.

    >>> model_platform(ModelConfig(name="m", model_type=model_server_config_pb2.TENSORFLOW))
    'tensorflow'
    """
    if config.model_type != model_server_config_pb2.MODEL_TYPE_UNSPECIFIED:
        log.warning("Deprecated ModelServerConfig::model_type field used. Prefer "
                    "ModelServerConfig::model_platform.")
        if config.model_platform:
            raise InvalidArgument("Illegal setting both ModelServerConfig::model_type (deprecated) and "
                                  f"ModelServerConfig::model_platform, model name is {config.name}")
        if config.model_type != model_server_config_pb2.TENSORFLOW:
            raise InvalidArgument(f"ModelServerConfig::model_type choice {config.model_type} not supported.")
        return "tensorflow"
    if not config.model_platform:
        raise InvalidArgument("Illegal setting neither ModelServerConfig::model_type (deprecated) nor "
                              f"ModelServerConfig::model_platform, model name is {config.name}")
    return config.model_platform


def check_model_config_list(configs: list[ModelConfig]) -> None:
    """ValidateModelConfigList: every name once, every base path absolute (or a URI).

    >>> check_model_config_list([ModelConfig(name="m", base_path="models/m")])
    Traceback (most recent call last):
    serving.status.InvalidArgument: Expected model m to have an absolute path or URI; got base_path()=models/m
    """
    names = set()
    for config in configs:
        if config.name in names:
            raise InvalidArgument(f"Illegal to list model {config.name} multiple times in config list")
        names.add(config.name)
    for config in configs:
        if uri_is_relative_path(config.base_path):
            raise InvalidArgument(f"Expected model {config.name} to have an absolute path or URI; got "
                                  f"base_path()={config.base_path}")


def check_no_platform_changes(old: list[ModelConfig], new: list[ModelConfig]) -> None:
    """ValidateNoModelsChangePlatforms: a model in both configs keeps its platform. A model
    of the old config without one (a config file this server started from, which TF Serving
    would have refused) was served as tensorflow."""
    def served_platform(config):
        try:
            return model_platform(config)
        except InvalidArgument:
            return "tensorflow"

    old_platforms = {config.name: served_platform(config) for config in old}
    for config in new:
        if config.name not in old_platforms:
            continue
        platform = model_platform(config)
        if platform != old_platforms[config.name]:
            raise InvalidArgument(f"Illegal to change a model's platform. For model {config.name} platform was "
                                  f"{old_platforms[config.name]} and new platform requested is {platform}")


def check_platforms_supported(configs: list[ModelConfig]) -> None:
    """CreateStoragePathRoutes: every model names a platform the server serves."""
    for config in configs:
        platform = model_platform(config)
        if platform not in SUPPORTED_PLATFORMS:
            raise InvalidArgument(f"Model {config.name} requests unsupported platform {platform}")


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
    significant = digits.lstrip("0") or "0"
    if len(significant) > 19:  # beyond int64 (and int() reads at most 4,300 digits)
        return None
    number = -int(significant) if text[0] == "-" else int(significant)
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


MODEL_FILES = ("saved_model.pb", "model.tflite")  # what makes a version folder a version


def versions_on_disk(base_path: str) -> dict[int, str]:
    """{version: its folder's name}, for folders holding a saved_model.pb (or a model.tflite,
    which --prefer_tflite_model serves). Two folders with one number ("7" and "007"): the last
    in name order is used, as TF Serving uses one."""
    if not os.path.isdir(base_path):
        return {}
    found: dict[int, str] = {}
    for name in sorted(os.listdir(base_path)):
        version = parse_version(name)
        if version is None or not any(os.path.isfile(os.path.join(base_path, name, model))
                                      for model in MODEL_FILES):
            continue
        if version in found:
            log.warning("Duplicate version directories detected. Version %d will be loaded from %s, %s "
                        "will be ignored.", version, name, found[version])
        found[version] = name
    return dict(sorted(found.items()))

def wanted_versions(config: ModelConfig, on_disk: list[int]) -> list[int]:
    """The versions of `on_disk` (ascending) that the config's version policy wants served."""
    policy = config.model_version_policy
    kind = policy.WhichOneof("policy_choice")
    if kind == "all":
        return on_disk
    if kind == "specific":
        return [v for v in on_disk if v in set(policy.specific.versions)]
    count = policy.latest.num_versions if kind == "latest" and policy.latest.num_versions else 1
    return on_disk[-count:]


def aspired_versions(config: ModelConfig, said: RepeatedLog, listings: dict | None = None) -> dict[int, str]:
    """{version: its folder's path} for the versions the config wants served now. A base path
    that is missing or holds no version folder is logged (a missing path an error, no versions a
    warning, in TF Serving's file-system source's words) as `said` logs: once while it stays so,
    where TF Serving logs it at every poll (10,000 models at a missing path: 1.5 MB of log a
    second). `listings` (base path -> versions_on_disk), kept for one poll pass, lists a base
    path that many models share once a pass (10,000 models of one export: one listing, not 10,000)."""
    listings = {} if listings is None else listings
    if config.base_path not in listings:
        listings[config.base_path] = versions_on_disk(config.base_path)
    folders = listings[config.base_path]
    policy = config.model_version_policy
    name = config.name
    if policy.WhichOneof("policy_choice") == "specific" and os.path.isdir(config.base_path):
        if not policy.specific.versions:  # a likely mistake: file_system_storage_path_source.cc says so
            said.report((name, "specific"), logging.WARNING, f"No specific versions requested for servable {name}.")
            return {}
        said.clear((name, "specific"))
        for version in dict.fromkeys(policy.specific.versions):
            if version in folders:
                said.clear((name, "specific", version))
            else:
                said.report((name, "specific", version), logging.WARNING, f"Version {version} of servable {name}, which was "
                            "requested to be served as a 'specific' version in the servable's version policy, was "
                            "not found in the file system")
    if not folders:
        level = logging.WARNING if os.path.isdir(config.base_path) else logging.ERROR
        said.report((name, "versions"), level, no_versions_message(name, config.base_path))
    else:
        said.clear((name, "versions"))
    return {version: os.path.join(config.base_path, folders[version])
            for version in wanted_versions(config, list(folders))}
