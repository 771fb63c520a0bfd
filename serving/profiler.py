"""TensorFlow's profiler service (`tensorflow.ProfilerService`) on the server's own gRPC port
and UNIX socket, as TF Serving's --enable_profiler registers it (server.cc,
tsl::profiler::CreateProfilerService); no other port is opened.

`ProfilerService` answers as TSL's profiler_service_impl.cc does, with TensorFlow's own
profiler session doing the profiling:

- Profile: one session at a time (a second call, or a session TensorFlow already runs in
  this process, is INTERNAL "Another profiling session active."); it starts at
  opts.start_timestamp_ns (when opts.version is set), lasts opts.duration_ms, ends early
  (OK) on a Terminate for its session_id, and is dropped if the call is cancelled
  (CANCELLED) or its deadline passes (DEADLINE_EXCEEDED). The XSpace is written to
  <repository_root>/<session_id>/<host>.xplane.pb (':' in the host written '_'; the host is
  opts.advanced_configuration["override_hostname"] if set, else host_name), or returned in
  the response with emit_xspace; empty_trace says whether any event was recorded.
- Unlike TSL's service, a Profile writes only under the directory the operator chose
  (`root`, --profiler_root; by default a temporary directory of the server's, made at the first
  Profile): a relative repository_root is taken under it, and a repository_root, session_id
  or host name whose file would resolve outside it (`..`, an absolute path elsewhere, a
  symbolic link out) is INVALID_ARGUMENT, as is a URI (gs://, s3://, hdfs://: no outbound file
  system). A duration, or a start ahead, longer than `max_duration_ms`
  (--profiler_max_duration_ms) is INVALID_ARGUMENT before the session starts; a session ends
  early (its trace written, OK) once the server has grown by a third of
  --profiler_max_memory_bytes while it traced (writing the trace takes about twice as much
  again): what the profiler collects grows with traffic (~30 MiB a second beside 32 busy
  clients).
- Terminate: marks the session_id to stop; always OK.
- Monitor: UNIMPLEMENTED, as TensorFlow's own service answers it (and grpc answers the
  continuous-profiling methods TensorFlow 2.21 declares, which this service leaves out).

A trace is captured with TensorFlow's own client, and written under the logdir for
TensorBoard's profile plugin (logdir/plugins/profile/<run>/<host>.xplane.pb):

    >>> import tensorflow as tf
    >>> from concurrent.futures import ThreadPoolExecutor
    >>> from tensorflow.python.profiler import profiler_client
    >>> server = grpc.server(ThreadPoolExecutor(2))
    >>> server.add_generic_rpc_handlers((generic_handler(ProfilerService(str(tmp_path))),))
    >>> port = server.add_insecure_port("127.0.0.1:0")
    >>> server.start()
    >>> tracing = ThreadPoolExecutor(1).submit(profiler_client.trace, f"127.0.0.1:{port}", str(tmp_path), 200)
    >>> while not tracing.done(): _ = tf.reduce_sum(tf.ones(8))  # TensorFlow work, traced meanwhile
    >>> tracing.result()  # raises if no event was traced
    >>> [os.path.relpath(trace, tmp_path) for trace in glob.glob(f"{tmp_path}/plugins/profile/*/*.xplane.pb")]
    ['plugins/profile/.../127.0.0.1_....xplane.pb']
    >>> server.stop(None).wait()
    True
"""

from __future__ import annotations

import glob
import logging
import os
import re
import tempfile
import threading
import time

import grpc

from serving.model_memory import resident_bytes
from serving.status import InvalidArgument, shown

log = logging.getLogger(__name__)

SERVICE = "tensorflow.ProfilerService"
BUSY = "Another profiling session active."  # TSL's ProfilerLock message, which its service passes on
# TSL's ProfilerSession::DefaultOptions
DEFAULT_LEVELS = {"host_tracer_level": 2, "device_tracer_level": 1, "python_tracer_level": 0}
MAX_STOP_MARKS = 1024  # Terminate marks kept for sessions not (yet) running; the oldest go first
DEFAULT_MAX_DURATION_MS = 60_000  # --profiler_max_duration_ms
DEFAULT_MAX_MEMORY_BYTES = 256 << 20  # --profiler_max_memory_bytes
# Writing a trace holds about twice what was collected (bench-hostile's admin group: +211 MiB
# collected in 15 s, then +350 MiB while TensorFlow exported it): tracing ends at a third of the bound.
COLLECTED_SHARE = 3
MEMORY_CHECK_SECONDS = 0.1
_URI = re.compile(r"^[a-zA-Z][0-9a-zA-Z.+-]*:/")  # gs://, s3://, hdfs://, file:/ ...


def service_messages() -> dict:
    """ProfileRequest, ProfileResponse, TerminateRequest and TerminateResponse of TSL's
    tsl/profiler/protobuf/profiler_service.proto (package tensorflow), declared here because
    TensorFlow ships no Python module for it. Only the fields this service reads or writes
    are declared, with TensorFlow 2.21's names and numbers; the client's others (max_events,
    tools, tool_options) are kept as unknown fields. The messages live in a pool of their own,
    beside copies of the two files they use, so that they never clash with a module that
    does declare them."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
    from tensorflow.tsl.profiler.protobuf import profiler_options_pb2, xplane_pb2

    pool = descriptor_pool.DescriptorPool()
    for module in (profiler_options_pb2, xplane_pb2):
        file = descriptor_pb2.FileDescriptorProto()
        module.DESCRIPTOR.CopyToProto(file)
        pool.Add(file)
    field = descriptor_pb2.FieldDescriptorProto
    scalars = {"uint64": field.TYPE_UINT64, "string": field.TYPE_STRING, "bool": field.TYPE_BOOL}
    declared = {
        "ProfileRequest": [("duration_ms", 1, "uint64"), ("opts", 4, ".tensorflow.ProfileOptions"),
                           ("repository_root", 5, "string"), ("session_id", 6, "string"),
                           ("host_name", 7, "string"), ("emit_xspace", 9, "bool")],
        "ProfileResponse": [("empty_trace", 7, "bool"), ("xspace", 8, ".tensorflow.profiler.XSpace")],
        "TerminateRequest": [("session_id", 1, "string")],
        "TerminateResponse": [],
    }
    file = descriptor_pb2.FileDescriptorProto(
        name="tsl/profiler/protobuf/profiler_service.proto", package="tensorflow", syntax="proto3",
        dependency=[profiler_options_pb2.DESCRIPTOR.name, xplane_pb2.DESCRIPTOR.name])
    for name, fields in declared.items():
        message = file.message_type.add(name=name)
        for field_name, number, kind in fields:
            message.field.add(name=field_name, number=number, label=field.LABEL_OPTIONAL,
                              **({"type": scalars[kind]} if kind in scalars else
                                 {"type": field.TYPE_MESSAGE, "type_name": kind}))
    pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tensorflow.{name}"))
            for name in declared}


def join_path(*parts: str) -> str:
    """tsl::io::JoinPath, as TSL's service joins the repository root, session and file name:
    one '/' between non-empty parts, whatever slashes they begin or end with.

    >>> join_path("/logs/plugins/profile", "/run", "host.xplane.pb")
    '/logs/plugins/profile/run/host.xplane.pb'
    """
    joined = ""
    for part in filter(None, parts):
        if not joined:
            joined = part
        elif joined.endswith("/") and part.startswith("/"):
            joined += part[1:]
        elif joined.endswith("/") or part.startswith("/"):
            joined += part
        else:
            joined += "/" + part
    return joined


def is_empty(xspace: bytes) -> bool:
    """TSL's IsEmpty of a serialized XSpace: no event on any line of any plane. Read from the
    wire format up to the first event, without parsing the message: 15 s of traffic traced is
    ~15 MB, whose parse held the GIL (and every request) for ~0.2 s.

    >>> from tensorflow.tsl.profiler.protobuf import xplane_pb2
    >>> space = xplane_pb2.XSpace(planes=[xplane_pb2.XPlane(name="p", lines=[xplane_pb2.XLine(id=1)])])
    >>> is_empty(space.SerializeToString())
    True
    >>> _ = space.planes[0].lines[0].events.add()  # an event of default values: still an event
    >>> is_empty(space.SerializeToString())
    False
    """
    planes = fields(xspace, 1)  # XSpace.planes
    lines = (line for plane in planes for line in fields(plane, 3))  # XPlane.lines
    return not any(next(iter(fields(line, 4)), None) is not None for line in lines)  # XLine.events


def fields(message: bytes, number: int):
    """The length-delimited fields `number` of a serialized protobuf message, as memoryviews."""
    view, at = memoryview(message), 0

    def varint():
        nonlocal at
        value, shift = 0, 0
        while True:
            byte = view[at]
            at += 1
            value |= (byte & 0x7F) << shift
            if byte < 0x80:
                return value
            shift += 7

    while at < len(view):
        key = varint()
        wire = key & 7
        if wire == 0:
            varint()
        elif wire == 1:
            at += 8
        elif wire == 5:
            at += 4
        elif wire == 2:
            size = varint()
            if key >> 3 == number:
                yield view[at:at + size]
            at += size
        else:
            raise ValueError(f"protobuf wire type {wire} (groups) in an XSpace")


def inside(path: str, root: str) -> bool:
    """True if `path`, its symbolic links resolved, is `root` (resolved) or under it.

    >>> inside("/srv/profiles/run/../run/h.xplane.pb", "/srv/profiles"), inside("/srv/profiles/../x", "/srv/profiles")
    (True, False)
    """
    path, root = os.path.realpath(path), os.path.realpath(root)
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def trace_path(root: str, repository_root: str, session_id: str, host: str) -> str:
    """Where a Profile's XSpace goes: <repository_root>/<session_id>/<host>.xplane.pb (':' in the
    host written '_'), a relative repository_root taken under `root`; InvalidArgument, in one
    line, for a file that would not be under `root`, or on another file system.

    >>> trace_path("/srv/profiles", "logs/plugins/profile", "run", "127.0.0.1:8500")
    '/srv/profiles/logs/plugins/profile/run/127.0.0.1_8500.xplane.pb'
    >>> trace_path("/srv/profiles", "/etc", "z", "h")
    Traceback (most recent call last):
    serving.status.InvalidArgument: Profile: repository_root /etc is outside the server's profile directory (--profiler_root)
    """
    if _URI.match(repository_root):
        raise InvalidArgument(f"Profile: repository_root {shown(repository_root)} is not a local path; this server "
                              "writes profiles under its own directory (--profiler_root) only")
    for key, value in (("repository_root", repository_root), ("session_id", session_id), ("host_name", host)):
        if "\0" in value:
            raise InvalidArgument(f"Profile: {key} holds a NUL character")
    for key, value in (("session_id", session_id), ("host_name", host)):
        if "/" in value or value in (".", ".."):
            raise InvalidArgument(f"Profile: {key} {shown(value)} is not one folder or file name")
    repository = os.path.join(root, repository_root)  # an absolute repository_root stays itself
    if not inside(repository, root):
        raise InvalidArgument(f"Profile: repository_root {shown(repository_root)} is outside the server's profile "
                              "directory (--profiler_root)")
    path = join_path(repository, session_id, f"{host}.xplane.pb".replace(":", "_"))
    if not inside(path, root):
        raise InvalidArgument(f"Profile: session_id {shown(session_id)} and host_name {shown(host)} lead outside "
                              "the server's profile directory (--profiler_root)")
    return path


class MemoryGrowth:
    """Called, True once the process has grown by more than `limit` bytes since it was made
    (what TensorFlow's profiler collects grows with traffic: ~30 MiB a second beside 32 busy
    clients); `over` is then the growth."""

    def __init__(self, limit: int):
        self.limit, self.start, self.over = limit, resident_bytes(), 0

    def __call__(self) -> bool:
        growth = resident_bytes() - self.start
        if growth > self.limit:
            self.over = growth
        return bool(self.over)


class ProfilerService:
    """The Profile, Terminate and Monitor methods of `tensorflow.ProfilerService`, writing
    under `root` ("": a temporary directory, made at the first Profile) for at most
    `max_duration_ms` a session, ended early once the server has grown by a third of
    `max_memory_bytes` (writing its trace takes the rest)."""

    def __init__(self, root: str = "", max_duration_ms: int = DEFAULT_MAX_DURATION_MS,
                 max_memory_bytes: int = DEFAULT_MAX_MEMORY_BYTES):
        self._root, self.max_duration_ms, self.max_memory_bytes = root, max_duration_ms, max_memory_bytes
        self._root_lock = threading.Lock()
        self.messages = service_messages()
        self._busy = threading.Lock()  # one Profile call at a time, from its request to its answer
        self._changed = threading.Condition()  # a Terminate, or a call ending
        self._stops: dict[str, None] = {}  # session ids told to stop (insertion-ordered)

    def profile(self, request, context):
        from tensorflow.python.framework import errors
        from tensorflow.python.profiler.internal import _pywrap_profiler

        try:
            self._check(request)
        except InvalidArgument as error:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        if not self._busy.acquire(blocking=False):
            context.abort(grpc.StatusCode.INTERNAL, BUSY)
        try:
            ended = threading.Event()

            def end():
                ended.set()
                with self._changed:
                    self._changed.notify_all()

            context.add_callback(end)
            opts = request.opts
            if opts.version and opts.start_timestamp_ns:  # without a version, TSL takes its defaults
                self._wait(context, ended, (opts.start_timestamp_ns - time.time_ns()) / 1e9)
            with tempfile.TemporaryDirectory(prefix="kerasbert-profile-") as scratch:
                session = _pywrap_profiler.ProfilerSession()
                try:
                    try:
                        # TensorFlow 2.21's binding reads these levels as booleans (it warns, and keeps
                        # its defaults): only those the client changed are passed, to be warned about.
                        session.start(scratch, {key: getattr(opts, key) for key, default in DEFAULT_LEVELS.items()
                                                if opts.version and getattr(opts, key) != default})
                    except errors.OpError as error:
                        context.abort(grpc.StatusCode.INTERNAL, error.message)
                    grown = MemoryGrowth(self.max_memory_bytes // COLLECTED_SHARE)
                    self._wait(context, ended, opts.duration_ms / 1000, request.session_id, grown)
                    if grown.over:
                        log.warning("Profile %s ended early: the server grew by %d MiB while it traced "
                                    "(--profiler_max_memory_bytes=%d)", shown(request.session_id),
                                    grown.over >> 20, self.max_memory_bytes)
                    session.export_to_tb()  # scratch/plugins/profile/<run>/<this host>.xplane.pb
                finally:
                    session.stop()  # a no-op once exported; else the session ends here, its lock freed
                exported = glob.glob(os.path.join(scratch, "plugins", "profile", "*", "*.xplane.pb"))
                if len(exported) != 1:
                    context.abort(grpc.StatusCode.INTERNAL, "TensorFlow's profiler wrote no XSpace")
                with open(exported[0], "rb") as f:
                    data = f.read()
            return self._answer(request, context, data)
        finally:
            self._busy.release()

    def root(self) -> str:
        """The directory profiles are written under (made now if it is the default's)."""
        with self._root_lock:
            if not self._root:
                self._root = tempfile.mkdtemp(prefix="kerasbert-profiles-")
                log.info("Profiles are written under %s (--profiler_root)", self._root)
            return self._root

    def _check(self, request) -> None:
        """InvalidArgument for a session longer, or starting later, than max_duration_ms, or
        for a file `trace_path` refuses."""
        opts = request.opts
        for key, value in (("duration_ms", request.duration_ms), ("opts.duration_ms", opts.duration_ms)):
            if value > self.max_duration_ms:
                raise InvalidArgument(f"Profile: {key} {value} is over this server's longest profile, "
                                      f"{self.max_duration_ms} ms (--profiler_max_duration_ms)")
        if opts.version and opts.start_timestamp_ns > time.time_ns() + self.max_duration_ms * 10**6:
            raise InvalidArgument(f"Profile: opts.start_timestamp_ns {opts.start_timestamp_ns} is more than "
                                  f"{self.max_duration_ms} ms ahead (--profiler_max_duration_ms)")
        if not request.emit_xspace:
            trace_path(self.root(), request.repository_root, request.session_id, self._host(request))

    @staticmethod
    def _host(request) -> str:
        advanced = request.opts.advanced_configuration
        return (advanced["override_hostname"].string_value if "override_hostname" in advanced else "") \
            or request.host_name

    def _wait(self, context, ended: threading.Event, seconds: float, session_id: str | None = None,
              over_memory=lambda: False):
        """Waits `seconds`, or until a Terminate for `session_id` (whose mark it clears) or
        `over_memory()` (asked every MEMORY_CHECK_SECONDS); aborts CANCELLED (as TSL's service)
        once the call is cancelled, DEADLINE_EXCEEDED (what its client sees then) once its
        deadline has passed."""
        remaining = context.time_remaining()
        now = time.monotonic()
        until = now + max(seconds, 0.0)
        deadline = now + remaining if remaining is not None else float("inf")
        with self._changed:
            while True:
                now = time.monotonic()
                if ended.is_set() or now >= deadline or not context.is_active():
                    break
                if session_id is not None and session_id in self._stops:
                    del self._stops[session_id]
                    return
                if now >= until or over_memory():
                    return
                self._changed.wait(min(until, deadline, now + MEMORY_CHECK_SECONDS) - now)
        if time.monotonic() >= deadline:
            context.abort(grpc.StatusCode.DEADLINE_EXCEEDED, "Deadline Exceeded")
        context.abort(grpc.StatusCode.CANCELLED, "Cancelled")

    def _answer(self, request, context, data: bytes):
        response = self.messages["ProfileResponse"](empty_trace=is_empty(data))
        if request.emit_xspace:
            response.xspace.ParseFromString(data)
            return response
        root = self.root()
        try:
            path = trace_path(root, request.repository_root, request.session_id, self._host(request))
            os.makedirs(os.path.dirname(path), exist_ok=True)
            if not inside(os.path.dirname(path), root):  # a folder swapped for a link meanwhile
                raise InvalidArgument("Profile: the session's folder leads outside the server's profile directory")
            # O_NOFOLLOW: a link put where the file goes is not written through
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
            with os.fdopen(fd, "wb") as f:
                f.write(data)
        except InvalidArgument as error:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(error))
        except OSError as error:
            context.abort(grpc.StatusCode.INTERNAL, f"Profile: cannot write the trace: {error.strerror}")
        log.info("Profile saved to %s", path)
        return response

    def terminate(self, request, context):
        with self._changed:
            self._stops.pop(request.session_id, None)
            self._stops[request.session_id] = None
            while len(self._stops) > MAX_STOP_MARKS:
                del self._stops[next(iter(self._stops))]
            self._changed.notify_all()
        return self.messages["TerminateResponse"]()

    def monitor(self, request: bytes, context):
        context.abort(grpc.StatusCode.UNIMPLEMENTED, "unimplemented.")


def generic_handler(service: ProfilerService) -> grpc.GenericRpcHandler:
    """The handler to add to a grpc server for /tensorflow.ProfilerService/{Profile,
    Terminate,Monitor}; grpc answers its other methods UNIMPLEMENTED."""
    messages = service.messages

    def method(behaviour, request=None, response=None):
        return grpc.unary_unary_rpc_method_handler(
            behaviour, request_deserializer=request.FromString if request else None,
            response_serializer=response.SerializeToString if response else None)

    return grpc.method_handlers_generic_handler(SERVICE, {
        "Profile": method(service.profile, messages["ProfileRequest"], messages["ProfileResponse"]),
        "Terminate": method(service.terminate, messages["TerminateRequest"], messages["TerminateResponse"]),
        "Monitor": method(service.monitor),
    })
