"""`tensorflow_model_server`'s command line, as data: every flag of TF Serving's
model_servers/main.cc with its default (server.h, Server::Options) and its own help text,
plus the few this stand-in adds (marked kerasbert only).

Each flag is one row: name, default, help, and what this server does with it:
  "used"      it means here what it means in TF Serving;
  "ignored"   nothing to do without TF Serving's C++ runtime: accepted, and a value other
              than the default is reported in one line at start-up;
  "kerasbert" this server's own.

Flags take TF Serving's forms, `--name=value` and bare `--name` for a true boolean.

Example:
    >>> flags = parse_flags(["--port=9000", "--enable_batching", "--model_base_path=/m"])
    >>> flags.port, flags.enable_batching, flags.rest_api_num_threads
    (9000, True, 8)
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from typing import NamedTuple

from serving.session import ModelWorkLimits

log = logging.getLogger("serving")
_LIMITS = ModelWorkLimits()
CPUS = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


class Flag(NamedTuple):
    name: str
    default: object
    help: str
    use: str = "used"


FLAGS = [
    Flag("port", 8500, "TCP port to listen on for gRPC/HTTP API. Disabled if port set to zero."),
    Flag("grpc_socket_path", "", "If non-empty, listen to a UNIX socket for gRPC API on the given path. Can be "
                                 "either relative or absolute path."),
    Flag("rest_api_port", 0, "Port to listen on for HTTP/REST API. If set to zero HTTP/REST API will not be "
                             "exported. This port must be different than the one specified in --port."),
    Flag("rest_api_num_threads", 4 * CPUS, "Number of threads for HTTP/REST API processing. If not set, will be "
                                           "auto set based on number of CPUs."),
    Flag("rest_api_timeout_in_ms", 30000, "Timeout for HTTP/REST API calls."),
    Flag("rest_api_enable_cors_support", False, "Enable CORS headers in response"),
    Flag("enable_batching", False, "enable batching"),
    Flag("allow_version_labels_for_unavailable_models", False,
         "If true, allows assigning unused version labels to models that are not available yet."),
    Flag("batching_parameters_file", "", "If non-empty, read an ascii BatchingParameters protobuf from the "
                                         "supplied file name and use the contained values instead of the defaults."),
    Flag("enable_per_model_batching_parameters", False,
         "Enables model specific batching params like batch sizes, timeouts, batching feature flags to be read "
         "from `batching_params.pbtxt` file present in SavedModel dir of the model.", "ignored"),
    Flag("model_config_file", "", "If non-empty, read an ascii ModelServerConfig protobuf from the supplied file "
                                  "name, and serve the models in that file. (If used, --model_name, "
                                  "--model_base_path are ignored.)"),
    Flag("model_config_file_poll_wait_seconds", 0.0, "Interval in seconds between each poll of the filesystem for "
                                                   "model_config_file. If unset or set to zero, poll will be done "
                                                   "exactly once and not periodically."),
    Flag("model_name", "default", "name of model (ignored if --model_config_file flag is set)"),
    Flag("model_base_path", "", "path to export (ignored if --model_config_file flag is set, otherwise "
                                "required)"),
    Flag("num_load_threads", 0, "The number of threads in the thread-pool used to load servables. If set as 0, "
                                "we don't use a thread-pool, and servable loads are performed serially in the "
                                "manager's main work loop, may casue the Serving request to be delayed. Default: 0"),
    Flag("num_unload_threads", 0, "The number of threads in the thread-pool used to unload servables. If set as 0, "
                                  "we don't use a thread-pool, and servable loads are performed serially in the "
                                  "manager's main work loop, may casue the Serving request to be delayed. "
                                  "Default: 0", "ignored"),
    Flag("max_num_load_retries", 5, "maximum number of times it retries loading a model after the first failure, "
                                    "before giving up. If set to 0, a load is attempted only once. Default: 5"),
    Flag("load_retry_interval_micros", 60_000_000, "The interval, in microseconds, between each servable load "
                                                   "retry. If set negative, it doesn't wait. Default: 1 minute"),
    Flag("file_system_poll_wait_seconds", 1.0, "Interval in seconds between each poll of the filesystem for new "
                                             "model version. If set to zero poll will be exactly done once and not "
                                             "periodically."),
    Flag("flush_filesystem_caches", True, "If true (the default), filesystem caches will be flushed after the "
                                          "initial load of all servables, and after each subsequent individual "
                                          "servable reload (if the number of load threads is 1).", "ignored"),
    Flag("tensorflow_session_parallelism", 0, "Number of threads to use for running a Tensorflow session. "
                                              "Auto-configured by default."),
    Flag("tensorflow_session_config_file", "", "If non-empty, read an ascii TensorFlow Session ConfigProto "
                                               "protobuf from the supplied file name."),
    Flag("tensorflow_intra_op_parallelism", 0, "Number of threads to use to parallelize the execution of an "
                                               "individual op. Auto-configured by default."),
    Flag("tensorflow_inter_op_parallelism", 0, "Controls the number of operators that can be executed "
                                               "simultaneously. Auto-configured by default."),
    Flag("use_alts_credentials", False, "Use Google ALTS credentials", "ignored"),
    Flag("ssl_config_file", "", "If non-empty, read an ascii SSLConfig protobuf from the supplied file name and "
                                "set up a secure gRPC channel"),
    Flag("platform_config_file", "", "If non-empty, read an ascii PlatformConfigMap protobuf from the supplied "
                                     "file name, and use that platform config instead of the Tensorflow platform.",
         "ignored"),
    Flag("per_process_gpu_memory_fraction", 0.0, "Fraction that each process occupies of the GPU memory space the "
                                                 "value is between 0.0 and 1.0 (with 0.0 as the default).",
         "ignored"),
    Flag("saved_model_tags", "", "Comma-separated set of tags corresponding to the meta graph def to load from "
                                 "SavedModel."),
    Flag("grpc_channel_arguments", "", "A comma separated list of arguments to be passed to the grpc server. "
                                       "(e.g. grpc.max_connection_age_ms=2000)"),
    Flag("grpc_max_threads", 4 * CPUS, "Max grpc server threads to handle grpc messages."),
    Flag("enable_model_warmup", True, "Enables model warmup, which triggers lazy initializations (such as TF "
                                      "optimizations) at load time, to reduce first request latency."),
    Flag("num_request_iterations_for_warmup", 0, "Number of times a request is iterated during warmup replay. "
                                                 "This value is used only if > 0."),
    Flag("version", False, "Display version"),
    Flag("monitoring_config_file", "", "If non-empty, read an ascii MonitoringConfig protobuf from the supplied "
                                       "file name"),
    Flag("remove_unused_fields_from_bundle_metagraph", True, "Removes unused fields from MetaGraphDef proto "
                                                             "message to save memory.", "ignored"),
    Flag("prefer_tflite_model", False, "EXPERIMENTAL; CAN BE REMOVED ANYTIME! Prefer TensorFlow Lite model from "
                                       "`model.tflite` file in SavedModel directory."),
    Flag("num_tflite_pools", CPUS, "EXPERIMENTAL; CAN BE REMOVED ANYTIME! Number of TFLite interpreters in an "
                                   "interpreter pool of TfLiteSession."),
    Flag("num_tflite_interpreters_per_pool", 1, "EXPERIMENTAL; CAN BE REMOVED ANYTIME! Number of TFLite "
                                                "interpreters in an interpreter pool of TfLiteSession.", "ignored"),
    Flag("enable_signature_method_name_check", False, "Enable method_name check for SignatureDef. Disable this if "
                                                      "serving native TF2 regression/classification models."),
    Flag("xla_cpu_compilation_enabled", False, "EXPERIMENTAL; CAN BE REMOVED ANYTIME! Enable XLA:CPU JIT "
                                               "(default is disabled).", "ignored"),
    Flag("xla_gpu_compilation_enabled", False, "EXPERIMENTAL; CAN BE REMOVED ANYTIME! Enable both XLA:CPU JIT and "
                                               "XLA:GPU JIT (default is disabled).", "ignored"),
    Flag("enable_profiler", True, "Enable profiler service."),
    Flag("thread_pool_factory_config_file", "", "If non-empty, read an ascii ThreadPoolConfig protobuf from the "
                                                "supplied file name.", "ignored"),
    Flag("mixed_precision", "", "specify mixed_precision mode", "ignored"),
    Flag("skip_initialize_tpu", False, "Whether to skip auto initializing TPU.", "ignored"),
    Flag("enable_grpc_healthcheck_service", False, "Enable the standard gRPC healthcheck service."),
    Flag("enable_serialization_as_tensor_content", False, "Enable serialization of predict response as tensor "
                                                          "content."),
    # This server's own.
    Flag("host", "127.0.0.1", "address to bind REST and gRPC to (TF Serving binds every interface)", "kerasbert"),
    Flag("max_body_bytes", 64 * 1024 * 1024, "largest accepted REST body and gRPC response; request data held in "
                                             "memory is bounded by 14 times it", "kerasbert"),
    Flag("grpc_max_message_bytes", 0, "largest gRPC request message received (grpc.max_receive_message_length); "
                                      "0: the largest whose parse takes at most half of the request-memory budget, "
                                      "12 x --max_body_bytes / 66 (a parsed message takes up to 32 times its bytes)",
         "kerasbert"),
    Flag("rest_api_max_connections", 1024, "open REST connections at most; at the cap the connection idle longest "
                                           "is closed for a new one (the new one only if none is idle)",
         "kerasbert"),
    Flag("rest_api_idle_timeout_in_ms", 10000, "a REST connection with no request under way is closed after this "
                                               "long, from its accept or its last response", "kerasbert"),
    Flag("grpc_max_connections", 4096, "open gRPC connections at most (TCP, UNIX socket and TLS, handshaking or "
                                       "not); more are closed on accept (grpc.max_allowed_incoming_connections)",
         "kerasbert"),
    Flag("warm_standby", False, "keep a spare loaded copy of each model, so a new version with the same graph "
                                "only restores weights (one more copy of the weights in memory)", "kerasbert"),
    # Model work per request (serving/session.py), batching on or off; with batching, the
    # batching parameters' max_batch_size and max_execution_batch_size bound rows too.
    Flag("max_request_batch_size", _LIMITS.max_request_batch_size,
         "rows of one request at most (the 0th dimension its inputs share); more are refused 400", "kerasbert"),
    Flag("max_execution_batch_size", _LIMITS.max_execution_batch_size,
         "rows of one call of the model at most: a larger request runs in slices, and stops between two once "
         "its deadline passes or its gRPC client cancels it", "kerasbert"),
    Flag("max_execution_tokens", _LIMITS.max_execution_tokens,
         "padded tokens of one call of the model at most (a row's tokens: the elements of its widest input)",
         "kerasbert"),
    Flag("string_input_tokens", _LIMITS.string_tokens,
         "padded tokens a string input element counts as (the export's max_sequence_length)", "kerasbert"),
    Flag("activation_bytes_per_token", _LIMITS.activation_bytes_per_token,
         "model memory one padded token takes while a call runs: each call reserves it from the request-memory "
         "budget (12 x --max_body_bytes), and a call takes at most half of what the request leaves of it", "kerasbert"),
    # The admin surface (issue 87): the models' memory, the profiler's bounds.
    Flag("total_model_memory_limit_bytes", 0, "RAM every loaded version may take together, by TF Serving's estimate "
                                              "(1.2 x the version's files) or what a load of it took, if "
                                              "more; a load beyond is refused "
                                              "RESOURCE_EXHAUSTED (TF Serving's ServerCore option). 0: half of the "
                                              "machine's (or container's) memory", "kerasbert"),
    Flag("profiler_root", os.environ.get("KERASBERT_PROFILER_ROOT", ""),
         "directory the profiler service writes traces under; a request's repository_root, session_id or host_name "
         "leading elsewhere is refused (INVALID_ARGUMENT). Default: $KERASBERT_PROFILER_ROOT (for a harness that "
         "starts the server with TF Serving's flags only), else a temporary directory of the server's, made at the "
         "first Profile", "kerasbert"),
    Flag("profiler_max_duration_ms", 60_000, "longest profile a Profile request may ask for (its duration, or a start "
                                             "ahead): longer is refused INVALID_ARGUMENT", "kerasbert"),
    Flag("profiler_max_memory_bytes", 256 << 20, "most a profile may grow the server by: it ends early (its trace "
                                                 "written) once the server has grown by a third of this while it "
                                                 "traced, writing the trace taking about twice as much", "kerasbert"),
    Flag("verbose", False, "show TensorFlow's own C++ log lines and this server's debug log", "kerasbert"),
]

ServerFlags = dataclasses.make_dataclass(
    "ServerFlags", [(flag.name, type(flag.default), dataclasses.field(default=flag.default)) for flag in FLAGS])
ServerFlags.__doc__ = "Every flag's value; defaults as TF Serving's (see FLAGS)."
_BY_NAME = {flag.name: flag for flag in FLAGS}


def usage() -> str:
    lines = ["usage: python -m serving [--flag=value ...]   (tensorflow_model_server's flags)", "Flags:"]
    for flag in FLAGS:
        default = str(flag.default).lower() if isinstance(flag.default, bool) else repr(flag.default)
        note = {"ignored": " [accepted; no effect without TF Serving's C++ runtime]",
                "kerasbert": " [kerasbert only]"}.get(flag.use, "")
        lines.append(f"  --{flag.name}={default}\n      {flag.help}{note}")
    return "\n".join(lines)


def parse_flags(argv: list[str]):
    """TF Serving's flag syntax: --name=value, and bare --name for true booleans. Unknown
    flags are reported and ignored, as TF Serving does."""
    flags = ServerFlags()
    for arg in argv:
        if arg in ("-h", "--help", "--helpfull"):
            print(usage())
            sys.exit(0)
        name, has_value, value = arg.lstrip("-").partition("=")
        if not arg.startswith("--") or name not in _BY_NAME:
            log.warning("unknown argument: %s", arg)
            continue
        kind = type(_BY_NAME[name].default)
        if kind is bool:
            if value.lower() not in ("", "true", "1", "false", "0") or (has_value and not value):
                raise SystemExit(f"--{name} takes true or false. Received: {value!r}")
            setattr(flags, name, value.lower() in ("", "true", "1"))
        else:
            try:
                setattr(flags, name, kind(value))
            except ValueError:
                raise SystemExit(f"--{name} takes a {kind.__name__}. Received: {value!r}") from None
    if flags.version:
        return flags
    # A model source missing, or batching parameters without --enable_batching, are the
    # server's start-up errors (serving/__main__.py, check_flags), in TF Serving's words.
    for name in ("rest_api_max_connections", "rest_api_idle_timeout_in_ms", "grpc_max_connections"):
        if getattr(flags, name) < 1:
            raise SystemExit(f"--{name} takes a positive number. Received: {getattr(flags, name)}")
    if flags.grpc_max_message_bytes < 0:
        raise SystemExit(f"--grpc_max_message_bytes takes 0 or a positive number. Received: "
                         f"{flags.grpc_max_message_bytes}")
    return flags


def model_work_limits(flags) -> ModelWorkLimits:
    """The bounds of model work per request the flags set."""
    return ModelWorkLimits(flags.max_request_batch_size, flags.max_execution_batch_size,
                           flags.max_execution_tokens, flags.string_input_tokens, flags.activation_bytes_per_token)


def session_config(flags):
    """The ConfigProto of every version's session, as server.cc builds it: the
    --tensorflow_session_config_file, then the thread pools (intra and inter together, or
    --tensorflow_session_parallelism for both; all three at once is refused).

    Without a file, Grappler runs its passes once over a signature's graph where TensorFlow's
    default runs them twice: each signature's first call (its warm-up record) optimises its whole
    inlined graph, and on kerasbert's exports the second round changed at most 4 of ~2,000 nodes
    and nothing of the outputs or speed, at a third of that call's CPU (docs/serving.md).

    >>> session_config(parse_flags([])).graph_options.rewrite_options.meta_optimizer_iterations
    1
    """
    from tensorflow.core.protobuf import config_pb2, rewriter_config_pb2

    from serving.protos import parse_text_file
    from serving.status import InvalidArgument

    config = config_pb2.ConfigProto()
    if flags.tensorflow_session_config_file:
        config = parse_text_file(config_pb2.ConfigProto, flags.tensorflow_session_config_file)
    else:
        config.graph_options.rewrite_options.meta_optimizer_iterations = rewriter_config_pb2.RewriterConfig.ONE
    intra, inter = flags.tensorflow_intra_op_parallelism, flags.tensorflow_inter_op_parallelism
    if intra > 0 and inter > 0 and flags.tensorflow_session_parallelism > 0:
        raise InvalidArgument("Either configure server_options.tensorflow_session_parallelism or "
                              "(server_options.tensorflow_intra_op_parallelism, "
                              "server_options.tensorflow_inter_op_parallelism) separately. You cannot configure all.")
    if intra > 0 or inter > 0:
        config.intra_op_parallelism_threads, config.inter_op_parallelism_threads = intra, inter
    else:
        config.intra_op_parallelism_threads = config.inter_op_parallelism_threads = flags.tensorflow_session_parallelism
    return config


def report_ignored(flags) -> None:
    """One line for each flag set away from its default that has no effect here."""
    for flag in FLAGS:
        if flag.use == "ignored" and getattr(flags, flag.name) != flag.default:
            log.warning("--%s=%s has no effect: it needs TensorFlow Serving's C++ runtime", flag.name,
                        getattr(flags, flag.name))


def parse_channel_arguments(text: str) -> list[tuple[str, object]]:
    """--grpc_channel_arguments ("a=1,b=x") as gRPC options, integers as integers.

    >>> parse_channel_arguments("grpc.max_receive_message_length=1024,grpc.primary_user_agent=x")
    [('grpc.max_receive_message_length', 1024), ('grpc.primary_user_agent', 'x')]
    """
    options = []
    for item in filter(None, (part.strip() for part in text.split(","))):
        key, _, value = item.partition("=")
        try:
            options.append((key.strip(), int(value)))
        except ValueError:
            options.append((key.strip(), value.strip()))
    return options
