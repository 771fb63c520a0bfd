"""Server-side batching of concurrent predict requests, as TF Serving's BatchingParameters say.

Requests for the same servable and signature wait in a queue; one of
`num_batch_threads` workers takes up to `max_batch_size` rows, waiting at most
`batch_timeout_micros` after the oldest request for more, runs them as one call,
and splits the outputs back. With `allowed_batch_sizes` a batch is padded (by
repeating its last row) up to the next allowed size; with
`pad_variable_length_inputs` inputs of different lengths are padded to the longest.
Past `max_enqueued_batches` full batches of backlog, requests are refused (429).

`tensorflow-serving-api` does not ship the BatchingParameters proto, so the message
is declared here with TF Serving's field names and numbers
(servables/tensorflow/session_bundle_config.proto) and parsed by protobuf itself.

Example:
    >>> batcher = Batcher(parse_batching_parameters("max_batch_size { value: 32 }"), run_servable)
    >>> outputs = batcher(servable, "sentiment", {"text": texts})
"""

from __future__ import annotations

import collections
import threading
import time

import numpy as np
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory, text_format, wrappers_pb2

from serving.status import InvalidArgument, ResourceExhausted


def _batching_parameters_class():
    pool = descriptor_pool.DescriptorPool()
    pool.AddSerializedFile(wrappers_pb2.DESCRIPTOR.serialized_pb)
    file = descriptor_pb2.FileDescriptorProto(name="kerasbert_batching.proto", package="tensorflow.serving",
                                              dependency=["google/protobuf/wrappers.proto"], syntax="proto3")
    message = file.message_type.add(name="BatchingParameters")
    F = descriptor_pb2.FieldDescriptorProto
    for name, number, type_name in (
            ("max_batch_size", 1, ".google.protobuf.Int64Value"),
            ("batch_timeout_micros", 2, ".google.protobuf.Int64Value"),
            ("thread_pool_name", 3, ".google.protobuf.StringValue"),
            ("num_batch_threads", 4, ".google.protobuf.Int64Value"),
            ("max_enqueued_batches", 5, ".google.protobuf.Int64Value"),
            ("enable_large_batch_splitting", 8, ".google.protobuf.BoolValue"),
            ("max_execution_batch_size", 9, ".google.protobuf.Int64Value")):
        message.field.add(name=name, number=number, type=F.TYPE_MESSAGE, label=F.LABEL_OPTIONAL,
                          type_name=type_name)
    message.field.add(name="allowed_batch_sizes", number=6, type=F.TYPE_INT64, label=F.LABEL_REPEATED)
    message.field.add(name="pad_variable_length_inputs", number=7, type=F.TYPE_BOOL, label=F.LABEL_OPTIONAL)
    pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.serving.BatchingParameters"))


BatchingParameters = _batching_parameters_class()


def parse_batching_parameters(text: str):
    """A `--batching_parameters_file`'s text as a BatchingParameters message."""
    parameters = BatchingParameters()
    text_format.Parse(text, parameters)
    return parameters


def _value(parameters, field: str, default):
    return getattr(parameters, field).value if parameters.HasField(field) else default


class _Task:
    def __init__(self, inputs: dict[str, np.ndarray]):
        self.inputs = inputs
        self.size = len(next(iter(inputs.values())))
        self.arrived = time.monotonic()
        self.done = threading.Event()
        self.outputs = None
        self.error: Exception | None = None


def _pad_to(array: np.ndarray, shape: tuple) -> np.ndarray:
    widths = [(0, target - have) for have, target in zip(array.shape, shape)]
    return np.pad(array, widths, constant_values=b"" if array.dtype == object else 0)


class Batcher:
    """Callable like the plain predictor: (servable, signature, inputs) -> outputs."""

    def __init__(self, parameters, run):
        self.run = run  # (servable, signature, inputs) -> outputs, unbatched
        self.max_batch_size = _value(parameters, "max_batch_size", 1000)
        self.timeout = _value(parameters, "batch_timeout_micros", 0) / 1e6
        self.max_enqueued = _value(parameters, "max_enqueued_batches", 1000000) * self.max_batch_size
        self.allowed = sorted(parameters.allowed_batch_sizes)
        self.pad_lengths = parameters.pad_variable_length_inputs
        if self.allowed and self.allowed[-1] != self.max_batch_size:
            raise InvalidArgument("allowed_batch_sizes must end with max_batch_size "
                                  f"({self.allowed[-1]} != {self.max_batch_size})")
        self._queues: dict[tuple, collections.deque] = {}
        self._condition = threading.Condition()
        self._closed = False
        for i in range(_value(parameters, "num_batch_threads", 4)):
            threading.Thread(target=self._work, name=f"batch-{i}", daemon=True).start()

    def __call__(self, servable, signature: str, inputs: dict[str, np.ndarray]):
        task = _Task(servable.check_inputs(signature, inputs))  # a bad request fails alone, here
        if task.size > self.max_batch_size:  # TF Serving's batch scheduler refuses it likewise
            raise InvalidArgument(f"Task size {task.size} is larger than maximum input batch size "
                                  f"{self.max_batch_size}")
        key = (servable, signature)
        with self._condition:
            queue = self._queues.setdefault(key, collections.deque())
            if sum(t.size for t in queue) + task.size > self.max_enqueued:
                raise ResourceExhausted("The batch scheduling queue to which this task was submitted is full")
            queue.append(task)
            self._condition.notify()
        task.done.wait()
        if task.error is not None:
            raise task.error
        return task.outputs

    def close(self) -> None:
        with self._condition:
            self._closed = True
            self._condition.notify_all()

    def _take_batch(self):
        """Waits for work; returns (key, tasks) once a batch is full or its oldest task timed out."""
        with self._condition:
            while not self._closed:
                ready, wait = None, None
                for key, queue in self._queues.items():
                    if not queue:
                        continue
                    rows = sum(t.size for t in queue)
                    left = queue[0].arrived + self.timeout - time.monotonic()
                    if rows >= self.max_batch_size or left <= 0:
                        ready = key
                        break
                    wait = left if wait is None else min(wait, left)
                if ready is not None:
                    queue, tasks, rows = self._queues[ready], [], 0
                    while queue and (not tasks or rows + queue[0].size <= self.max_batch_size):
                        tasks.append(queue.popleft())
                        rows += tasks[-1].size
                    return ready, tasks
                self._condition.wait(wait)
        return None, None

    def _work(self) -> None:
        while True:
            key, tasks = self._take_batch()
            if tasks is None:
                return
            try:
                self._run_batch(key, tasks)
            except InvalidArgument:  # one request's rows? then each request runs alone
                for task in tasks:
                    try:
                        self._run_batch(key, [task])
                    except Exception as error:
                        task.error = error
            except Exception as error:  # every waiting request hears of it
                for task in tasks:
                    task.error = error
            for task in tasks:
                task.done.set()

    def _run_batch(self, key, tasks) -> None:
        servable, signature = key
        merged = {}
        for name in tasks[0].inputs:
            arrays = [t.inputs[name] for t in tasks]
            shapes = {a.shape[1:] for a in arrays}
            if len(shapes) > 1:
                if not self.pad_lengths:
                    raise InvalidArgument(f"Batching inputs of different shapes for {name}: "
                                          f"{sorted(shapes)}; set pad_variable_length_inputs")
                longest = tuple(max(dims) for dims in zip(*shapes))
                arrays = [_pad_to(a, (a.shape[0],) + longest) for a in arrays]
            merged[name] = np.concatenate(arrays)
        rows = sum(t.size for t in tasks)
        target = next((size for size in self.allowed if size >= rows), rows)
        if target > rows:  # pad to an allowed size by repeating the last row
            merged = {n: np.concatenate([a, np.repeat(a[-1:], target - rows, axis=0)]) for n, a in merged.items()}
        outputs = self.run(servable, signature, merged)
        start = 0
        for task in tasks:
            task.outputs = {n: v[start:start + task.size] for n, v in outputs.items()}
            start += task.size
