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

from serving.flags import ServerFlags, parse_channel_arguments, parse_flags, report_ignored, session_config
from serving.status import InvalidArgument, ServingError, grpc_code

log = logging.getLogger("serving")


class StartupError(SystemExit):
    """The server did not start: TF Serving's main.cc prints "Failed to start server. Error:
    <status>" and exits -1 (255). `str()` is the status: "<CODE>: <message>"."""


def startup_error(error: Exception) -> StartupError:
    return StartupError(f"{grpc_code(error).name}: {error}")


def watch_model_config(manager, path: str, poll_seconds: float, applied: str | None,
                       stop: threading.Event | None = None) -> None:
    """Re-reads `path` every `poll_seconds` and applies a changed config to `manager`, as TF
    Serving's --model_config_file_poll_wait_seconds does. A file that is missing, unreadable
    or does not parse is reported (one line, TF Serving's words) and the config in force
    kept; the watch goes on. `applied` is the text the manager was built from."""
    from google.protobuf import text_format

    from serving.protos import parse_error_text, read_text_file
    from serving.source import parse_model_config_text

    stop = stop or threading.Event()
    while not stop.wait(poll_seconds):
        try:
            text = read_text_file(path)
        except (ServingError, text_format.ParseError) as error:
            log.error("keeping the model config in force: Failed to read ModelServerConfig file: %s", error)
            continue
        if text == applied:
            continue
        try:
            manager.reconfigure(parse_model_config_text(text, reloading=True))
            log.info("applied the changed model config %s", path)
        except text_format.ParseError as error:
            log.error("Error parsing text-format tensorflow.serving.ModelServerConfig: %s",
                      parse_error_text(error, text))
            log.error("keeping the model config in force: Failed to read ModelServerConfig file: "
                      "Invalid protobuf file: '%s'", path)
        except Exception as error:  # a bad edit must not take the server down
            log.error("keeping the model config in force: %s: %s", path, error)
        applied = text


def make_session(flags: ServerFlags, budget=None, parameters=None):
    """The session every method runs through: batching (with `parameters`, the
    BatchingParameters read from --batching_parameters_file) or direct (whose model calls
    reserve their activations from `budget`); either way one call of the model holds at most
    half of `budget` in activations."""
    from serving.batching import BatchingSession, parse_batching_parameters
    from serving.flags import model_work_limits
    from serving.session import DirectSession

    if not flags.enable_batching:
        return DirectSession(model_work_limits(flags), budget)
    return BatchingSession(parameters or parse_batching_parameters(""), model_work_limits(flags),
                           None if budget is None else budget.capacity)


def monitoring_path(flags: ServerFlags) -> str | None:
    """Where the REST port serves Prometheus metrics (--monitoring_config_file), or None."""
    from serving.metrics import DEFAULT_PATH
    from serving.protos import MonitoringConfig, parse_text_file

    if not flags.monitoring_config_file:
        return None
    config = parse_text_file(MonitoringConfig, flags.monitoring_config_file).prometheus_config
    return (config.path or DEFAULT_PATH) if config.enable else None


def profiler_service(flags: ServerFlags):
    """TensorFlow's profiler service as the flags set it (--enable_profiler, --profiler_root,
    --profiler_max_duration_ms, --profiler_max_memory_bytes), or None."""
    from serving.profiler import ProfilerService

    return ProfilerService(flags.profiler_root, flags.profiler_max_duration_ms,
                           flags.profiler_max_memory_bytes) if flags.enable_profiler else None


def check_flags(flags: ServerFlags) -> None:
    """What server.cc's BuildAndStart refuses in its options, in its words (and this server's own
    --total_model_memory_limit_bytes under 0, --profiler_max_duration_ms under 1)."""
    if not flags.port and not flags.grpc_socket_path:
        raise InvalidArgument("At least one of server_options.grpc_port or server_options.grpc_socket_path "
                              "must be set.")
    if flags.use_alts_credentials and flags.ssl_config_file:
        raise InvalidArgument("Either use_alts_credentials must be false or ssl_config_file must be empty.")
    if flags.total_model_memory_limit_bytes < 0:
        raise InvalidArgument(f"--total_model_memory_limit_bytes takes 0 (half of the memory) or a number of bytes. "
                              f"Received: {flags.total_model_memory_limit_bytes}")
    if flags.profiler_max_duration_ms < 1:
        raise InvalidArgument(f"--profiler_max_duration_ms takes a positive number. Received: "
                              f"{flags.profiler_max_duration_ms}")
    if not flags.model_base_path and not flags.model_config_file:
        raise InvalidArgument("Both server_options.model_base_path and server_options.model_config_file are "
                              "empty!")


def read_start_up_files(flags: ServerFlags):
    """(model config text or None, model configs, batching parameters or None, SSLConfig or
    None, Prometheus metrics path or None): the files BuildAndStart reads, in its order, with
    its checks between them, and the config ServerCore refuses. A file that cannot be read or
    does not parse is TF Serving's error; all of it before TensorFlow loads, so a start that
    fails here fails in a fraction of a second."""
    from serving.protos import BatchingParameters, SSLConfig, parse_text_file
    from serving.source import check_start_up_config, read_model_config_file, single_model_config

    text = None
    if flags.model_config_file:  # wins over --model_name/--model_base_path, as in TF Serving
        text, configs = read_model_config_file(flags.model_config_file)
    else:
        log.info("Building single TensorFlow model file config:  model_name: %s model_base_path: %s",
                 flags.model_name, flags.model_base_path)
        configs = [single_model_config(flags.model_name, flags.model_base_path)]
    parameters = None
    if flags.enable_batching:
        if flags.batching_parameters_file:
            parameters = parse_text_file(BatchingParameters, flags.batching_parameters_file)
    elif flags.batching_parameters_file:
        raise InvalidArgument("server_options.batching_parameters_file is set without setting "
                              "server_options.enable_batching to true.")
    check_start_up_config(configs, flags.allow_version_labels_for_unavailable_models)
    # Read before any load (TF Serving reads these two once the models are loaded).
    ssl_config = parse_text_file(SSLConfig, flags.ssl_config_file) if flags.ssl_config_file else None
    return text, configs, parameters, ssl_config, monitoring_path(flags)


def run_server(flags: ServerFlags, ready: threading.Event | None = None,
               stop: threading.Event | None = None) -> None:
    """Starts the manager, gRPC and REST; blocks until `stop` (or SIGTERM/SIGINT).

    As TF Serving, the ports open only once every configured model has a version available
    (a model without versions is waited for). An error in the flags or a start-up file, or a
    model whose first load failed with all its retries, raises StartupError before any port
    opens (main() prints it as TF Serving does, and exits 255)."""
    stop = stop or threading.Event()
    try:
        started = _start(flags, stop)
    except ServingError as error:
        raise startup_error(error) from None
    if started is None:  # stopped while the models loaded
        return
    manager, session, health, rest_server, grpc_server = started
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


def _start(flags: ServerFlags, stop: threading.Event):
    check_flags(flags)
    config_text, configs, batching_parameters, ssl_config, metrics_path = read_start_up_files(flags)
    from serving.tensorflow_import import import_tensorflow

    import_tensorflow(flags.verbose)  # before any module that imports it
    from serving.connections import descriptor_caps
    from serving.grpc_server import make_grpc_server, server_credentials
    from serving.manager import ModelManager
    from serving.memory_budget import ServerBudgets
    from serving.metrics import ServingMetrics
    from serving.model_memory import ModelMemory, default_memory_limit
    from serving.rest import RestServer

    report_ignored(flags)
    credentials = server_credentials(ssl_config)
    metrics = ServingMetrics(enabled=metrics_path is not None)
    tags = tuple(tag.strip() for tag in flags.saved_model_tags.split(",") if tag.strip()) or ("serve",)
    manager = ModelManager(configs, flags.file_system_poll_wait_seconds, warmup=flags.enable_model_warmup,
                           standby=flags.warm_standby, max_load_retries=flags.max_num_load_retries,
                           load_retry_seconds=flags.load_retry_interval_micros / 1e6,
                           signature_method_name_check=flags.enable_signature_method_name_check, tags=tags,
                           num_load_threads=flags.num_load_threads, metrics=metrics,
                           session_config=session_config(flags), prefer_tflite=flags.prefer_tflite_model, num_tflite_interpreters=flags.num_tflite_pools,
                           allow_version_labels_for_unavailable_models=flags.allow_version_labels_for_unavailable_models,
                           memory=ModelMemory(flags.total_model_memory_limit_bytes or default_memory_limit()))
    if threading.current_thread() is threading.main_thread():  # SIGTERM also while the models load
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
    if not manager.start(stop):  # every model's first load, as ServerCore::Create waits for it
        return None
    if flags.model_config_file and flags.model_config_file_poll_wait_seconds > 0:
        threading.Thread(target=watch_model_config, args=(manager, flags.model_config_file,
                                                          flags.model_config_file_poll_wait_seconds, config_text,
                                                          stop),
                         name="model-config-poll", daemon=True).start()

    budgets = ServerBudgets(flags.max_body_bytes)  # request data stays under 14 x --max_body_bytes + 1.1 MiB
    session = make_session(flags, budgets.decoding, batching_parameters)
    if hasattr(session, "on_batch"):
        session.on_batch = metrics.batch
    metrics.watch_budgets(budgets)
    caps = descriptor_caps(flags.rest_api_max_connections, flags.grpc_max_connections)  # fds left for model loads
    try:
        grpc_server, grpc_port, health = make_grpc_server(
            manager, flags.port, session, budgets, flags.host, max_threads=flags.grpc_max_threads,
            max_message_bytes=flags.max_body_bytes, max_receive_bytes=flags.grpc_max_message_bytes,
            channel_arguments=parse_channel_arguments(flags.grpc_channel_arguments), metrics=metrics,
            socket_path=flags.grpc_socket_path, credentials=credentials, health=flags.enable_grpc_healthcheck_service,
            tensor_content=flags.enable_serialization_as_tensor_content, max_connections=caps.grpc,
            profiler=profiler_service(flags))
    except RuntimeError as error:  # a port or socket that cannot be bound: gRPC logs why
        log.error("%s", error)
        manager.stop()
        raise InvalidArgument("Failed to BuildAndStart gRPC server") from None
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
        try:
            port = rest_server.start()
        except OSError as error:  # TF Serving logs it and serves gRPC alone
            log.error("Failed to start HTTP Server at %s:%d (%s)", flags.host, flags.rest_api_port, error)
            rest_server = None
        else:
            log.info("Exporting HTTP/REST API at %s:%d%s", flags.host, port,
                     f", Prometheus metrics at {metrics_path}" if metrics_path else "")
            print(f"REST on http://{flags.host}:{port}", flush=True)
    return manager, session, health, rest_server, grpc_server


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

        from serving.tensorflow_import import tensorflow_version

        print(f"TensorFlow ModelServer: kerasbert-serving {metadata.version('kerasbert')}\n"
              f"TensorFlow Library: {tensorflow_version(flags.verbose)}")
        return 0
    try:
        run_server(flags)
    except StartupError as error:
        # main.cc prints this on stdout; here it goes to stderr, with the server's log lines.
        print(f"Failed to start server. Error: {error}", file=sys.stderr, flush=True)
        return 255  # main.cc returns -1
    return 0


if __name__ == "__main__":
    sys.exit(main())
