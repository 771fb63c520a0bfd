"""Server-side batching: merging, splitting, padding to allowed sizes, back-pressure."""

import threading

import numpy as np
import pytest

from serving.batching import Batcher, parse_batching_parameters
from serving.rest import ResourceExhausted


class CountingRun:
    def __init__(self, delay=0.0):
        self.batch_sizes, self.delay, self.started = [], delay, threading.Event()

    def __call__(self, servable, signature, inputs):
        self.started.set()
        if self.delay:
            threading.Event().wait(self.delay)
        self.batch_sizes.append(len(inputs["x"]))
        return {"y": inputs["x"] * 10}


def concurrent_calls(batcher, values, servable="s"):
    results = [None] * len(values)

    def call(i):
        results[i] = batcher(servable, "sig", {"x": np.array([values[i]])})["y"].tolist()

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(values))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return results


def test_concurrent_requests_are_merged_and_split_back():
    run = CountingRun()
    batcher = Batcher(parse_batching_parameters(
        "max_batch_size { value: 4 } batch_timeout_micros { value: 200000 } num_batch_threads { value: 1 }"), run)
    results = concurrent_calls(batcher, list(range(8)))
    assert results == [[10 * i] for i in range(8)]  # each caller gets its own rows
    assert sum(run.batch_sizes) == 8 and max(run.batch_sizes) <= 4 and len(run.batch_sizes) <= 4


def test_batches_pad_up_to_allowed_sizes():
    run = CountingRun()
    batcher = Batcher(parse_batching_parameters(
        "max_batch_size { value: 8 } batch_timeout_micros { value: 1000 } allowed_batch_sizes: 4 "
        "allowed_batch_sizes: 8"), run)
    assert batcher("s", "sig", {"x": np.array([1, 2, 3])})["y"].tolist() == [10, 20, 30]
    assert run.batch_sizes == [4]


def test_allowed_sizes_must_end_at_max_batch_size():
    with pytest.raises(ValueError, match="must end with max_batch_size"):
        Batcher(parse_batching_parameters("max_batch_size { value: 8 } allowed_batch_sizes: 4"), CountingRun())


def test_full_queue_is_refused_with_resource_exhausted():
    run = CountingRun(delay=0.5)
    batcher = Batcher(parse_batching_parameters(
        "max_batch_size { value: 1 } max_enqueued_batches { value: 1 } num_batch_threads { value: 1 }"), run)
    first = threading.Thread(target=lambda: batcher("s", "sig", {"x": np.array([1])}))
    first.start()
    run.started.wait(10)  # the worker holds the first request
    second = threading.Thread(target=lambda: batcher("s", "sig", {"x": np.array([2])}))
    second.start()  # fills the one-batch queue
    threading.Event().wait(0.1)
    with pytest.raises(ResourceExhausted, match="queue"):
        batcher("s", "sig", {"x": np.array([3])})
    first.join(10)
    second.join(10)
