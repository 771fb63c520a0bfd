"""Server-side batching: merging, splitting, padding to allowed sizes, back-pressure."""

import threading

import numpy as np
import pytest

from serving.batching import Batcher, parse_batching_parameters
from serving.status import InvalidArgument, ResourceExhausted


class Plain:
    """A servable whose inputs are always well-formed (the batcher checks each request first)."""

    @staticmethod
    def check_inputs(signature, inputs):
        return {key: np.asarray(value) for key, value in inputs.items()}


class CountingRun:
    def __init__(self, delay=0.0):
        self.batch_sizes, self.delay, self.started = [], delay, threading.Event()

    def __call__(self, servable, signature, inputs):
        self.started.set()
        if self.delay:
            threading.Event().wait(self.delay)
        self.batch_sizes.append(len(inputs["x"]))
        return {"y": inputs["x"] * 10}


PLAIN = Plain()  # one servable: requests to it share a queue


def concurrent_calls(batcher, values, servable=PLAIN):
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
    assert batcher(PLAIN, "sig", {"x": np.array([1, 2, 3])})["y"].tolist() == [10, 20, 30]
    assert run.batch_sizes == [4]


def test_allowed_sizes_must_end_at_max_batch_size():
    with pytest.raises(ValueError, match="must end with max_batch_size"):
        Batcher(parse_batching_parameters("max_batch_size { value: 8 } allowed_batch_sizes: 4"), CountingRun())


def test_full_queue_is_refused_with_resource_exhausted():
    run = CountingRun(delay=0.5)
    batcher = Batcher(parse_batching_parameters(
        "max_batch_size { value: 1 } max_enqueued_batches { value: 1 } num_batch_threads { value: 1 }"), run)
    first = threading.Thread(target=lambda: batcher(PLAIN, "sig", {"x": np.array([1])}))
    first.start()
    run.started.wait(10)  # the worker holds the first request
    second = threading.Thread(target=lambda: batcher(PLAIN, "sig", {"x": np.array([2])}))
    second.start()  # fills the one-batch queue
    threading.Event().wait(0.1)
    with pytest.raises(ResourceExhausted, match="queue"):
        batcher(PLAIN, "sig", {"x": np.array([3])})
    first.join(10)
    second.join(10)


def test_a_bad_request_never_fails_the_good_ones_batched_with_it(tmp_path):
    from serving.model_store import Servable
    from serving_models import save_toy

    save_toy(str(tmp_path / "1"), scale=2.0)
    servable = Servable("toy", 1, str(tmp_path / "1"))
    batcher = Batcher(parse_batching_parameters(
        "max_batch_size { value: 8 } batch_timeout_micros { value: 300000 } num_batch_threads { value: 1 }"),
        lambda s, signature, inputs: s.predict(signature, inputs))
    good = {"x": np.array([[1.0, 2.0]], np.float32)}
    bad = [{"x": np.array([["a", "b"]])}, {"x": np.array([[1.0, 2.0, 3.0]], np.float32)}, {"y": good["x"]}]
    results, errors = {}, {}

    def call(i, inputs):
        try:
            results[i] = batcher(servable, "serving_default", inputs)["y"].tolist()
        except InvalidArgument as error:
            errors[i] = str(error)

    threads = [threading.Thread(target=call, args=(i, good if i % 2 == 0 else bad[i // 2 % 3]))
               for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert results == {i: [[2.0, 4.0]] for i in (0, 2, 4, 6)}  # every good request answered
    assert sorted(errors) == [1, 3, 5, 7]  # every bad one refused with a 400 of its own


def test_rows_that_fail_a_batch_only_fail_their_own_request():

    def run(servable, signature, inputs):  # a model that refuses negative rows, as a graph check would
        if (inputs["x"] < 0).any():
            raise InvalidArgument("negative input")
        return {"y": inputs["x"] * 10}

    batcher = Batcher(parse_batching_parameters(
        "max_batch_size { value: 8 } batch_timeout_micros { value: 300000 } num_batch_threads { value: 1 }"), run)
    outcomes = {}

    def call(value):
        try:
            outcomes[value] = batcher(PLAIN, "sig", {"x": np.array([value])})["y"].tolist()
        except InvalidArgument as error:
            outcomes[value] = str(error)

    threads = [threading.Thread(target=call, args=(v,)) for v in (1, -2, 3, 4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert outcomes == {1: [10], -2: "negative input", 3: [30], 4: [40]}


def test_a_request_larger_than_max_batch_size_is_refused():

    batcher = Batcher(parse_batching_parameters("max_batch_size { value: 4 }"), CountingRun())
    with pytest.raises(InvalidArgument, match="Task size 5 is larger than maximum input batch size 4"):
        batcher(PLAIN, "sig", {"x": np.arange(5)})
