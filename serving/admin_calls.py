"""The admin surface's gRPC calls (ModelService's ReloadConfig and GetModelStatus, the
profiler's Profile, Terminate and Monitor) on a small bounded pool of their own, so that no
number of them can starve Predict, Classify, Regress and MultiInference.

Each admin call runs on `AdminCalls.pool`, `slots` threads apart from the --grpc_max_threads of
the request calls (grpcio runs a behaviour on its `experimental_thread_pool`); an admin call
arriving while `slots` are running or waiting for a thread is UNAVAILABLE at once. At most one
ReloadConfig runs at a time; another waits for it until its own deadline, or is UNAVAILABLE at
once without one (issue 87: ten ReloadConfigs without a deadline held every gRPC thread).

Example:
    >>> admin = AdminCalls(slots=2)
    >>> with admin.one_reload(deadline=None):
    ...     admin.one_reload(deadline=None).__enter__()
    Traceback (most recent call last):
    serving.status.Unavailable: Another ReloadConfig is under way: try again once it has finished
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import threading
import time

import grpc

from serving.status import Unavailable

ADMIN_THREADS = 4  # admin calls running at once: a ReloadConfig, a Profile, and two more
ADMIN_METHODS = frozenset({
    "/tensorflow.serving.ModelService/HandleReloadConfigRequest",
    "/tensorflow.serving.ModelService/GetModelStatus",
    "/tensorflow.ProfilerService/Profile",
    "/tensorflow.ProfilerService/Terminate",
    "/tensorflow.ProfilerService/Monitor",
})


class AdminPool(concurrent.futures.ThreadPoolExecutor):
    """A thread pool that counts the calls it holds, running or waiting for a thread."""

    def __init__(self, threads: int):
        super().__init__(threads, thread_name_prefix="grpc-admin")
        self._held_lock = threading.Lock()
        self.held = 0

    def submit(self, function, /, *args, **kwargs):
        with self._held_lock:
            self.held += 1
        future = super().submit(function, *args, **kwargs)
        future.add_done_callback(self._done)  # also when cancelled
        return future

    def _done(self, _future) -> None:
        with self._held_lock:
            self.held -= 1


class AdminCalls(grpc.ServerInterceptor):
    """Runs admin calls on a pool of `slots` threads (the others UNAVAILABLE) and one
    ReloadConfig at a time."""

    def __init__(self, slots: int = ADMIN_THREADS):
        self.slots = slots
        self.pool = AdminPool(slots)
        self._reload = threading.Lock()

    def intercept_service(self, continuation, details):
        handler = continuation(details)
        if handler is None or details.method not in ADMIN_METHODS or handler.unary_unary is None:
            return handler
        if self.pool.held >= self.slots:
            return grpc.unary_unary_rpc_method_handler(self._refuse)  # on a request thread, for a moment
        behaviour = handler.unary_unary

        def admitted(request, context):
            return behaviour(request, context)

        admitted.experimental_thread_pool = self.pool
        return grpc.unary_unary_rpc_method_handler(admitted, handler.request_deserializer,
                                                   handler.response_serializer)

    def _refuse(self, request, context):
        context.abort(grpc.StatusCode.UNAVAILABLE, f"The server's {self.slots} admin threads are busy "
                                                   "(ReloadConfig, GetModelStatus, profiler): try again later")

    @contextlib.contextmanager
    def one_reload(self, deadline: float | None):
        """Held while a ReloadConfig runs; waits for one under way until `deadline`
        (time.monotonic()), else Unavailable."""
        wait = 0.0 if deadline is None else deadline - time.monotonic()
        if not (self._reload.acquire(timeout=wait) if wait > 0 else self._reload.acquire(blocking=False)):
            raise Unavailable("Another ReloadConfig is under way: try again once it has finished")
        try:
            yield
        finally:
            self._reload.release()
