"""Local stand-in for `tensorflow_model_server`: same flags, same REST and gRPC APIs.

    python -m serving --port=8500 --rest_api_port=8501 --model_name=kerasbert \\
        --model_base_path=$PWD/saved_models/kerasbert
    python -m serving --model_config_file=serving/models.config --enable_batching \\
        --batching_parameters_file=serving/batching.config

Flags take TF Serving's `--name=value` form and meaning (serving/flags.py lists them all;
`--help` prints them); unknown flags are reported and ignored, as TF Serving does. Binds
127.0.0.1 unless --host says otherwise.
"""

from __future__ import annotations

import ctypes
import logging
import signal
import sys
import threading

from serving.flags import ServerFlags, parse_channel_arguments, parse_flags, report_ignored

log = logging.getLogger("serving")


def watch_model_config(manager, path: str, poll_seconds: float, applied: str | None,
                       stop: threading.Event | None = None) -> None:
    """Re-reads `path` every `poll_seconds` and applies a changed config to `manager`, as TF
    Serving's --model_config_file_poll_wait_seconds does. A file that is missing, unreadable
    or does not parse is reported and the config in force kept; the watch goes on.
    `applied` is the text the manager was built from."""
    from serving.source import parse_model_config_text

    stop = stop or threading.Event()
    while not stop.wait(poll_seconds):
        try:
            with open(path) as f:
                text = f.read()
        except OSError as error:
            log.error("keeping the model config in force: cannot read %s: %s", path, error)
            continue
        if text == applied:
            continue
        try:
            manager.reconfigure(parse_model_config_text(text, reloading=True))
            log.info("applied the changed model config %s", path)
        except Exception as error:  # a bad edit must not take the server down
            log.error("keeping the model config in force: %s: %s", path, error)
        applied = text


def make_session(flags: ServerFlags, budget=None):
    """The session every method runs through: batching or direct (whose model calls reserve
    their activations from `budget`)."""
    from serving.batching import BatchingSession, parse_batching_parameters
    from serving.flags import model_work_limits
    from serving.session import DirectSession

    if not flags.enable_batching:
        return DirectSession(model_work_limits(flags), budget)
    text = ""
    if flags.batching_parameters_file:
        with open(flags.batching_parameters_file) as f:
            text = f.read()
    return BatchingSession(parse_batching_parameters(text), model_work_limits(flags))


def monitoring_path(flags: ServerFlags) -> str | None:
    """Where the REST port serves Prometheus metrics (--monitoring_config_file), or None."""
    from serving.metrics import DEFAULT_PATH
    from serving.protos import MonitoringConfig, parse_text_file

    if not flags.monitoring_config_file:
        return None
    config = parse_text_file(MonitoringConfig, flags.monitoring_config_file).prometheus_config
    return (config.path or DEFAULT_PATH) if config.enable else None


def run_server(flags: ServerFlags, ready: threading.Event | None = None,
               stop: threading.Event | None = None) -> None:
    """Starts the manager, gRPC and REST; blocks until `stop` (or SIGTERM/SIGINT)."""
    from serving.tensorflow_import import import_tensorflow

    if not flags.port and not flags.grpc_socket_path:  # server.cc BuildAndStart
        raise SystemExit("server_options.grpc_port is not set and server_options.grpc_socket_path must be set.")
    import_tensorflow(flags.verbose)
    import tensorflow as tf

    if flags.tensorflow_intra_op_parallelism:
        tf.config.threading.set_intra_op_parallelism_threads(flags.tensorflow_intra_op_parallelism)
    if flags.tensorflow_inter_op_parallelism:
        tf.config.threading.set_inter_op_parallelism_threads(flags.tensorflow_inter_op_parallelism)

    from serving.connections import descriptor_caps
    from serving.grpc_server import make_grpc_server, server_credentials
    from serving.memory_budget import ServerBudgets
    from serving.metrics import ServingMetrics
    from serving.manager import ModelManager
    from serving.source import parse_model_config_text, single_model_config
    from serving.rest import RestServer

    report_ignored(flags)
    metrics_path = monitoring_path(flags)
    metrics = ServingMetrics(enabled=metrics_path is not None)
    credentials = server_credentials(flags.ssl_config_file)  # a bad file fails now, before any load
    config_text = None
    if flags.model_config_file:
        with open(flags.model_config_file) as f:
            config_text = f.read()
        configs = parse_model_config_text(config_text)
    else:
        configs = [single_model_config(flags.model_name, flags.model_base_path)]
    tags = tuple(tag.strip() for tag in flags.saved_model_tags.split(",") if tag.strip()) or ("serve",)
    manager = ModelManager(configs, flags.file_system_poll_wait_seconds, warmup=flags.enable_model_warmup,
                       standby=flags.warm_standby, max_load_retries=flags.max_num_load_retries,
                       load_retry_seconds=flags.load_retry_interval_micros / 1e6,
                       signature_method_name_check=flags.enable_signature_method_name_check, tags=tags,
                       num_load_threads=flags.num_load_threads, metrics=metrics)
    manager.start()
    stop = stop or threading.Event()
    if flags.model_config_file and flags.model_config_file_poll_wait_seconds > 0:
        threading.Thread(target=watch_model_config, args=(manager, flags.model_config_file,
                                                          flags.model_config_file_poll_wait_seconds, config_text,
                                                          stop),
                         name="model-config-poll", daemon=True).start()
    if not flags.allow_version_labels_for_unavailable_models:
        for config in configs:
            for label, version in config.version_labels.items():
                try:
                    manager.get(config.name, version)
                except LookupError:
                    raise SystemExit(f"Model {config.name}: label {label!r} points to version {version}, "
                                     "which is not available; pass "
                                     "--allow_version_labels_for_unavailable_models") from None

    budgets = ServerBudgets(flags.max_body_bytes)  # request data stays under 14 x --max_body_bytes + 1 MiB
    session = make_session(flags, budgets.decoding)
    if hasattr(session, "on_batch"):
        session.on_batch = metrics.batch
    metrics.watch_budgets(budgets)
    caps = descriptor_caps(flags.rest_api_max_connections, flags.grpc_max_connections)  # fds left for model loads
    grpc_server, grpc_port, health = make_grpc_server(
        manager, flags.port, session, budgets, flags.host, max_threads=flags.grpc_max_threads,
        max_message_bytes=flags.max_body_bytes, channel_arguments=parse_channel_arguments(flags.grpc_channel_arguments),
        metrics=metrics, socket_path=flags.grpc_socket_path, credentials=credentials,
        health=flags.enable_grpc_healthcheck_service, tensor_content=flags.enable_serialization_as_tensor_content,
        max_connections=caps.grpc, profiler=flags.enable_profiler)
    secure = " (TLS)" if credentials is not None else ""
    if grpc_port:
        log.info("Running gRPC ModelServer at %s:%d%s", flags.host, grpc_port, secure)
        print(f"gRPC on {flags.host}:{grpc_port}{secure}", flush=True)
    if flags.grpc_socket_path:
        log.info("Running gRPC ModelServer at UNIX socket %s%s", flags.grpc_socket_path, secure)
    rest_server = None
    if flags.rest_api_port and flags.rest_api_port == flags.port:
        log.error("server_options.http_port cannot be same as grpc_port. Please use a different port for "
                  "HTTP/REST API. Skipped exporting HTTP/REST API.")
    elif flags.rest_api_port:
        rest_server = RestServer(manager, session, budgets, flags.rest_api_port, flags.host, flags.max_body_bytes,
                                 flags.rest_api_timeout_in_ms, flags.rest_api_num_threads,
                                 enable_cors=flags.rest_api_enable_cors_support,
                                 max_connections=caps.rest, keepalive_timeout=flags.rest_api_idle_timeout_in_ms / 1000,
                                 metrics=metrics,
                                 metrics_path=metrics_path)
        port = rest_server.start()
        log.info("Exporting HTTP/REST API at %s:%d%s", flags.host, port,
                 f", Prometheus metrics at {metrics_path}" if metrics_path else "")
        print(f"REST on http://{flags.host}:{port}", flush=True)

    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    if ready is not None:
        ready.set()
    stop.wait()
    log.info("shutting down")
    if health is not None:
        health.enter_graceful_shutdown()  # NOT_SERVING, told to every watcher, before the ports close
    manager.stop()
    if rest_server is not None:
        rest_server.stop()
    grpc_server.stop(grace=2).wait()
    session.close()


def return_freed_memory() -> None:
    """Has glibc's malloc give large freed blocks back to the system and share two arenas
    between threads, so the server's RSS follows the memory its requests hold rather than
    the high-water mark of every thread (mallopt; a no-op where glibc is absent)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return
    m_mmap_threshold, m_arena_max = -3, -8  # malloc.h
    libc.mallopt(m_mmap_threshold, 256 * 1024)  # a fixed threshold: no dynamic growth past it
    libc.mallopt(m_arena_max, 2)


def main(argv=None) -> int:
    return_freed_memory()
    flags = parse_flags(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.DEBUG if flags.verbose else logging.INFO,
                        format="%(asctime)s %(levelname)s %(message)s")
    if flags.version:
        from importlib import metadata

        from serving.tensorflow_import import import_tensorflow

        import_tensorflow(flags.verbose, with_text_ops=False)
        import tensorflow as tf
        print(f"TensorFlow ModelServer: kerasbert-serving {metadata.version('kerasbert')}\n"
              f"TensorFlow Library: {tf.__version__}")
        return 0
    run_server(flags)
    return 0


if __name__ == "__main__":
    sys.exit(main())
