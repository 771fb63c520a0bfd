"""TensorFlow's profiler service on the stand-in's gRPC port (--enable_profiler, on by
default as in TF Serving), answered in-process: a trace captured with TensorFlow's own
client while predicts run, the one-session rule, Terminate, deadlines and cancellation, and
no port of its own."""

import glob
import logging
import os
import shutil
import tempfile
import threading
import time

import grpc
import pytest
import tensorflow as tf
from tensorflow.python.profiler import profiler_client
from tensorflow.python.profiler.internal import _pywrap_profiler
from tensorflow.tsl.profiler.protobuf import xplane_pb2

from serving.profiler import BUSY, ProfilerService
from serving_helpers import Server
from serving_models import save_toy

PREDICT = {"instances": [[1.0, 2.0], [3.0, 4.0]]}
MESSAGES = ProfilerService().messages


@pytest.fixture(scope="module")
def model_base(tmp_path_factory):
    base = tmp_path_factory.mktemp("models") / "toy"
    save_toy(str(base / "1"), 2.0)
    return base


def call(channel, method, request=None, response="TerminateResponse", **kw):
    return channel.unary_unary(f"/tensorflow.ProfilerService/{method}",
                               request_serializer=lambda r: r if isinstance(r, bytes) else r.SerializeToString(),
                               response_deserializer=MESSAGES[response].FromString)(request, **kw)


def profile_request(duration_ms, root="", session_id="run", host="here", emit=False):
    request = MESSAGES["ProfileRequest"](duration_ms=duration_ms, repository_root=root, session_id=session_id,
                                         host_name=host, emit_xspace=emit)
    request.opts.version, request.opts.duration_ms = 1, duration_ms
    return request


def profile(channel, request, **kw):
    return call(channel, "Profile", request, "ProfileResponse", **kw)


def profile_future(channel, request):
    method = channel.unary_unary("/tensorflow.ProfilerService/Profile",
                                 request_serializer=type(request).SerializeToString,
                                 response_deserializer=MESSAGES["ProfileResponse"].FromString)
    return method.future(request, timeout=60)


def events(xspace) -> int:
    return sum(len(line.events) for plane in xspace.planes for line in plane.lines)


class Predicts:
    """Predicts sent over REST, one after another, while the block runs."""

    def __init__(self, server):
        self.server, self.stop = server, threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self):
        while not self.stop.is_set():
            self.server.request("/v1/models/toy:predict", PREDICT)

    def __enter__(self):
        self.thread.start()

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(30)


def test_a_trace_is_captured_on_the_grpc_port_and_socket_while_predicts_run(model_base, tmp_path):
    socket_path = str(tmp_path / "grpc.sock")
    server = Server(model_name="toy", model_base_path=str(model_base), grpc_socket_path=socket_path,
                    profiler_root=str(tmp_path))
    try:
        with Predicts(server):
            profiler_client.trace(f"127.0.0.1:{server.grpc_port}", str(tmp_path / "logs"), 1000, "", 10)
            # Where TSL's service writes it: <repository_root>/<session_id>/<host_name>.xplane.pb,
            # with TensorFlow's client's root (logdir/plugins/profile) and host name (its address).
            traces = glob.glob(str(tmp_path / "logs" / "plugins" / "profile" / "*" / "*.xplane.pb"))
            assert [os.path.basename(t) for t in traces] == [f"127.0.0.1_{server.grpc_port}.xplane.pb"]
            with open(traces[0], "rb") as f:
                assert events(xplane_pb2.XSpace.FromString(f.read())) > 0

            # The UNIX socket answers too; emit_xspace returns the XSpace instead of writing it.
            with grpc.insecure_channel(f"unix:{socket_path}") as channel:
                answer = profile(channel, profile_request(300, str(tmp_path / "unused"), emit=True), timeout=30)
            assert not answer.empty_trace and events(answer.xspace) > 0
            assert not os.path.exists(tmp_path / "unused")

        with pytest.raises(grpc.RpcError) as raised:  # as TensorFlow's own service answers it
            call(server.channel, "Monitor", b"", timeout=10)
        assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED
        with pytest.raises(grpc.RpcError) as raised:
            call(server.channel, "GetSnapshot", b"", timeout=10)
        assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert server.request("/v1/models/toy:predict", PREDICT)[0] == 200
    finally:
        server.close()


def test_one_session_at_a_time_and_terminate_ends_it_early(model_base, tmp_path):
    server = Server(model_name="toy", model_base_path=str(model_base), profiler_root=str(tmp_path))
    try:
        started = time.monotonic()
        running = profile_future(server.channel, profile_request(30_000, str(tmp_path), "long", "a:1"))
        time.sleep(0.5)
        with pytest.raises(grpc.RpcError) as raised:  # TSL's service: INTERNAL, the profiler lock's message
            profile(server.channel, profile_request(100, str(tmp_path), "other"), timeout=10)
        assert (raised.value.code(), raised.value.details()) == (grpc.StatusCode.INTERNAL, BUSY)
        with pytest.raises(tf.errors.AlreadyExistsError):  # it is TensorFlow's session, which it sees
            _pywrap_profiler.ProfilerSession().start("", {})

        call(server.channel, "Terminate", MESSAGES["TerminateRequest"](session_id="elsewhere"), timeout=10)
        time.sleep(0.3)
        assert not running.done()
        call(server.channel, "Terminate", MESSAGES["TerminateRequest"](session_id="long"), timeout=10)
        assert running.result(timeout=10) is not None
        assert time.monotonic() - started < 15
        assert os.path.getsize(tmp_path / "long" / "a_1.xplane.pb") > 0

        # A Terminate for a session not running stops it as soon as it runs (TSL's service keeps
        # the mark); then the mark is gone.
        call(server.channel, "Terminate", MESSAGES["TerminateRequest"](session_id="early"), timeout=10)
        started = time.monotonic()
        profile(server.channel, profile_request(20_000, str(tmp_path), "early"), timeout=30)
        assert time.monotonic() - started < 10
    finally:
        server.close()


def wait_until_free(channel, tmp_path, seconds=10):
    """A short Profile succeeds within `seconds`: the one before has ended its session."""
    until = time.monotonic() + seconds
    while True:
        try:
            return profile(channel, profile_request(50, str(tmp_path), "next"), timeout=30)
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.INTERNAL or time.monotonic() > until:
                raise
            time.sleep(0.1)


def test_the_deadline_or_cancellation_of_a_call_ends_its_session(model_base, tmp_path):
    server = Server(model_name="toy", model_base_path=str(model_base), profiler_root=str(tmp_path))
    try:
        started = time.monotonic()
        with pytest.raises(grpc.RpcError) as raised:
            profile(server.channel, profile_request(30_000, str(tmp_path), "cut"), timeout=0.5)
        assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        wait_until_free(server.channel, tmp_path)
        assert time.monotonic() - started < 10

        started = time.monotonic()
        pending = profile_future(server.channel, profile_request(30_000, str(tmp_path), "cancelled"))
        time.sleep(0.5)
        assert pending.cancel()
        wait_until_free(server.channel, tmp_path)
        assert time.monotonic() - started < 10

        # A start time ahead (opts.start_timestamp_ns) is waited for within the deadline too.
        request = profile_request(100, str(tmp_path), "late")
        request.opts.start_timestamp_ns = time.time_ns() + 60 * 10**9
        with pytest.raises(grpc.RpcError) as raised:
            profile(server.channel, request, timeout=0.5)
        assert raised.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
        wait_until_free(server.channel, tmp_path)
        assert not os.path.exists(tmp_path / "cut") and not os.path.exists(tmp_path / "cancelled")
        assert not os.path.exists(tmp_path / "late")
    finally:
        server.close()


def test_without_the_profiler_its_calls_are_unimplemented(model_base, tmp_path):
    server = Server(model_name="toy", model_base_path=str(model_base), enable_profiler=False)
    try:
        with pytest.raises(grpc.RpcError) as raised:
            call(server.channel, "Terminate", MESSAGES["TerminateRequest"](session_id="x"), timeout=10)
        assert raised.value.code() == grpc.StatusCode.UNIMPLEMENTED
        with pytest.raises((RuntimeError, tf.errors.OpError), match="UNAVAILABLE|UNIMPLEMENTED"):
            profiler_client.trace(f"127.0.0.1:{server.grpc_port}", str(tmp_path), 100, "", 1)
        assert server.request("/v1/models/toy:predict", PREDICT)[0] == 200
    finally:
        server.close()


def listening_tcp_ports(pid: int) -> set[int]:
    """The TCP ports (IPv4 and IPv6) on which process `pid` has a listening socket: the
    LISTEN entries of /proc/net/tcp{,6} whose inode is one of the process's descriptors."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                if fields[3] == "0A" and fields[9] in inodes:  # st 0A: TCP_LISTEN
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def test_the_server_process_listens_on_its_two_ports_only_after_profiling(model_base, tmp_path):
    from serving.process import LocalServer

    with LocalServer("toy", str(model_base), log_path=str(tmp_path / "server.log"),
                     extra_flags=[f"--profiler_root={tmp_path}"]) as server:
        server.wait_for_version(1)
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            answer = profile(channel, profile_request(200, str(tmp_path / "logs")), timeout=60)
        assert os.path.exists(tmp_path / "logs" / "run" / "here.xplane.pb"), answer
        assert listening_tcp_ports(server.process.pid) == {server.grpc_port, server.rest_port}


def test_a_profile_writes_only_under_the_operators_directory_and_no_longer_than_its_maximum(model_base, tmp_path,
                                                                                            caplog):
    """Issue 87: repository_root=/etc with session_id z wrote /etc/z/h.xplane.pb; host_name
    "../../x" escaped the root; gs:// made the server try an outbound request; 2^40 ms grew
    RSS for as long as it ran, and 2^63 ms was UNKNOWN with a traceback."""
    root, outside = tmp_path / "profiles", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "out").symlink_to(outside)
    server = Server(model_name="toy", model_base_path=str(model_base), profiler_root=str(root),
                    profiler_max_duration_ms=5000)
    try:
        refused = [profile_request(50, str(outside), "z", "h"),
                   profile_request(50, str(root / ".." / "outside"), "z", "h"),
                   profile_request(50, "", "../../outside", "h"),
                   profile_request(50, "", "run", "../../outside/x"),
                   profile_request(50, "", str(outside), "h"),
                   profile_request(50, "", "run", str(outside / "x")),
                   profile_request(50, "out", "run", "h"),  # a link inside that leads outside
                   profile_request(50, "..", "outside", "h"),
                   profile_request(50, "gs://bucket/logs", "run", "h"),
                   profile_request(50, "s3://bucket/logs", "run", "h"),
                   profile_request(50, "hdfs://namenode/logs", "run", "h"),
                   profile_request(50, "", "run\0", "h"),
                   profile_request(2**40), profile_request(2**63), profile_request(2**64 - 1),
                   profile_request(6000)]
        late = profile_request(50)
        late.opts.start_timestamp_ns = time.time_ns() + 10**18
        for request in refused + [late]:
            with pytest.raises(grpc.RpcError) as raised:
                profile(server.channel, request, timeout=30)
            assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT, (request, raised.value.details())
            assert "\n" not in raised.value.details() and len(raised.value.details()) < 600
        assert os.listdir(outside) == [] and sorted(os.listdir(root)) == ["out"]
        assert not any(record.exc_info for record in caplog.records)

        # Inside the directory: a relative root under it, an absolute one in it, the longest duration.
        profile(server.channel, profile_request(50, "logs", "run", "a:1"), timeout=30)
        profile(server.channel, profile_request(50, str(root / "abs"), "run", "h"), timeout=30)
        assert os.path.getsize(root / "logs" / "run" / "a_1.xplane.pb") > 0
        assert os.path.getsize(root / "abs" / "run" / "h.xplane.pb") > 0
        started = time.monotonic()
        call(server.channel, "Terminate", MESSAGES["TerminateRequest"](session_id="longest"), timeout=10)
        profile(server.channel, profile_request(5000, "", "longest"), timeout=30)
        assert time.monotonic() - started < 5
    finally:
        server.close()


def test_without_a_directory_profiles_go_to_a_temporary_one_of_the_servers(model_base, tmp_path, caplog):
    server = Server(model_name="toy", model_base_path=str(model_base))
    try:
        caplog.set_level(logging.INFO, "serving.profiler")
        with pytest.raises(grpc.RpcError) as raised:
            profile(server.channel, profile_request(50, str(tmp_path), "z", "h"), timeout=30)
        assert raised.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        profile(server.channel, profile_request(50, "logs", "run", "h"), timeout=30)
        [root] = [record.args[0] for record in caplog.records if record.msg.startswith("Profiles are written under")]
        assert os.path.dirname(root) == tempfile.gettempdir() and os.listdir(tmp_path) == []
        assert os.path.getsize(os.path.join(root, "logs", "run", "h.xplane.pb")) > 0
        shutil.rmtree(root)
    finally:
        server.close()


def test_a_profile_ends_early_once_the_server_has_grown_by_its_memory_maximum(model_base, tmp_path, monkeypatch):
    """Issue 87: a long Profile under traffic grew RSS for as long as it ran (here ~30 MiB a
    second beside 32 busy clients), and writing its trace about twice as much again."""
    import serving.profiler

    looks = []  # each look: 100 MiB more
    monkeypatch.setattr(serving.profiler, "resident_bytes", lambda: looks.append(1) or (len(looks) - 1) * (100 << 20))
    server = Server(model_name="toy", model_base_path=str(model_base), profiler_root=str(tmp_path),
                    profiler_max_memory_bytes=750 << 20)
    try:
        profile(server.channel, profile_request(30_000, "", "grown"), timeout=20)
        assert os.path.getsize(tmp_path / "grown" / "here.xplane.pb") > 0
        # over a third of 750 MiB at the 4th look (the start, +100, +200, +300): the bench's 15 s Profile
        # collected +211 MiB, then grew the server by +350 MiB more while TensorFlow wrote it
        assert len(looks) == 4
    finally:
        server.close()
