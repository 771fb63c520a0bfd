"""TF Serving's gRPC services (PredictionService, ModelService) over the shared model manager.

Every request's tensors are checked before anything is built from them (tensor_proto):
names against the signature, dtypes, shapes and sizes; what they will take in memory is
reserved from the server's budget first. A call's own deadline travels with it to the
session. At most `max_threads` calls run at once (TF Serving's --grpc_max_threads) and a
bounded number wait (`call_slots`); beyond, a call is refused RESOURCE_EXHAUSTED at once. Admin
calls (ReloadConfig, GetModelStatus, the profiler) run on a few threads of their own
(serving/admin_calls.py).

Clients use the official stubs unchanged:
    >>> from serving.process import free_port
    >>> from serving.session import DirectSession
    >>> server, port, _ = make_grpc_server(manager, free_port(), DirectSession(), ServerBudgets(64 << 20))
    >>> stub = prediction_service_pb2_grpc.PredictionServiceStub(grpc.insecure_channel(f"127.0.0.1:{port}"))
    >>> request = predict_pb2.PredictRequest()
    >>> request.model_spec.name = "toy"; request.model_spec.signature_name = "serving_default"
    >>> request.inputs["x"].CopyFrom(tf.make_tensor_proto([[1.0, 2.0]]))
    >>> tf.make_ndarray(stub.Predict(request, timeout=10.0).outputs["y"])
    array([[2., 4.]], dtype=float32)
    >>> server.stop(None).wait()
    True
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time

import grpc
import tensorflow as tf
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from tensorflow_serving.apis import (classification_pb2, model_management_pb2, model_pb2, model_service_pb2_grpc,
                                     predict_pb2, prediction_service_pb2_grpc, regression_pb2)

from serving import classify_regress, tensor_proto
from serving.admin_calls import ADMIN_METHODS, AdminCalls
from serving.memory_budget import ServerBudgets
from serving.pools import WorkerPool
from serving.predict import Predictor
from serving.protos import SSLConfig
from serving.json_array import dtype_name
from serving.manager import ModelManager
from serving.servable import check_input_names
from serving.metrics import ServingMetrics
from serving.status import InvalidArgument, code_name, forget_frames, grpc_code, shown

log = logging.getLogger(__name__)


def _spec(model_spec):
    version = model_spec.version.value if model_spec.HasField("version") else None
    label = model_spec.version_label or None
    return model_spec.name, version, label


NO_DEADLINE_SECONDS = 10**8  # grpc's time_remaining() of a call without a deadline is further (~10^10 s)


def _deadline(context) -> float | None:
    """The call's deadline (time.monotonic()), or None without one: grpc tells that as a time
    remaining so far ahead that waiting for it overflowed (OverflowError: INTERNAL "timestamp
    out of range for platform time_t", for a ReloadConfig waiting for the decoding budget)."""
    remaining = context.time_remaining()
    return None if remaining is None or remaining > NO_DEADLINE_SECONDS else time.monotonic() + remaining


def _cancelled(context):
    """True once the call's client has cancelled it (or its deadline passed): the session
    asks between slices of model work, so the call's thread is freed within one slice."""
    return lambda: not context.is_active()


def _abort(context, error: Exception):
    code = grpc_code(error)
    if code == grpc.StatusCode.INTERNAL:
        log.exception("internal error")
    message = str(error)
    forget_frames(error)
    context.abort(code, message)


def check_output_filter(signature_def, output_filter) -> None:
    """predict_util.cc PreProcessPrediction: every alias known, none twice. Of more aliases than
    outputs, the first that fails is among the first outputs + 1: those are all it reads."""
    seen = set()
    for alias in output_filter[:len(signature_def.outputs) + 1]:
        if alias not in signature_def.outputs:
            raise InvalidArgument(f"output tensor alias not found in signature: {shown(alias)} Outputs expected to be "
                                  f"in the set {{{','.join(sorted(signature_def.outputs))}}}.")
        if alias in seen:
            raise InvalidArgument(f"duplicate output tensor alias: {shown(alias)}")
        seen.add(alias)


class PredictionService(prediction_service_pb2_grpc.PredictionServiceServicer):
    def __init__(self, manager: ModelManager, session, budgets: ServerBudgets, metrics: ServingMetrics,
                 tensor_content: bool = False):
        self.manager, self.budget, self.metrics = manager, budgets.decoding, metrics
        self.tensor_content = tensor_content  # --enable_serialization_as_tensor_content
        self.predictor = Predictor(manager, session, metrics)
        self.examples = classify_regress.ExampleRunner(manager, session, metrics)

    def _finish(self, name: str, method: str, started: float, status: str) -> None:
        self.metrics.request(name, method, "GRPC", status, time.monotonic() - started)

    def Predict(self, request, context):
        started, status = time.monotonic(), "OK"
        try:
            return self._predict(request, _deadline(context), _cancelled(context))
        except Exception as raised:
            status = code_name(raised)
            _abort(context, raised)
        finally:
            self._finish(request.model_spec.name, "Predict", started, status)

    def _predict(self, request, deadline, cancelled):
        spec = _spec(request.model_spec)
        signature = request.model_spec.signature_name or "serving_default"
        with contextlib.ExitStack() as held:
            def decode(servable):
                """The request's tensors as arrays, checked first and their memory reserved."""
                dtypes = servable.input_dtypes(signature)
                check_input_names(dtypes, request.inputs)
                cost = 0
                for key in sorted(request.inputs):
                    proto = request.inputs[key]
                    size = tensor_proto.materialized_bytes(proto, key, self.budget.capacity)  # dtype, shape first
                    if size > self.budget.capacity:
                        raise tensor_proto.too_large(key, size, self.budget.capacity)
                    cost += size
                    if proto.dtype != dtypes[key].as_datatype_enum:
                        sent = dtype_name(tf.as_dtype(proto.dtype))
                        raise InvalidArgument(f"Expects arg[{key}] to be {dtype_name(dtypes[key])} "
                                              f"but {sent} is provided")
                check_output_filter(servable.signature_defs[signature], request.output_filter)
                held.enter_context(self.budget.reserve(cost, deadline))
                return {key: tensor_proto.to_array(proto, key, self.budget.capacity)
                        for key, proto in request.inputs.items()}

            prediction = self.predictor.predict_blocking(spec, signature, decode, deadline, cancelled)
            response = predict_pb2.PredictResponse()
            response.model_spec.name = spec[0]
            response.model_spec.version.value = prediction.servable.version
            response.model_spec.signature_name = signature
            wanted = set(request.output_filter)
            for key, value in prediction.outputs.items():
                if not wanted or key in wanted:
                    response.outputs[key].CopyFrom(tensor_proto.from_array(value, self.tensor_content))
            return response

    def GetModelMetadata(self, request, context):
        try:
            if list(request.metadata_field) != ["signature_def"]:
                raise InvalidArgument("Metadata field signature_def is the only one supported")
            return self.manager.metadata(*_spec(request.model_spec))
        except Exception as error:
            _abort(context, error)

    def Classify(self, request, context):
        return self._one_signature(request, context, "Classify", self.examples.classify,
                                   classification_pb2.ClassificationResponse())

    def Regress(self, request, context):
        return self._one_signature(request, context, "Regress", self.examples.regress,
                                   regression_pb2.RegressionResponse())

    def _one_signature(self, request, context, method, run, response):
        signature = request.model_spec.signature_name or "serving_default"

        def answer(servable, deadline, cancelled):
            response.result.CopyFrom(run(request.model_spec.name, servable, signature, request.input, deadline,
                                         cancelled))
            response.model_spec.name = request.model_spec.name
            response.model_spec.version.value = servable.version
            response.model_spec.signature_name = signature
            return response

        return self._examples(context, method, request.model_spec, request.input, answer)

    def MultiInference(self, request, context):
        """multi_inference_helper.cc: the servable is the first task's model_spec's (a request
        without tasks names none); multi_inference.cc checks and runs the tasks."""
        model_spec = request.tasks[0].model_spec if request.tasks else model_pb2.ModelSpec()

        def run(servable, deadline, cancelled):
            return self.examples.multi_inference(model_spec.name, servable, request, deadline, cancelled)

        if not model_spec.name:  # ServerCore::ServableRequestFromModelSpec
            _abort(context, InvalidArgument("ModelSpec has no name specified."))
        return self._examples(context, "MultiInference", model_spec, request.input, run)

    def _examples(self, context, method, model_spec, examples, run):
        """Classify, Regress and MultiInference: the servable `model_spec` names, the memory of
        the serialized `examples` reserved, and `run(servable, deadline, cancelled)`'s response
        (an ExampleRunner's call, which records the model call's metrics). Recorded here: for
        Classify and Regress the request's count by status and its latency
        (prediction_service_impl.cc); TF Serving counts no MultiInference request."""
        started, status = time.monotonic(), "OK"
        per_request = method != "MultiInference"
        try:
            deadline = _deadline(context)
            name, version, label = _spec(model_spec)
            servable = self.manager.get(name, version, label)
            with self.budget.reserve(classify_regress.serialized_size(examples), deadline):
                return run(servable, deadline, _cancelled(context))
        except Exception as raised:
            status = code_name(raised)
            _abort(context, raised)
        finally:
            if per_request:
                self._finish(model_spec.name, method, started, status)


class ModelService(model_service_pb2_grpc.ModelServiceServicer):
    def __init__(self, manager: ModelManager, admin: AdminCalls):
        self.manager, self.admin = manager, admin

    def GetModelStatus(self, request, context):
        try:
            return self.manager.status(*_spec(request.model_spec))
        except Exception as error:
            _abort(context, error)

    def HandleReloadConfigRequest(self, request, context):
        """model_service_impl.cc: a ModelConfigList is applied as ServerCore::ReloadConfig does
        (ModelManager.reload_config); any other config is refused. A failed reload is logged in
        one line and is the call's status (gRPC sends no response with it); a successful one
        answers status OK and, for each of `metric_names`, its increase over the call. One runs at
        a time (AdminCalls.one_reload): another waits for it until its deadline, else UNAVAILABLE."""
        metrics = self.manager.metrics
        names = list(dict.fromkeys(request.metric_names))
        before = {name: metrics.int64_value(name) if metrics else 0 for name in names}
        try:
            if request.config.WhichOneof("config") != "model_config_list":
                raise InvalidArgument("ServerModelConfig type not supported by HandleReloadConfigRequest. Only "
                                      "ModelConfigList is currently supported")
            for index, config in enumerate(request.config.model_config_list.config):
                log.info("Config entry index: %d path: %s name: %s platform: %s", index, config.base_path,
                         config.name, config.model_platform)
            deadline = _deadline(context)
            with self.admin.one_reload(deadline):
                self.manager.reload_config(request.config, deadline, _cancelled(context))
        except Exception as error:
            log.error("ReloadConfig failed: %s", error)
            code, message = grpc_code(error), str(error)
            forget_frames(error)
            context.abort(code, message)
        response = model_management_pb2.ReloadConfigResponse()
        response.status.error_code = 0
        for name in names:
            after = metrics.int64_value(name) if metrics else 0
            response.metric.add(name=name, int64_value_increase=after - before[name])
        return response


# Memory protobuf (upb) takes to parse a message, per byte of the message, at most: measured on
# 20 MB messages of the emptiest repeated records (TensorShapeProto dims 26x, empty strings 21x,
# empty Examples 23x, MultiInference tasks 31x; ModelConfigs and ResourceHandleProtos 55x).
PARSE_EXPANSION = 32
RELOAD_CONFIG = "/tensorflow.serving.ModelService/HandleReloadConfigRequest"
PARSE_EXPANSIONS = {RELOAD_CONFIG: 56}
PREDICT = "/tensorflow.serving.PredictionService/Predict"


def message_cost(method: str, size: int) -> int:
    """Bytes a gRPC request message of `size` bytes holds once received and parsed: its bytes,
    and what protobuf builds from them (PARSE_EXPANSIONS)."""
    return (1 + PARSE_EXPANSIONS.get(method, PARSE_EXPANSION)) * size


def max_receive_bytes_of(budget_bytes: int) -> int:
    """The largest request message whose cost (`message_cost`) takes at most half of the budget
    (as a model call's activations do), the rest left for what the call builds from it: the
    default of --grpc_max_message_bytes.

    >>> max_receive_bytes_of(12 * (64 << 20)) // (1 << 20)
    11
    """
    return budget_bytes // (2 * (1 + PARSE_EXPANSION))


def _predict_request_class():
    """TF Serving's PredictRequest, but its TensorProtos without resource_handle_val and
    variant_val (fields 14 and 15): no input can be DT_RESOURCE or DT_VARIANT (tensor_proto
    refuses both), and parsed they are protobuf's largest records (55 bytes of memory a byte
    sent); left out, what a client sends in them is kept as unknown bytes, as sent."""
    pool, added = descriptor_pool.DescriptorPool(), set()

    def add(file) -> None:
        if file.name in added:
            return
        added.add(file.name)
        for dependency in file.dependencies:
            add(dependency)
        proto = descriptor_pb2.FileDescriptorProto.FromString(file.serialized_pb)
        for message in proto.message_type:
            if f"{proto.package}.{message.name}" == "tensorflow.TensorProto":
                kept = [field for field in message.field if field.number not in (14, 15)]
                del message.field[:]
                message.field.extend(kept)
        pool.Add(proto)

    add(predict_pb2.DESCRIPTOR)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.serving.PredictRequest"))


PredictRequest = _predict_request_class()


class DecodeInServicer(grpc.ServerInterceptor):
    """Every call's request message is parsed by the thread that serves the call, not by grpc's
    one thread that receives every call's messages (grpcio's deserializer runs there, holding
    the GIL: a message of 60 M values stalled every call and REST for seconds). Before parsing,
    its cost (`message_cost`) is reserved from `budget` until the call ends (RESOURCE_EXHAUSTED if it
    cannot be had: at once if it never can, else at the call's deadline); what the call reserves
    beside it must fit with it, or is refused at once (MemoryBudget.one_call). A message that does
    not parse is INTERNAL with no details, as TF Serving's grpc++ answers it (proto_utils.h);
    answered so, it frees its HTTP/2 stream (grpcio's own refusal of an undecodable message
    leaked the stream: 100 of them locked their connection). An admin call's message is not
    reserved (serving/admin_calls.py bounds them: a ReloadConfig of 10,000 models held 35 MB of
    the requests' 48 MB while it waited for its models)."""

    def __init__(self, budget):
        self.budget = budget

    def intercept_service(self, continuation, details):
        handler = continuation(details)
        if handler is None or handler.request_streaming or handler.request_deserializer is None:
            return handler
        parse = PredictRequest.FromString if details.method == PREDICT else handler.request_deserializer
        budget = None if details.method in ADMIN_METHODS else self.budget  # admin: at most ADMIN_THREADS

        def parsed(raw: bytes, context):
            try:
                return parse(raw)
            except Exception:  # DecodeError; RecursionError past protobuf's depth
                context.abort(grpc.StatusCode.INTERNAL, "")

        def decoded(behaviour):
            def serve(raw: bytes, context):  # a stream's behaviour returns at once: held while parsing
                if budget is None:
                    return behaviour(parsed(raw, context), context)
                with budget.one_call():
                    try:
                        held = budget.reserve(message_cost(details.method, len(raw)), _deadline(context))
                    except Exception as error:
                        context.abort(grpc_code(error), str(error))
                    with held:
                        return behaviour(parsed(raw, context), context)
            return serve

        if handler.unary_unary:
            return grpc.unary_unary_rpc_method_handler(decoded(handler.unary_unary), None,
                                                       handler.response_serializer)
        return grpc.unary_stream_rpc_method_handler(decoded(handler.unary_stream), None,
                                                    handler.response_serializer)


def server_credentials(config: SSLConfig | None):
    """TF Serving's BuildServerCredentials: SSL from an SSLConfig (PEM contents in server_key,
    server_cert and custom_ca; client_verify requires and checks a client certificate signed
    by custom_ca), else none."""
    if config is None:
        return None
    return grpc.ssl_server_credentials([(config.server_key.encode(), config.server_cert.encode())],
                                       root_certificates=config.custom_ca.encode() or None,
                                       require_client_auth=config.client_verify)


HANDSHAKE_TIMEOUT_MS = 5_000  # a TCP or TLS handshake unfinished after this is closed (grpc's default: 120 s)
MAX_CONNECTION_IDLE_MS = 60_000  # a connection with no call for this long is sent GOAWAY
MAX_CONNECTION_AGE_MS = 30 * 60_000  # every connection is renewed after this long ...
MAX_CONNECTION_AGE_GRACE_MS = 60_000  # ... its calls under way given this long to finish
MAX_CONCURRENT_STREAMS = 100  # calls open at once on one connection (nginx, Apache: 100 to 128)


def connection_options(max_connections: int) -> dict[str, int]:
    """grpc core's own limits on what connections may hold, as this server sets them (each
    can be overridden with --grpc_channel_arguments, as in TF Serving):

    - at most `max_connections` connections (TCP, UNIX socket or TLS, handshaking or not);
      more are closed as they are accepted, so a flood of idle connections cannot take
      every file descriptor;
    - an unfinished handshake (a client that connects and sends nothing, or half a TLS
      hello) is closed after HANDSHAKE_TIMEOUT_MS; a connection with no call, after
      MAX_CONNECTION_IDLE_MS;
    - at most MAX_CONCURRENT_STREAMS calls open on one connection, counted until the server
      has finished them (grpc's overload protection, on by default): a connection that opens
      calls and resets them at once (HTTP/2 rapid reset) holds at most that many of the
      server's call slots (`call_slots`), and `max_threads` stay free for other connections.

    >>> connection_options(1024)["grpc.max_allowed_incoming_connections"]
    1024
    """
    return {"grpc.max_allowed_incoming_connections": max_connections,
            "grpc.server_handshake_timeout_ms": HANDSHAKE_TIMEOUT_MS,
            "grpc.max_connection_idle_ms": MAX_CONNECTION_IDLE_MS,
            "grpc.max_connection_age_ms": MAX_CONNECTION_AGE_MS,
            "grpc.max_connection_age_grace_ms": MAX_CONNECTION_AGE_GRACE_MS,
            "grpc.max_concurrent_streams": MAX_CONCURRENT_STREAMS}


def call_slots(max_threads: int, options: dict) -> int:
    """Calls admitted at once (grpc's maximum_concurrent_rpcs): `max_threads` running, and
    twice as many waiting as one connection may open (a reset call leaves grpc's count of
    its connection a little before this server's count of calls), so that one connection's
    calls, even reset ones, never take the slots of another's.

    >>> call_slots(8, {"grpc.max_concurrent_streams": 100})
    208
    """
    return max_threads + 2 * options["grpc.max_concurrent_streams"]


class PooledServer:
    """A started grpc.Server whose WorkerPool ends with it: grpc leaves a server's executor to
    its owner, and a pool never shut down keeps its threads, waiting, for the life of the
    process (an in-process server's in a test session). Every other attribute is the server's.

    Example:
        >>> pool = WorkerPool(2, "grpc")
        >>> server = PooledServer(grpc.server(pool), pool)
        >>> server.start()
        >>> server.stop(0).wait(5)
        True
        >>> server.pool_stopped.wait(5) and not any(thread.is_alive() for thread in pool._threads)
        True
    """

    def __init__(self, server: grpc.Server, pool: WorkerPool):
        self._server, self._pool = server, pool
        self.pool_stopped = threading.Event()

    def __getattr__(self, name):
        return getattr(self._server, name)

    def stop(self, grace):
        """grpc.Server.stop; once the server has stopped (no call left to hand the pool), the
        pool's threads end."""
        stopped = self._server.stop(grace)

        def end_pool():
            stopped.wait()
            self._pool.shutdown(wait=True)
            self.pool_stopped.set()
        threading.Thread(target=end_pool, name="grpc-pool-end", daemon=True).start()
        return stopped


def make_grpc_server(manager: ModelManager, port: int, session, budgets: ServerBudgets, host: str = "127.0.0.1",
                     max_threads: int = 8, max_message_bytes: int = 64 * 1024 * 1024, max_receive_bytes: int = 0,
                     channel_arguments: list[tuple] | None = None, metrics: ServingMetrics | None = None,
                     socket_path: str = "", credentials=None, health: bool = False, tensor_content: bool = False,
                     max_connections: int = 4096, profiler=None):
    """A started gRPC server; returns (server, bound TCP port or 0, health servicer or None).

    `port` 0 listens on no TCP port (TF Serving's --port=0), `socket_path` on a UNIX socket
    too; `credentials` (server_credentials) secure both. `max_threads` calls run at once and
    up to grpc.max_concurrent_streams more wait for a thread (`call_slots`); beyond, a call is
    refused RESOURCE_EXHAUSTED (grpc's maximum_concurrent_rpcs), so no call waits in an
    unbounded queue. Connections are
    bounded as `connection_options` says. `channel_arguments` (TF Serving's
    --grpc_channel_arguments) override the message-size and connection defaults. With
    `health`, the standard grpc.health.v1.Health service answers for "ModelService" and
    "PredictionService", as server.cc sets them: SERVING once started, NOT_SERVING once
    shutdown begins. With `profiler` (a serving.profiler.ProfilerService: TF Serving's
    --enable_profiler), TensorFlow's profiler service answers too, on the same port and socket.

    Request messages of at most `max_receive_bytes` are received (--grpc_max_message_bytes; 0:
    the largest whose parse the decoding budget can hold, `max_receive_bytes_of`), each parsed
    by the thread serving its call, its cost reserved first (`DecodeInServicer`).
    """
    from grpc_health.v1 import health, health_pb2, health_pb2_grpc

    receive = max_receive_bytes or max_receive_bytes_of(budgets.decoding.capacity)
    # grpc.so_reuseport 0: a port another server holds fails the start-up (gRPC's default, 1,
    # would share it and split the traffic between two servers).
    options = {"grpc.max_receive_message_length": receive, "grpc.max_send_message_length": max_message_bytes,
               "grpc.so_reuseport": 0, **connection_options(max_connections), **dict(channel_arguments or [])}
    pool = WorkerPool(max_threads, "grpc")
    admin = AdminCalls()  # admin calls on threads of their own, beside the max_threads of requests
    server = grpc.server(pool, options=list(options.items()),
                         maximum_concurrent_rpcs=call_slots(max_threads, options),
                         interceptors=[admin, DecodeInServicer(budgets.decoding)])
    prediction_service_pb2_grpc.add_PredictionServiceServicer_to_server(
        PredictionService(manager, session, budgets, metrics or ServingMetrics(enabled=False), tensor_content), server)
    model_service_pb2_grpc.add_ModelServiceServicer_to_server(ModelService(manager, admin), server)
    health_servicer = None
    if health:
        health_servicer = health.HealthServicer(experimental_non_blocking=True)
        health_pb2_grpc.add_HealthServicer_to_server(health_servicer, server)

    if profiler is not None:
        from serving.profiler import generic_handler

        server.add_generic_rpc_handlers((generic_handler(profiler),))
        log.info("Profiler service is enabled")

    def listen(address):
        bound = (server.add_secure_port(address, credentials) if credentials is not None
                 else server.add_insecure_port(address))
        if not bound and not address.startswith("unix:"):
            raise OSError(f"cannot listen for gRPC on {address}")
        return bound

    try:
        bound = listen(f"{host}:{port}") if port else 0
        if socket_path:
            listen(f"unix:{socket_path}")
        server.start()
    except BaseException:
        pool.shutdown(wait=False)  # a server that never started leaves no threads either
        raise
    if health_servicer is not None:
        for service in ("ModelService", "PredictionService"):
            health_servicer.set(service, health_pb2.HealthCheckResponse.SERVING)
    return PooledServer(server, pool), bound, health_servicer
