"""Server-side batching with TF Serving's semantics: merging and splitting back, padding to
allowed sizes, back-pressure, the batching rules enforced at the door, deadlines, and
requests that never receive another request's rows."""

import threading
import time

import numpy as np
import pytest

from serving.batching import BatchingSession, parse_batching_parameters
from serving.status import Cancelled, DeadlineExceeded, FailedPrecondition, InvalidArgument, ResourceExhausted


class Fake:
    """A servable whose signature is `function`; inputs pass the door check as they are."""

    def __init__(self, function, delay=0.0):
        self.function, self.delay = function, delay
        self.batch_sizes, self.started = [], threading.Event()

    @staticmethod
    def check_inputs(signature, inputs):
        return {key: np.asarray(value) for key, value in inputs.items()}

    def run(self, signature, inputs):
        self.started.set()
        if self.delay:
            time.sleep(self.delay)
        self.batch_sizes.append(len(next(iter(inputs.values()))))
        return self.function(inputs)


def times_ten(inputs):
    return {"y": inputs["x"] * 10}


_opened: list[BatchingSession] = []


def session(text, *args, **kwargs):
    """A BatchingSession of these batching parameters (text format), closed after the test."""
    made = BatchingSession(parse_batching_parameters(text), *args, **kwargs)
    _opened.append(made)
    return made


@pytest.fixture(autouse=True)
def _close_sessions():
    """Each test's sessions end with it: their batch threads stop (tests/conftest.py checks that
    no module leaves threads behind)."""
    yield
    while _opened:
        _opened.pop().close()


def concurrently(calls):
    """Runs each zero-argument call in its own thread at once; returns results or exceptions."""
    outcomes = [None] * len(calls)

    def run(i):
        try:
            outcomes[i] = calls[i]()
        except Exception as error:
            outcomes[i] = error

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    return outcomes


def test_concurrent_requests_are_merged_and_split_back():
    fake = Fake(times_ten)
    batching = session("max_batch_size { value: 4 } batch_timeout_micros { value: 200000 } "
                       "num_batch_threads { value: 1 }")
    results = concurrently([lambda i=i: batching.run(fake, "sig", {"x": np.array([i])})["y"].tolist()
                            for i in range(8)])
    assert results == [[10 * i] for i in range(8)]  # each caller gets its own rows
    assert sum(fake.batch_sizes) == 8 and max(fake.batch_sizes) <= 4 and len(fake.batch_sizes) <= 4


def test_batches_pad_up_to_allowed_sizes_with_the_last_tasks_first_row():
    seen = []
    fake = Fake(lambda inputs: seen.append(inputs["x"].tolist()) or times_ten(inputs))
    batching = session("max_batch_size { value: 8 } batch_timeout_micros { value: 1000 } "
                       "allowed_batch_sizes: 4 allowed_batch_sizes: 8")
    assert batching.run(fake, "sig", {"x": np.array([1, 2, 3])})["y"].tolist() == [10, 20, 30]
    assert seen == [[1, 2, 3, 1]]


def test_allowed_sizes_must_end_at_max_batch_size():
    with pytest.raises(ValueError, match="must end with max_batch_size"):
        session("max_batch_size { value: 8 } allowed_batch_sizes: 4")


def test_full_queue_is_refused_with_resource_exhausted():
    fake = Fake(times_ten, delay=0.5)
    batching = session("max_batch_size { value: 1 } max_enqueued_batches { value: 1 } num_batch_threads { value: 1 }")
    first = threading.Thread(target=lambda: batching.run(fake, "sig", {"x": np.array([1])}))
    first.start()
    fake.started.wait(10)  # the worker holds the first request
    second = threading.Thread(target=lambda: batching.run(fake, "sig", {"x": np.array([2])}))
    second.start()  # fills the one-batch queue
    time.sleep(0.1)
    with pytest.raises(ResourceExhausted, match="queue"):
        batching.run(fake, "sig", {"x": np.array([3])})
    first.join(10)
    second.join(10)


def test_rows_of_two_clients_never_reach_each_other():
    """The attack seen at HEAD before: A sends x=[1, 2] to a signature that sums rows, B sends
    x=[100] at once. TF Serving (SplitOutputTensors) refuses a batch whose output lacks the
    batch dimension; neither client may ever see the other's rows."""
    fake = Fake(lambda inputs: {"total": np.array(inputs["x"].sum())})
    batching = session("max_batch_size { value: 8 } batch_timeout_micros { value: 300000 }")
    outcomes = concurrently([lambda: batching.run(fake, "sig", {"x": np.array([1.0, 2.0])}),
                             lambda: batching.run(fake, "sig", {"x": np.array([100.0])})])
    assert all(isinstance(o, FailedPrecondition) and "0 dimensions" in str(o) for o in outcomes), outcomes
    # A per-row output is cut per request, under the same load.
    fake = Fake(lambda inputs: {"doubled": inputs["x"] * 2})
    outcomes = concurrently([lambda: batching.run(fake, "sig", {"x": np.array([1.0, 2.0])})["doubled"].tolist(),
                             lambda: batching.run(fake, "sig", {"x": np.array([100.0])})["doubled"].tolist()])
    assert outcomes == [[2.0, 4.0], [200.0]] and fake.batch_sizes == [3]


def test_an_output_with_the_wrong_batch_size_fails_the_batch_not_a_neighbour():
    fake = Fake(lambda inputs: {"first": inputs["x"][:1]})
    batching = session("max_batch_size { value: 8 } batch_timeout_micros { value: 300000 }")
    outcomes = concurrently([lambda: batching.run(fake, "sig", {"x": np.array([1.0, 2.0])}),
                             lambda: batching.run(fake, "sig", {"x": np.array([3.0])})])
    assert all(isinstance(o, FailedPrecondition) and "0th dimension does not equal" in str(o) for o in outcomes)


@pytest.mark.parametrize("inputs, message", [
    ({"a": np.array([1, 2]), "b": np.array([1])}, "must have equal 0th-dimension size"),
    ({"a": np.array(5)}, "must have at least one dimension"),
])
def test_a_task_that_cannot_be_batched_is_refused_at_the_door(inputs, message):
    """batching_util.h ComputeTensorBatchSize: refused, never cut or merged."""
    fake = Fake(lambda got: {"y": got["a"]})
    with pytest.raises(InvalidArgument, match=message):
        session("max_batch_size { value: 8 }").run(fake, "sig", inputs)
    assert fake.batch_sizes == []


def test_only_tasks_of_the_same_inner_shape_share_a_batch():
    fake = Fake(lambda inputs: {"y": inputs["x"].sum(axis=1)})
    batching = session("max_batch_size { value: 8 } batch_timeout_micros { value: 200000 }")
    outcomes = concurrently([lambda: batching.run(fake, "sig", {"x": np.ones((1, 2))})["y"].tolist(),
                             lambda: batching.run(fake, "sig", {"x": np.ones((1, 3))})["y"].tolist(),
                             lambda: batching.run(fake, "sig", {"x": np.ones((2, 2))})["y"].tolist()])
    assert outcomes == [[2.0], [3.0], [2.0, 2.0]]
    assert sorted(fake.batch_sizes) == [1, 3]


def test_a_bad_request_never_fails_the_good_ones_batched_with_it(tmp_path):
    from serving.servable import Servable
    from serving_models import save_toy

    save_toy(str(tmp_path / "1"), scale=2.0)
    servable = Servable("toy", 1, str(tmp_path / "1"))
    batching = session("max_batch_size { value: 8 } batch_timeout_micros { value: 300000 } "
                       "num_batch_threads { value: 1 }")
    good = {"x": np.array([[1.0, 2.0]], np.float32)}
    bad = [{"x": np.array([["a", "b"]])}, {"x": np.array([[1.0, 2.0, 3.0]], np.float32)}, {"y": good["x"]}]
    outcomes = concurrently([lambda i=i: batching.run(servable, "serving_default",
                                                      good if i % 2 == 0 else bad[i // 2 % 3])["y"].tolist()
                             for i in range(8)])
    assert [outcomes[i] for i in (0, 2, 4, 6)] == [[[2.0, 4.0]]] * 4  # every good request answered
    assert all(isinstance(outcomes[i], InvalidArgument) for i in (1, 5, 7))  # each bad one refused alone
    # Shapes are the graph's to judge, as in TF Serving: x * scale takes 3 columns, in a batch of its own.
    assert outcomes[3] == [[2.0, 4.0, 6.0]]


def test_rows_that_fail_a_batch_only_fail_their_own_request():
    def refuse_negatives(inputs):  # a model that refuses negative rows, as a graph check would
        if (inputs["x"] < 0).any():
            raise InvalidArgument("negative input")
        return times_ten(inputs)

    fake = Fake(refuse_negatives)
    batching = session("max_batch_size { value: 8 } batch_timeout_micros { value: 300000 } "
                       "num_batch_threads { value: 1 }")
    outcomes = concurrently([lambda v=v: batching.run(fake, "sig", {"x": np.array([v])})["y"].tolist()
                             for v in (1, -2, 3, 4)])
    assert outcomes[0] == [10] and outcomes[2:] == [[30], [40]]
    assert isinstance(outcomes[1], InvalidArgument) and str(outcomes[1]) == "negative input"


def test_a_request_larger_than_max_batch_size_is_refused():
    with pytest.raises(InvalidArgument, match="Task size 5 is larger than maximum input batch size 4"):
        session("max_batch_size { value: 4 }").run(Fake(times_ten), "sig", {"x": np.arange(5)})


def test_large_batch_splitting_runs_pieces_and_joins_them_in_order():
    fake = Fake(times_ten)
    batching = session("max_batch_size { value: 64 } enable_large_batch_splitting { value: true } "
                       "max_execution_batch_size { value: 8 }")
    assert batching.run(fake, "sig", {"x": np.arange(20)})["y"].tolist() == list(range(0, 200, 10))
    assert sorted(fake.batch_sizes) == [4, 8, 8]


def test_max_execution_tokens_bounds_every_batch_as_it_bounds_a_request_alone():
    """Issue 53: with batching on, --max_execution_tokens and --max_request_batch_size did not
    apply (a batch of 64 rows of 64 tokens ran as one call). Now a request is cut into pieces,
    and batches formed, of at most that many padded tokens (256: 4 rows of 64 here)."""
    from serving.session import ModelWorkLimits

    fake = Fake(times_ten)
    batching = session("max_batch_size { value: 64 } num_batch_threads { value: 1 } "
                       "batch_timeout_micros { value: 200000 }",
                       ModelWorkLimits(max_request_batch_size=40, max_execution_tokens=256))
    x = np.arange(20 * 64).reshape(20, 64)
    assert np.array_equal(batching.run(fake, "sig", {"x": x})["y"], x * 10) and fake.batch_sizes == [4] * 5
    fake.batch_sizes.clear()
    results = concurrently([lambda i=i: batching.run(fake, "sig", {"x": np.full((1, 64), i)})["y"][0, 0]
                            for i in range(8)])
    assert results == [10 * i for i in range(8)] and sum(fake.batch_sizes) == 8 and max(fake.batch_sizes) <= 4
    with pytest.raises(InvalidArgument, match="41 rows, more than the server's --max_request_batch_size=40"):
        batching.run(fake, "sig", {"x": np.zeros((41, 64))})


def test_a_batch_holds_no_more_activations_than_a_direct_call_may():
    """Issue 70: batching ignored the memory budget that bounds a direct call (half of it in
    activations), so rows the direct session refuses ran in batches, each call seconds long.
    With a budget of 8 KiB at 64 bytes a token, a call holds 64 tokens: 1 row of 64 here."""
    from serving.session import ModelWorkLimits

    fake = Fake(times_ten)
    batching = session("max_batch_size { value: 64 } num_batch_threads { value: 1 } "
                       "batch_timeout_micros { value: 100000 }",
                       ModelWorkLimits(activation_bytes_per_token=64), budget_bytes=8192)
    x = np.arange(3 * 64).reshape(3, 64)
    assert np.array_equal(batching.run(fake, "sig", {"x": x})["y"], x * 10) and fake.batch_sizes == [1, 1, 1]
    batching.close()


def test_a_task_past_its_deadline_is_dropped_not_run():
    """BatchingSession::ProcessBatch: a task whose deadline passed while queued is not run;
    a split request stops at the next piece, so a timed-out request leaves no work behind."""
    fake = Fake(times_ten, delay=0.3)
    batching = session("max_batch_size { value: 64 } enable_large_batch_splitting { value: true } "
                       "max_execution_batch_size { value: 2 } num_batch_threads { value: 1 }")
    with pytest.raises(DeadlineExceeded, match="deadline passed after [0-9]+ of 10 runs"):
        batching.run(fake, "sig", {"x": np.arange(20)}, deadline=time.monotonic() + 0.5)
    # A task that never ran: TF Serving's own answer.
    blocker = threading.Thread(target=lambda: batching.run(fake, "sig", {"x": np.arange(2)}))
    blocker.start()
    time.sleep(0.05)
    with pytest.raises(ResourceExhausted, match="timeout exceeded while waiting in batching queue"):
        batching.run(fake, "sig", {"x": np.arange(2)}, deadline=time.monotonic() + 0.1)
    blocker.join(5)
    time.sleep(0.8)
    assert len(fake.batch_sizes) <= 3  # of the 10 pieces, those begun before the deadline
    assert batching.queued_tasks() == 0


def test_a_request_cancelled_by_its_client_stops_at_the_next_piece():
    """Issue 53: a gRPC call cancelled by its client computed on for 80 s. Its pieces not yet
    run are dropped once `cancelled()` says so, and the caller hears CANCELLED."""
    fake = Fake(times_ten, delay=0.2)
    batching = session("max_batch_size { value: 64 } enable_large_batch_splitting { value: true } "
                       "max_execution_batch_size { value: 2 } num_batch_threads { value: 1 }")
    with pytest.raises(Cancelled, match="cancelled the request after [0-9]+ of 10 runs"):
        batching.run(fake, "sig", {"x": np.arange(20)}, cancelled=fake.started.is_set)
    time.sleep(0.5)
    assert len(fake.batch_sizes) <= 2 and batching.queued_tasks() == 0


def test_queues_are_removed_when_empty():
    """Nothing keeps an unloaded version alive: its queue goes with its last task."""
    fake = Fake(times_ten)
    batching = session("max_batch_size { value: 4 } batch_timeout_micros { value: 1000 }")
    batching.run(fake, "sig", {"x": np.array([1])})
    time.sleep(0.05)
    assert batching._queues == {}


def test_queues_take_turns_so_one_models_flood_delays_another_by_one_batch():
    """SharedBatchScheduler's round robin: with one worker busy on a request split into five
    pieces, another model's request runs after the piece in progress and the next, not after all."""
    order = []
    flood = Fake(lambda inputs: order.append("flood") or times_ten(inputs), delay=0.2)
    quick = Fake(lambda inputs: order.append("quick") or times_ten(inputs))
    batching = session("max_batch_size { value: 8 } num_batch_threads { value: 1 } "
                       "enable_large_batch_splitting { value: true } max_execution_batch_size { value: 1 }")

    def quick_after_flood_starts():
        flood.started.wait(5)
        return batching.run(quick, "sig", {"x": np.arange(1)})

    outcomes = concurrently([lambda: batching.run(flood, "sig", {"x": np.arange(5)}), quick_after_flood_starts])
    assert [o["y"].tolist() for o in outcomes] == [[0, 10, 20, 30, 40], [0]]
    assert order.index("quick") <= 2, order
    batching.close()
