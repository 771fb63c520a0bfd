"""A fixed pool of threads that gives each task to the thread that went idle last.

TF Serving starts its request thread pools whole, so the server's thread count is fixed
from start-up whatever clients do; this pool does the same. It also differs from
concurrent.futures.ThreadPoolExecutor in which thread runs a task: that executor's idle
threads take tasks in turn, so one client's requests visit every thread, each time with
cold caches and TensorFlow's per-thread state; here the most recently idle thread takes
the next task, so light traffic stays on one thread.

Example:
    >>> pool = WorkerPool(8, "rest")  # 8 threads exist now, none will be added
    >>> pool.submit(sum, [1, 2]).result()
    3
"""

from __future__ import annotations

import concurrent.futures
import threading


class _Worker:
    __slots__ = ("wake", "task")

    def __init__(self):
        self.wake = threading.Event()
        self.task = None  # (future, function, args, kwargs), or None to stop


class WorkerPool(concurrent.futures.Executor):
    def __init__(self, workers: int, name: str):
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []  # a stack: the last to go idle is the first to work
        self._queued: list = []  # tasks waiting for a worker, oldest first
        self._shutdown = False
        self._threads = [threading.Thread(target=self._run, args=(_Worker(),), name=f"{name}-{i}", daemon=True)
                         for i in range(workers)]
        for thread in self._threads:
            thread.start()

    def submit(self, function, /, *args, **kwargs) -> concurrent.futures.Future:
        future = concurrent.futures.Future()
        task = (future, function, args, kwargs)
        with self._lock:
            if self._shutdown:
                raise RuntimeError("cannot submit to a pool that was shut down")
            if not self._idle:
                self._queued.append(task)
                return future
            worker = self._idle.pop()
        worker.task = task
        worker.wake.set()
        return future

    def _run(self, worker: _Worker) -> None:
        while True:
            with self._lock:
                if self._queued:
                    worker.task = self._queued.pop(0)
                elif self._shutdown:
                    return
                else:
                    worker.wake.clear()
                    self._idle.append(worker)
            if worker.task is None:
                worker.wake.wait()
            task, worker.task = worker.task, None
            if task is None:  # woken to stop
                return
            future, function, args, kwargs = task
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(function(*args, **kwargs))
                except BaseException as error:
                    future.set_exception(error)
            # An idle thread must hold nothing of its last task: its arguments and result (or an
            # exception's frames) can be a request's whole decoded body.
            del task, future, function, args, kwargs

    def shutdown(self, wait: bool = True, *, cancel_futures: bool = False) -> None:
        with self._lock:
            self._shutdown = True
            idle, self._idle = self._idle, []
            if cancel_futures:
                for future, *_ in self._queued:
                    future.cancel()
                self._queued.clear()
        for worker in idle:
            worker.wake.set()  # task None: stop
        if wait:
            for thread in self._threads:
                thread.join()
