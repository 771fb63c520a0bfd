"""TensorFlow's profiler service on the stand-in's gRPC port (--enable_profiler, on by
default as in TF Serving): a trace captured with TensorFlow's own client while predicts run."""

import glob
import os
import threading

import grpc
import pytest
import tensorflow as tf
from tensorflow.python.profiler import profiler_client
from tensorflow.tsl.profiler.protobuf import profiler_options_pb2

from serving_helpers import Server
from serving_models import save_toy

PREDICT = {"instances": [[1.0, 2.0], [3.0, 4.0]]}


@pytest.fixture(scope="module")
def model_base(tmp_path_factory):
    base = tmp_path_factory.mktemp("models") / "toy"
    save_toy(str(base / "1"), 2.0)
    return base


def raw_call(server, method, timeout=10):
    """A call of /tensorflow.ProfilerService/<method> with an empty request, bytes unchanged."""
    return server.channel.unary_unary(f"/tensorflow.ProfilerService/{method}")(b"", timeout=timeout)


def profile_request(duration_ms: int, repository_root: str) -> bytes:
    """A serialized tensorflow.ProfileRequest (profiler_service.proto: opts = 4,
    repository_root = 5), which the pip packages ship no Python class for."""
    def varint(n):
        out = bytearray()
        while n >= 0x80:
            out.append(n & 0x7F | 0x80)
            n >>= 7
        return bytes(out + bytes([n]))

    def field(number, payload):
        return varint(number << 3 | 2) + varint(len(payload)) + payload

    opts = profiler_options_pb2.ProfileOptions(version=1, duration_ms=duration_ms, host_tracer_level=2)
    return field(4, opts.SerializeToString()) + field(5, repository_root.encode())


def test_a_trace_is_captured_on_the_grpc_port_while_predicts_run(model_base, tmp_path):
    server = Server(model_name="toy", model_base_path=str(model_base))
    try:
        assert server.request("/v1/models/toy:predict", PREDICT)[0] == 200
        # The call's deadline reaches TensorFlow's service, which ends its profiling session:
        # the trace below could not start while another session was running.
        with pytest.raises(grpc.RpcError) as raised:
            server.channel.unary_unary("/tensorflow.ProfilerService/Profile")(
                profile_request(20_000, str(tmp_path / "cut")), timeout=0.5)
        assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        stop = threading.Event()

        def predicts():
            while not stop.is_set():
                server.request("/v1/models/toy:predict", PREDICT)

        sender = threading.Thread(target=predicts, daemon=True)
        sender.start()
        try:
            profiler_client.trace(f"127.0.0.1:{server.grpc_port}", str(tmp_path), 500, "", 3)
        finally:
            stop.set()
            sender.join(30)
        traces = glob.glob(os.path.join(tmp_path, "plugins", "profile", "*", "*.xplane.pb"))
        assert traces and os.path.getsize(traces[0]) > 0, os.listdir(tmp_path)

        assert raw_call(server, "Terminate") == b""  # an empty TerminateResponse, from TensorFlow's service
        with pytest.raises(grpc.RpcError) as raised:  # TensorFlow's own answer, passed on
            raw_call(server, "NoSuchMethod")
        assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED
    finally:
        server.close()


def test_without_the_profiler_its_calls_are_unimplemented(model_base, tmp_path):
    server = Server(model_name="toy", model_base_path=str(model_base), enable_profiler=False)
    try:
        with pytest.raises(grpc.RpcError) as raised:
            raw_call(server, "Terminate")
        assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED
        with pytest.raises((RuntimeError, tf.errors.OpError), match="UNAVAILABLE|UNIMPLEMENTED"):
            profiler_client.trace(f"127.0.0.1:{server.grpc_port}", str(tmp_path), 100, "", 1)
        assert server.request("/v1/models/toy:predict", PREDICT)[0] == 200
    finally:
        server.close()
