"""Local stand-in for `tensorflow_model_server`: same flags, same REST and gRPC APIs.

    python -m serving --port=8500 --rest_api_port=8501 --model_name=kerasbert \
        --model_base_path=$PWD/saved_models/kerasbert
    python -m serving --model_config_file=serving/models.config --enable_batching \
        --batching_parameters_file=serving/batching.config

Flags take TF Serving's `--name=value` form and meaning; unknown flags are reported
and ignored, as TF Serving does. Binds 127.0.0.1 unless --host says otherwise.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import sys
import threading
import time

log = logging.getLogger("serving")


@dataclasses.dataclass
class ServerFlags:
    port: int = 8500  # gRPC
    rest_api_port: int = 0  # 0: REST off
    model_name: str = "default"
    model_base_path: str = ""
    model_config_file: str = ""
    model_config_file_poll_wait_seconds: float = 0.0  # 0: read once at start-up
    enable_batching: bool = False
    batching_parameters_file: str = ""
    file_system_poll_wait_seconds: float = 1.0
    max_num_load_retries: int = 5
    load_retry_interval_micros: int = 60_000_000
    allow_version_labels_for_unavailable_models: bool = False
    rest_api_timeout_in_ms: int = 30000
    tensorflow_intra_op_parallelism: int = 0
    tensorflow_inter_op_parallelism: int = 0
    enable_model_warmup: bool = True
    enable_signature_method_name_check: bool = False
    warm_standby: bool = False  # not a TF Serving flag
    host: str = "127.0.0.1"  # not a TF Serving flag: it binds every interface
    max_body_bytes: int = 64 * 1024 * 1024


HELP = {
    "port": "gRPC port (default 8500)", "rest_api_port": "REST port; 0 turns REST off (default 0)",
    "model_name": "name of the single model (default 'default')",
    "model_base_path": "base path of the single model's integer version folders",
    "model_config_file": "ModelServerConfig text proto: several models, version policies, labels",
    "model_config_file_poll_wait_seconds": "how often to re-read --model_config_file for changes "
                                           "(default 0: read once)",
    "enable_batching": "batch concurrent requests", "batching_parameters_file": "BatchingParameters text proto",
    "file_system_poll_wait_seconds": "how often to look for new versions (default 1)",
    "max_num_load_retries": "tries after a failed load of a version (default 5)",
    "load_retry_interval_micros": "wait between those tries (default 60000000, a minute)",
    "allow_version_labels_for_unavailable_models": "accept labels of versions not yet loaded",
    "rest_api_timeout_in_ms": "REST request timeout (default 30000)",
    "tensorflow_intra_op_parallelism": "TF intra-op threads (0: TF's default)",
    "tensorflow_inter_op_parallelism": "TF inter-op threads (0: TF's default)",
    "enable_signature_method_name_check": "serve :classify/:regress only from signatures whose method_name "
                                          "is classify/regress (default false: TF2 writes every "
                                          "signature as predict)",
    "enable_model_warmup": "replay assets.extra/tf_serving_warmup_requests before serving a version (default true)",
    "warm_standby": "keep a spare loaded copy of each model, so a new version with the same graph only "
                    "restores weights (kerasbert only; one more copy of the weights in memory)",
    "host": "address to bind (kerasbert only; default 127.0.0.1)",
    "max_body_bytes": "largest accepted REST body / gRPC message (kerasbert only)",
}


def parse_flags(argv: list[str]) -> ServerFlags:
    """TF Serving's flag syntax: --name=value, and bare --name for true booleans."""
    flags = ServerFlags()
    fields = {f.name: f for f in dataclasses.fields(ServerFlags)}
    for arg in argv:
        if arg in ("-h", "--help", "--helpfull"):
            print(__doc__)
            for name, field in fields.items():
                print(f"  --{name}={field.default!r:<12} {HELP[name]}")
            sys.exit(0)
        name, _, value = arg.lstrip("-").partition("=")
        if not arg.startswith("--") or name not in fields:
            log.warning("Ignoring unknown flag: %s", arg)
            continue
        kind = type(fields[name].default)
        if kind is bool:
            if value.lower() not in ("", "true", "1", "false", "0"):
                raise SystemExit(f"--{name} takes true or false. Received: {value!r}")
            setattr(flags, name, value.lower() in ("", "true", "1"))
        else:
            try:
                setattr(flags, name, kind(value))
            except ValueError:
                raise SystemExit(f"--{name} takes a {kind.__name__}. Received: {value!r}") from None
    if bool(flags.model_config_file) == bool(flags.model_base_path):
        raise SystemExit("Give exactly one of --model_base_path or --model_config_file.")
    if flags.batching_parameters_file and not flags.enable_batching:
        raise SystemExit("--batching_parameters_file requires --enable_batching")
    return flags


def watch_model_config(store, path: str, poll_seconds: float, applied: str) -> None:
    """Re-reads `path` every `poll_seconds` and applies a changed config to `store`, as TF
    Serving's --model_config_file_poll_wait_seconds does; a file that does not parse is
    reported and the config in force kept. `applied` is the text the store was built from."""
    from serving.model_store import parse_model_config_text

    while True:
        time.sleep(poll_seconds)
        try:
            with open(path) as f:
                text = f.read()
            if text == applied:
                continue
            store.reconfigure(parse_model_config_text(text, reloading=True))
            log.warning("applied the changed model config %s", path)
        except Exception as error:  # a bad edit must not take the server down
            log.error("keeping the model config in force: %s: %s", path, error)
        applied = text


def run_server(flags: ServerFlags, ready: threading.Event | None = None,
               stop: threading.Event | None = None) -> None:
    """Starts the store, gRPC and REST; blocks until `stop` (or SIGTERM/SIGINT)."""
    import tensorflow as tf

    if flags.tensorflow_intra_op_parallelism:
        tf.config.threading.set_intra_op_parallelism_threads(flags.tensorflow_intra_op_parallelism)
    if flags.tensorflow_inter_op_parallelism:
        tf.config.threading.set_inter_op_parallelism_threads(flags.tensorflow_inter_op_parallelism)
    import tensorflow_text  # noqa: F401  TF Serving links these ops; so do we

    from serving.batching import Batcher, parse_batching_parameters
    from serving.grpc_server import make_grpc_server
    from serving.model_store import ModelStore, parse_model_config_text, single_model_config
    from serving.rest import make_rest_server

    if flags.model_config_file:
        with open(flags.model_config_file) as f:
            config_text = f.read()
        configs = parse_model_config_text(config_text)
    else:
        configs = [single_model_config(flags.model_name, flags.model_base_path)]
    store = ModelStore(configs, flags.file_system_poll_wait_seconds, warmup=flags.enable_model_warmup,
                       standby=flags.warm_standby, max_load_retries=flags.max_num_load_retries,
                       load_retry_seconds=flags.load_retry_interval_micros / 1e6,
                       signature_method_name_check=flags.enable_signature_method_name_check)
    store.start()
    if flags.model_config_file and flags.model_config_file_poll_wait_seconds > 0:
        threading.Thread(target=watch_model_config, args=(store, flags.model_config_file,
                                                          flags.model_config_file_poll_wait_seconds, config_text),
                         name="model-config-poll", daemon=True).start()
    if not flags.allow_version_labels_for_unavailable_models:
        for config in configs:
            for label, version in config.version_labels.items():
                try:
                    store.get(config.name, version)
                except LookupError:
                    raise SystemExit(f"Model {config.name}: label {label!r} points to version {version}, "
                                     "which is not available; pass "
                                     "--allow_version_labels_for_unavailable_models") from None

    def predict(servable, signature, inputs):
        return servable.predict(signature, inputs)

    if flags.enable_batching:
        text = open(flags.batching_parameters_file).read() if flags.batching_parameters_file else ""
        predict = Batcher(parse_batching_parameters(text), predict)

    grpc_server, grpc_port = make_grpc_server(store, flags.port, predict, flags.host,
                                              max_message_bytes=flags.max_body_bytes)
    print(f"gRPC on {flags.host}:{grpc_port}", flush=True)
    rest_server = None
    if flags.rest_api_port:
        rest_server = make_rest_server(store, flags.rest_api_port, predict, flags.host, flags.max_body_bytes,
                                       flags.rest_api_timeout_in_ms)
        threading.Thread(target=rest_server.serve_forever, name="rest", daemon=True).start()
        print(f"REST on http://{flags.host}:{rest_server.server_address[1]}", flush=True)

    stop = stop or threading.Event()
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    if ready is not None:
        ready.set()
    stop.wait()
    store.stop()
    if rest_server is not None:
        rest_server.shutdown()
    grpc_server.stop(grace=2).wait()


def main(argv=None) -> int:
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(levelname)s %(message)s")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    run_server(parse_flags(sys.argv[1:] if argv is None else argv))
    return 0


if __name__ == "__main__":
    sys.exit(main())
