"""TensorFlow's profiler service (`tensorflow.ProfilerService`) on the server's own gRPC port,
as TF Serving's --enable_profiler registers it (server.cc, tsl::profiler::CreateProfilerService).

TensorFlow's profiler does the work: its own profiler server runs in this process on a
free port (`internal_address`), and `ProfilerForwarding` hands every call of
/tensorflow.ProfilerService/<Method> (Profile, Terminate, Monitor, and whatever else the
installed TensorFlow defines) to it as raw bytes, with the call's deadline and
cancellation, and answers with its response or its status. TensorFlow's server listens on
every interface ([::]), whatever --host says; it cannot be told otherwise.

    >>> server.add_generic_rpc_handlers((ProfilerForwarding(internal_address()),))

A trace is then captured from the model server's gRPC port, and written under the logdir
for TensorBoard's profile plugin (logdir/plugins/profile/<run>/<host>.xplane.pb):

    >>> from tensorflow.python.profiler import profiler_client
    >>> profiler_client.trace("127.0.0.1:8500", "/tmp/logs", 2000)
"""

from __future__ import annotations

import contextlib
import logging
import socket
import threading

import grpc

log = logging.getLogger(__name__)

SERVICE = "tensorflow.ProfilerService"
READY_SECONDS = 10.0  # how long TensorFlow's profiler server may take to answer once started
ATTEMPTS = 3  # free ports tried, in case another process takes one between the pick and the bind
NO_DEADLINE = 1e9  # seconds: grpc's time_remaining() for a call with no deadline is about 9e18

_lock = threading.Lock()
_address: str | None = None


def _free_port(avoid: tuple[int, ...]) -> int:
    """A port free on every interface, as TensorFlow's profiler server will bind it ([::]),
    and none of `avoid`."""
    with contextlib.ExitStack() as probes:
        while True:
            try:
                probe = probes.enter_context(socket.socket(socket.AF_INET6, socket.SOCK_STREAM))
                probe.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                probe.bind(("::", 0))
            except OSError:  # no IPv6: grpc then binds 0.0.0.0
                probe = probes.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                probe.bind(("0.0.0.0", 0))
            if probe.getsockname()[1] not in avoid:  # the probes held meanwhile: another port each time
                return probe.getsockname()[1]


def internal_address(avoid: tuple[int, ...] = ()) -> str:
    """The address of TensorFlow's profiler server in this process ("127.0.0.1:PORT"),
    started on first use on a port none of `avoid` (the ports the caller is about to
    bind, which grpc, binding with SO_REUSEPORT, would share with it); every server of the
    process shares it (TensorFlow offers no way to stop it). Raises OSError if it does not
    answer."""
    global _address
    import tensorflow as tf

    with _lock:
        if _address is None:
            for _ in range(ATTEMPTS):
                port = _free_port(avoid)
                tf.profiler.experimental.server.start(port)
                address = f"127.0.0.1:{port}"
                with grpc.insecure_channel(address, options=[("grpc.enable_http_proxy", 0)]) as channel:
                    try:
                        grpc.channel_ready_future(channel).result(timeout=READY_SECONDS)
                    except grpc.FutureTimeoutError:
                        log.warning("TensorFlow's profiler server did not answer on port %d", port)
                        continue
                _address = address
                log.info("TensorFlow's profiler server listening on [::]:%d (all interfaces)", port)
                break
            else:
                raise OSError("cannot start TensorFlow's profiler server; pass --enable_profiler=false "
                              "to run without it")
        return _address


class ProfilerForwarding(grpc.GenericRpcHandler):
    """Answers /tensorflow.ProfilerService/* by forwarding the call, bytes unchanged, to
    TensorFlow's profiler server at `address`; other methods are left to other handlers."""

    def __init__(self, address: str):
        self.channel = grpc.insecure_channel(address, options=[
            ("grpc.enable_http_proxy", 0), ("grpc.max_receive_message_length", -1),
            ("grpc.max_send_message_length", -1)])

    def service(self, handler_call_details):
        method = handler_call_details.method
        if not method.startswith(f"/{SERVICE}/"):
            return None
        forward = self.channel.unary_unary(method)  # no (de)serializers: bytes in, bytes out

        def call(request: bytes, context) -> bytes:
            remaining = context.time_remaining()
            pending = forward.future(request, timeout=remaining if remaining < NO_DEADLINE else None)
            context.add_callback(pending.cancel)  # the client gone: TensorFlow's call cancelled too
            try:
                return pending.result()
            except grpc.FutureCancelledError:
                context.abort(grpc.StatusCode.CANCELLED, "Cancelled")
            except grpc.RpcError as error:
                context.abort(error.code(), error.details() or "")

        return grpc.unary_unary_rpc_method_handler(call)
