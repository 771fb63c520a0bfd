"""Server-side batching with TF Serving's semantics (batching/batching_session.h, .cc,
batching_util.h), configured by its BatchingParameters.

Requests for the same servable and signature wait in one queue. Each request (a task)
is checked at the door: every input has a 0th dimension and all share its size, as
BatchingSession::ComputeInputSize requires; a task that cannot be batched is refused
with TF Serving's message, never merged. One of `num_batch_threads` workers takes up
to `max_batch_size` rows, waiting at most `batch_timeout_micros` after the oldest task
for more; the queues take turns (a worker runs one batch of a queue, then the next queue's:
SharedBatchScheduler's round robin), so a flood of one model's work delays another's by one
batch at most per worker. Only tasks whose inputs have the same shapes past the 0th dimension share a
batch (or any, padded, with `pad_variable_length_inputs`). Every output of a batch
must have the batch's rows in its 0th dimension, or the batch fails
(SplitOutputTensors): an answer is always cut from its own rows. The pieces of a split
request, run in batches of different widths, are joined padded to the widest, as the
direct session joins its slices (session.concatenate_rows). With
`allowed_batch_sizes` a batch is padded up to the next allowed size by repeating the
first row of its last task. With `enable_large_batch_splitting`, a task larger than
`max_execution_batch_size` runs as several pieces.

Model work is bounded as without batching (session.ModelWorkLimits): a request of more
rows than --max_request_batch_size is refused, one of more padded tokens than one call
takes (--max_execution_tokens, and with `budget_bytes` half of that memory in activations,
as the direct session's calls) runs as several pieces (cut by what its rows cost, where the
SavedModel declares it: serving/row_costs.py), and no batch holds more padded tokens.

Deadlines travel with each task: one whose deadline passed while it waited is dropped,
not run (RESOURCE_EXHAUSTED, TF Serving's "Run() timeout exceeded while waiting in
batching queue"), and a split task stops at the next piece. Past `max_enqueued_batches`
full batches of backlog a task is refused (429). A queue exists only while it holds
tasks, so nothing keeps an unloaded version alive.

The BatchingParameters message is declared in serving/protos.py (tensorflow-serving-api
does not ship it).

Example:
    >>> session = BatchingSession(parse_batching_parameters("max_batch_size { value: 32 }"))
    >>> session.run(servable, "serving_default", {"x": np.array([[1.0, 2.0]], np.float32)},
    ...             deadline=time.monotonic() + 30)
    {'rows': array([1]), 'y': array([[2., 4.]], dtype=float32)}
    >>> session.close()
"""

from __future__ import annotations

import asyncio
import collections
import threading
import time

import numpy as np

from serving.protos import BatchingParameters, parse_text
from serving.session import ModelWorkLimits, check_deadline, concatenate_rows, declared_costs
from serving.status import Cancelled, DeadlineExceeded, FailedPrecondition, InvalidArgument, ResourceExhausted


def parse_batching_parameters(text: str):
    """A `--batching_parameters_file`'s text as a BatchingParameters message."""
    return parse_text(BatchingParameters, text)


def _value(parameters, field: str, default):
    return getattr(parameters, field).value if parameters.HasField(field) else default


def batch_size_of(inputs: dict[str, np.ndarray]) -> int:
    """The task's 0th-dimension size (batching_util.h, ComputeTensorBatchSize)."""
    if not inputs:
        raise InvalidArgument("Batching Run() must have at least one input tensor")
    sizes = set()
    for array in inputs.values():
        if array.ndim == 0:
            raise InvalidArgument("Batching Run() input tensors must have at least one dimension")
        sizes.add(array.shape[0])
    if len(sizes) > 1:
        raise InvalidArgument("Batching Run() input tensors must have equal 0th-dimension size")
    return sizes.pop()


class _Request:
    """One caller's request, run as one piece or several; `on_done(outputs, error)` is called
    (on a batch thread) when every piece has run, or at the first that failed."""

    def __init__(self, pieces: int, deadline: float | None, on_done, cancelled=None):
        self.deadline, self.cancelled = deadline, cancelled
        self.outputs: list = [None] * pieces
        self.left = pieces
        self.started = False  # a piece has run (or is running)
        self.error: Exception | None = None
        self.on_done = on_done
        self._lock = threading.Lock()  # pieces may finish on different batch threads

    def expired(self, now: float) -> bool:
        """Its deadline passed, or its client cancelled it."""
        return (self.deadline is not None and self.deadline <= now) or (self.cancelled is not None and
                                                                         self.cancelled())

    def finish_piece(self, index: int, outputs=None, error: Exception | None = None) -> None:
        with self._lock:
            if self.error is not None:
                return
            if error is not None:
                self.error = error  # the caller hears at once; its other pieces are skipped
                done = (None, error)
            else:
                self.outputs[index] = outputs
                self.left -= 1
                if self.left:
                    return
                done = None
        if done is None:  # every piece has run: their rows joined, narrower ones padded (session.py)
            try:
                done = ({name: concatenate_rows([piece[name] for piece in self.outputs], name)
                         for name in self.outputs[0]}, None)
            except Exception as failed:
                done = (None, failed)
        self.on_done(*done)


class _Task:
    """One piece of a request: rows of its inputs that run in one batch."""

    def __init__(self, request: _Request, index: int, inputs: dict[str, np.ndarray], row_tokens: int):
        self.request, self.index, self.inputs = request, index, inputs
        self.size = batch_size_of(inputs)
        self.row_tokens = row_tokens  # padded tokens of each of its rows: its widest (ModelWorkLimits.slices)
        self.shapes = tuple(sorted((name, array.shape[1:], array.dtype.str) for name, array in inputs.items()))
        self.arrived = time.monotonic()


class BatchingSession:
    """Callable as the direct session is: run(servable, signature, inputs, deadline)."""

    def __init__(self, parameters, limits: ModelWorkLimits | None = None, budget_bytes: int | None = None):
        self.limits, self.budget_bytes = limits or ModelWorkLimits(), budget_bytes
        self.call_tokens = self.limits.call_tokens(budget_bytes)  # padded tokens of one batch at most
        self.max_batch_size = _value(parameters, "max_batch_size", 1000)
        self.timeout = _value(parameters, "batch_timeout_micros", 0) / 1e6
        self.splitting = _value(parameters, "enable_large_batch_splitting", False)
        self.max_execution = (_value(parameters, "max_execution_batch_size", self.max_batch_size)
                              if self.splitting else self.max_batch_size)
        self.max_enqueued_rows = _value(parameters, "max_enqueued_batches", 1000000) * self.max_execution
        self.allowed = sorted(parameters.allowed_batch_sizes)
        self.pad_lengths = parameters.pad_variable_length_inputs
        if self.allowed and self.allowed[-1] != self.max_execution:
            raise InvalidArgument(f"allowed_batch_sizes must end with max_batch_size ({self.allowed[-1]} != "
                                  f"{self.max_execution})")
        self._queues: dict[tuple, collections.deque] = {}
        self._condition = threading.Condition()
        self._closed = False
        self.on_batch = None  # (each task's seconds queued, each task's rows, rows, padded rows) of a batch
        for i in range(_value(parameters, "num_batch_threads", 4)):
            threading.Thread(target=self._work, name=f"batch-{i}", daemon=True).start()

    def run(self, servable, signature: str, inputs: dict[str, np.ndarray],
            deadline: float | None = None, cancelled=None) -> dict[str, np.ndarray]:
        done, result = threading.Event(), []

        def finished(outputs, error):
            result.append((outputs, error))
            done.set()
        self.submit(servable, signature, inputs, deadline, finished, cancelled)
        done.wait()
        outputs, error = result[0]
        if error is not None:
            raise error
        return outputs

    async def run_async(self, servable, signature: str, inputs: dict[str, np.ndarray],
                        deadline: float | None = None, cancelled=None) -> dict[str, np.ndarray]:
        """`run` for an event loop: no thread waits while the request is queued and run."""
        loop = asyncio.get_running_loop()
        future = loop.create_future()

        def finished(outputs, error):
            def settle():
                if not future.done():
                    future.set_exception(error) if error is not None else future.set_result(outputs)
            loop.call_soon_threadsafe(settle)
        self.submit(servable, signature, inputs, deadline, finished, cancelled)
        return await future

    def submit(self, servable, signature: str, inputs: dict[str, np.ndarray], deadline: float | None,
               on_done, cancelled=None) -> None:
        """Checks the request at the door (raising what is wrong with it), then queues it;
        `on_done(outputs, error)` is called from a batch thread once it has run. `cancelled()`
        true (its gRPC client left) drops its pieces not yet run, as a passed deadline does."""
        inputs = servable.check_inputs(signature, inputs)  # a bad request fails alone, here
        size = batch_size_of(inputs)
        self.limits.check_request(size)
        if size > self.max_batch_size:  # shared_batch_scheduler refuses it likewise
            raise InvalidArgument(f"Task size {size} is larger than maximum input batch size {self.max_batch_size}")
        check_deadline(deadline, cancelled=cancelled)
        if size == 0:  # no rows to batch
            on_done(servable.run(signature, inputs), None)
            return
        slices = self.limits.slices(inputs, declared_costs(servable, signature), self.budget_bytes, self.max_execution)
        request = _Request(len(slices), deadline, on_done, cancelled)
        tasks = [_Task(request, i, {n: a[start:stop] for n, a in inputs.items()}, row_tokens)
                 for i, (start, stop, row_tokens) in enumerate(slices)]
        key = (servable, signature)
        with self._condition:
            queue = self._queues.get(key)
            queued = sum(t.size for t in queue) if queue else 0
            if queued + size > self.max_enqueued_rows:
                raise ResourceExhausted("The batch scheduling queue to which this task was submitted is full")
            self._queues.setdefault(key, collections.deque()).extend(tasks)
            self._condition.notify_all()

    def queued_tasks(self) -> int:
        with self._condition:
            return sum(len(queue) for queue in self._queues.values())

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._condition.notify_all()

    # --- Workers ------------------------------------------------------------------------

    def _take_batch(self):
        """Waits for work; returns (key, tasks) once a batch is full or its oldest task waited
        `batch_timeout_micros`."""
        with self._condition:
            while not self._closed:
                ready, wait = None, None
                now = time.monotonic()
                for key, queue in self._queues.items():
                    self._drop_finished(queue, now)
                    if not queue:
                        continue
                    left = queue[0].arrived + self.timeout - now
                    if sum(t.size for t in queue) >= self._batch_rows(queue[0]) or left <= 0:
                        ready = key
                        break
                    wait = left if wait is None else min(wait, left)
                for key in [k for k, q in self._queues.items() if not q]:
                    del self._queues[key]
                if ready is not None:  # round robin: a queue just served goes behind the others
                    queue = self._queues.pop(ready)
                    tasks = self._form_batch(queue)
                    if queue:
                        self._queues[ready] = queue
                    return ready, tasks
                self._condition.wait(wait)
        return None, None

    @staticmethod
    def _drop_finished(queue: collections.deque, now: float) -> None:
        """Tasks at the head whose request failed already, or whose deadline passed, leave
        without running (BatchingSession::ProcessBatch's timeout check)."""
        while queue and (queue[0].request.error is not None or queue[0].request.expired(now)):
            _drop(queue.popleft())

    def _batch_rows(self, head: _Task) -> int:
        """Rows of a batch at most, for a batch of tasks like `head`: max_execution_batch_size,
        and `call_tokens` padded tokens."""
        return min(self.max_execution, max(1, self.call_tokens // head.row_tokens))

    def _form_batch(self, queue: collections.deque) -> list[_Task]:
        """The head task and, in order, those after it that fit (in rows, and in padded tokens:
        a batch's rows are as wide as its widest) and share its shapes."""
        head, now = queue.popleft(), time.monotonic()
        tasks, rows, widest, kept = [head], head.size, head.row_tokens, collections.deque()
        while queue and rows < self._batch_rows(head):
            task = queue.popleft()
            wider = max(widest, task.row_tokens)
            if task.request.error is not None or task.request.expired(now):
                _drop(task)
            elif (rows + task.size <= self.max_execution
                  and (rows + task.size) * wider <= self.call_tokens
                  and (self.pad_lengths or task.shapes == head.shapes)):
                tasks.append(task)
                rows, widest = rows + task.size, wider
            else:
                kept.append(task)
        queue.extendleft(reversed(kept))
        return tasks

    def _work(self) -> None:
        while True:
            key, tasks = self._take_batch()
            if tasks is None:
                return
            servable, signature = key
            try:
                outputs = self._run_batch(servable, signature, tasks)
            except InvalidArgument as error:  # one request's rows? then each runs alone
                if len(tasks) == 1:
                    tasks[0].request.finish_piece(tasks[0].index, error=error)
                    continue
                for task in tasks:
                    try:
                        task.request.finish_piece(task.index, self._run_batch(servable, signature, [task])[0])
                    except Exception as alone:
                        task.request.finish_piece(task.index, error=alone)
                continue
            except Exception as error:  # every request in the batch hears of it
                for task in tasks:
                    task.request.finish_piece(task.index, error=error)
                continue
            for task, piece in zip(tasks, outputs):
                task.request.finish_piece(task.index, piece)

    def _run_batch(self, servable, signature: str, tasks: list[_Task]) -> list[dict]:
        """Merges the tasks' inputs, runs them once, and cuts each task's rows from every output."""
        started = time.monotonic()
        merged = {}
        for name in tasks[0].inputs:
            arrays = [t.inputs[name] for t in tasks]
            shapes = {a.shape[1:] for a in arrays}
            if len(shapes) > 1:  # only with pad_variable_length_inputs
                longest = tuple(max(dims) for dims in zip(*shapes))
                arrays = [_pad_to(a, (a.shape[0],) + longest) for a in arrays]
            merged[name] = np.concatenate(arrays) if len(arrays) > 1 else arrays[0]
        rows = sum(t.size for t in tasks)
        target = next((size for size in self.allowed if size >= rows), rows)
        if target > rows:  # pad with the first row of the last task (ProcessBatch)
            last = tasks[-1].inputs
            merged = {n: np.concatenate([a, np.repeat(last[n][:1], target - rows, axis=0)])
                      for n, a in merged.items()}
        for task in tasks:
            task.request.started = True
        if self.on_batch is not None:
            self.on_batch([started - t.arrived for t in tasks], [t.size for t in tasks], rows, target)
        outputs = servable.run(signature, merged)
        for name, value in outputs.items():
            if value.ndim == 0:
                raise FailedPrecondition("Batched output tensor has 0 dimensions")
            if value.shape[0] != target:
                raise FailedPrecondition("Batched output tensor's 0th dimension does not equal the sum of the "
                                         "0th dimension sizes of the input tensors")
        pieces, start = [], 0
        for task in tasks:
            pieces.append({n: v[start:start + task.size] for n, v in outputs.items()})
            start += task.size
        return pieces


def _drop(task: _Task) -> None:
    """A task leaves its queue without running: its request failed already, or its deadline
    passed. A request none of whose pieces ran gets TF Serving's answer; one cut short
    between pieces, DEADLINE_EXCEEDED."""
    request = task.request
    if request.cancelled is not None and request.cancelled():
        error = Cancelled(f"Cancelled: the client cancelled the request after {task.index} of "
                          f"{len(request.outputs)} runs")
    elif request.started:
        error = DeadlineExceeded(f"Deadline Exceeded: the request's deadline passed after {task.index} of "
                                 f"{len(request.outputs)} runs")
    else:
        error = ResourceExhausted("Run() timeout exceeded while waiting in batching queue")
    request.finish_piece(task.index, error=error)


def _pad_to(array: np.ndarray, shape: tuple) -> np.ndarray:
    widths = [(0, target - have) for have, target in zip(array.shape, shape)]
    return np.pad(array, widths, constant_values=b"" if array.dtype == object else 0)
