"""The "session" every method runs through: (servable, signature, input arrays, deadline)
-> output arrays. Predict, classify and regress all call `run`, so whatever wraps it
(batching.BatchingSession) applies to all three, as TF Serving's BatchingSession wraps
the TF Session its servables run.

A deadline is a time.monotonic() value (None: none). It travels with the request, as TF
Serving hands --rest_api_timeout_in_ms and a gRPC call's own deadline to the session's
RunOptions: a request whose deadline has passed is not started. `cancelled` (a gRPC
call's "has the client gone?") travels with it too.

Model work is bounded per request (`ModelWorkLimits`): a request of more rows than
--max_request_batch_size is refused, and one larger than a slice runs as several calls of
the signature, each of at most --max_execution_batch_size rows and --max_execution_tokens
padded tokens, so the model's activations are those of one slice, never of the whole
request. Where the SavedModel declares what its strings cost (serving/row_costs.py: a
text's word pieces, an `answer` context's windows), the slices are cut by those costs, and
a row that alone costs more than a call is refused 400, naming --max_execution_tokens; the slices' outputs are joined as one call would have returned them, narrower
ones padded to the widest (`concatenate_rows`). Between slices the deadline and the client are checked: a request answered 504,
or cancelled by its client, stops within one slice. Each slice's activations, estimated at
--activation_bytes_per_token per padded token, are reserved from the same budget as
decoding and answering (memory_budget), so request memory is one accounting.

Example:
    >>> session = DirectSession()
    >>> session.run(servable, "serving_default", {"x": np.array([[1.0, 2.0]], np.float32)},
    ...             deadline=time.monotonic() + 30)
    {'rows': array([1]), 'y': array([[2., 4.]], dtype=float32)}
"""

from __future__ import annotations

import dataclasses
import time
from typing import Callable

import numpy as np

from serving.row_costs import string_sizes
from serving.status import Cancelled, DeadlineExceeded, FailedPrecondition, InvalidArgument


def check_deadline(deadline: float | None, where: str = "before it started",
                   cancelled: Callable[[], bool] | None = None) -> None:
    if deadline is not None and time.monotonic() >= deadline:
        raise DeadlineExceeded(f"Deadline Exceeded: the request's deadline passed {where}")
    if cancelled is not None and cancelled():
        raise Cancelled(f"Cancelled: the client cancelled the request {where}")


@dataclasses.dataclass(frozen=True)
class ModelWorkLimits:
    """How much model work one request may ask for, and how much one call of the model does.

    A row's padded tokens are the elements of its widest input, a string element counting
    as `string_tokens` (a text the model tokenizes and pads to its sequence length), unless
    the SavedModel declares what its strings cost (serving/row_costs.py).

    >>> limits = ModelWorkLimits(max_execution_tokens=1024, string_tokens=128)
    >>> limits.row_costs({"text": np.array([b"a", b"b"], object)}).tolist(), limits.row_tokens({"x": np.zeros((9, 4))})
    ([128, 128], 4)
    """

    max_request_batch_size: int = 1 << 23  # rows of one request at most (more: 400)
    max_execution_batch_size: int = 16384  # rows of one call of the model at most
    max_execution_tokens: int = 16384  # padded tokens of one call of the model at most
    string_tokens: int = 128  # padded tokens a string element stands for
    activation_bytes_per_token: int = 16384  # model memory per padded token (BERT-base: ~27 KB)

    def row_tokens(self, inputs: dict[str, np.ndarray]) -> int:
        """The padded tokens of one row: the elements of its widest input."""
        widest = 1
        for array in inputs.values():
            per_row = int(np.prod(array.shape[1:], dtype=np.int64))
            widest = max(widest, per_row * (self.string_tokens if array.dtype == object else 1))
        return widest

    def row_costs(self, inputs: dict[str, np.ndarray], declared: dict | None = None) -> np.ndarray:
        """Each row's padded tokens, int64 (rows,): `row_tokens` of the inputs the SavedModel
        declares no cost for, and at least the sum of the declared ones' (`declared`: {input:
        row_costs.StringCost}, the signature's entry of its assets.extra/row_costs.json)."""
        declared = {name: cost for name, cost in (declared or {}).items()
                    if name in inputs and inputs[name].dtype == object}
        rows = len(next(iter(inputs.values())))
        costs = np.full(rows, self.row_tokens({n: a for n, a in inputs.items() if n not in declared}), np.int64)
        if declared:
            summed = sum(cost.tokens(string_sizes(inputs[name]), self.activation_bytes_per_token)
                         for name, cost in declared.items())
            costs = np.maximum(costs, summed)
        return costs

    def call_tokens(self, budget_bytes: int | None = None) -> int:
        """Padded tokens of one call of the model at most: --max_execution_tokens, and with
        `budget_bytes`, half of it in activations."""
        tokens = self.max_execution_tokens
        if budget_bytes is not None:
            tokens = min(tokens, budget_bytes // (2 * self.activation_bytes_per_token))
        return max(1, tokens)

    def slices(self, inputs: dict[str, np.ndarray], declared: dict | None = None, budget_bytes: int | None = None,
               max_rows: int | None = None) -> list[tuple[int, int, int]]:
        """The calls of the model a request runs as: (start, stop, tokens of each of its rows,
        its widest row's), rows in order, each call within --max_execution_batch_size rows (and
        `max_rows`) and `call_tokens(budget_bytes)` padded tokens (rows x their widest), and at
        least one row. A row whose declared cost (`row_costs`) exceeds a call is refused.

        >>> ModelWorkLimits(max_execution_tokens=256).slices({"x": np.zeros((10, 64))})
        [(0, 4, 64), (4, 8, 64), (8, 10, 64)]
        """
        costs = self.row_costs(inputs, declared)
        bound = self.call_tokens(budget_bytes)
        most = min(self.max_execution_batch_size, max_rows or self.max_execution_batch_size)
        if declared and len(costs) and costs.max() > bound:
            row = int(costs.argmax())
            which = (f"--max_execution_tokens={self.max_execution_tokens}" if bound == self.max_execution_tokens else
                     f"half the server's memory budget (12 x --max_body_bytes) beside what the request holds, at "
                     f"--activation_bytes_per_token="
                     f"{self.activation_bytes_per_token}; --max_execution_tokens={self.max_execution_tokens}")
            raise InvalidArgument(f"Row {row} of the request costs {costs[row]} padded tokens of the model (its "
                                  f"strings' bytes bound their word pieces), more than one call of the model "
                                  f"takes: {bound}, set by {which}")
        found, start = [], 0
        while start < len(costs):
            window = costs[start:start + max(1, min(most, bound // max(1, int(costs[start]))))]
            widest = np.maximum.accumulate(window)  # widest[k]: of the first k + 1 rows
            over = np.arange(1, len(window) + 1) * widest > bound
            count = max(1, int(over.argmax())) if over.any() else len(window)
            found.append((start, start + count, int(widest[count - 1])))
            start += count
        return found

    def check_request(self, rows: int) -> None:
        if rows > self.max_request_batch_size:
            raise InvalidArgument(f"The request has {rows} rows, more than the server's "
                                  f"--max_request_batch_size={self.max_request_batch_size}")


def rows_of(inputs: dict[str, np.ndarray]) -> int | None:
    """The request's rows: the 0th dimension every input shares, which is what a request is
    cut into slices by (and batched by: TF Serving's batching_util.h ComputeTensorBatchSize).
    None if an input is a scalar or the inputs do not share a 0th dimension: then the request
    is one call of the model, as TF Serving runs it without batching, and the graph decides.

    >>> rows_of({"a": np.zeros((3, 2)), "b": np.zeros(3)}), rows_of({"a": np.zeros(3), "b": np.zeros(2)})
    (3, None)
    """
    if not inputs or any(array.ndim == 0 for array in inputs.values()):
        return None
    sizes = {array.shape[0] for array in inputs.values()}
    return sizes.pop() if len(sizes) == 1 else None


def pad_value(dtype: np.dtype):
    """What an output narrower than its request's widest is padded with: what the graph pads
    with, by dtype, as kerasbert's `entities` pads its per-entity outputs (RaggedTensor.to_tensor's
    default_value): "" for strings, -1 for signed integers (character offsets), 0 for numbers
    otherwise (scores; unsigned integers; False).

    >>> pad_value(np.dtype(object)), pad_value(np.dtype(np.int64)), pad_value(np.dtype(np.float32))
    (b'', -1, 0)
    """
    if dtype == object:
        return b""
    return -1 if np.issubdtype(dtype, np.signedinteger) else 0


def concatenate_rows(pieces: list[np.ndarray], name: str = "") -> np.ndarray:
    """Outputs of the slices of one request, one after another, each padded past its own
    width to the widest (`pad_value`): what one call of all the rows returns, since a graph
    pads each call's rows to that call's widest (a batch's entity count, say)."""
    if len(pieces) == 1:
        return pieces[0]
    if len({piece.ndim for piece in pieces}) > 1:
        raise FailedPrecondition(f"Output {name} has a different rank in different slices of the request "
                                 f"({sorted({piece.ndim for piece in pieces})}), so they cannot be joined")
    widest = tuple(max(sizes) for sizes in zip(*(piece.shape[1:] for piece in pieces)))
    padded = []
    for piece in pieces:
        if piece.shape[1:] != widest:
            grown = np.full(piece.shape[:1] + widest, pad_value(piece.dtype), dtype=piece.dtype)
            grown[tuple(slice(0, size) for size in piece.shape)] = piece
            piece = grown
        padded.append(piece)
    return np.concatenate(padded)


def concatenate_slices(pieces: list[dict[str, np.ndarray]], sizes: list[int]) -> dict[str, np.ndarray]:
    """The outputs of a request run as slices: each output must have its slice's rows in its
    0th dimension (as TF Serving's SplitOutputTensors requires of a batch), else the request
    cannot be cut, and fails; slices of different widths are padded (`concatenate_rows`)."""
    for piece, size in zip(pieces, sizes):
        for name, value in piece.items():
            if value.ndim == 0 or value.shape[0] != size:
                raise FailedPrecondition(f"Output {name} has no row per input row (shape {list(value.shape)} for "
                                         f"{size} rows), so a request of more rows than one model call "
                                         "(--max_execution_batch_size, --max_execution_tokens) cannot run")
    return {name: concatenate_rows([piece[name] for piece in pieces], name) for name in pieces[0]}


def declared_costs(servable, signature: str) -> dict | None:
    """{input: row_costs.StringCost} the servable's SavedModel declares for `signature`, or None."""
    return getattr(servable, "row_costs", {}).get(signature)


class DirectSession:
    """Each request runs alone (no batching), in slices of at most `limits`; with `budget`
    (the server's decoding budget), each slice's activations are reserved from it first,
    slices cut to half the room beside what the request holds (MemoryBudget.room)."""

    def __init__(self, limits: ModelWorkLimits | None = None, budget=None):
        self.limits, self.budget = limits or ModelWorkLimits(), budget

    def _call(self, servable, signature: str, inputs: dict[str, np.ndarray], deadline: float | None,
              row_tokens: int | None = None):
        """One call of the model, its activations held from the budget meanwhile."""
        if self.budget is None:
            return servable.run(signature, inputs, deadline)
        rows = max((len(array) for array in inputs.values() if array.ndim), default=1)
        cost = rows * (row_tokens or self.limits.row_tokens(inputs)) * self.limits.activation_bytes_per_token
        with self.budget.reserve(cost, deadline):
            return servable.run(signature, inputs, deadline)

    def run(self, servable, signature: str, inputs: dict[str, np.ndarray], deadline: float | None = None,
            cancelled: Callable[[], bool] | None = None) -> dict[str, np.ndarray]:
        check_deadline(deadline, cancelled=cancelled)
        inputs = servable.check_inputs(signature, inputs)
        rows = rows_of(inputs)
        if rows is None:
            return self._call(servable, signature, inputs, deadline)
        self.limits.check_request(rows)
        # Cut against the room beside what the call holds (its inputs, a gRPC message), so each
        # slice's activations fit beside them: never a wait for memory the call itself holds.
        slices = self.limits.slices(inputs, declared_costs(servable, signature),
                                    None if self.budget is None else self.budget.room())
        if len(slices) <= 1:
            return self._call(servable, signature, inputs, deadline, slices[0][2] if slices else None)
        for name, rank in servable.output_ranks(signature).items():
            if rank == 0:  # a sum over rows, say: known before anything runs
                raise FailedPrecondition(f"Output {name} of signature {signature} has no row dimension, so a "
                                         f"request of more rows than one model call ({slices[0][1]}: "
                                         "--max_execution_batch_size, --max_execution_tokens) cannot run")
        pieces = []
        for start, stop, row_tokens in slices:
            if start:
                check_deadline(deadline, f"after {start} of its {rows} rows had run", cancelled)
            piece = {name: array[start:stop] for name, array in inputs.items()}
            pieces.append(self._call(servable, signature, piece, deadline, row_tokens))
        return concatenate_slices(pieces, [stop - start for start, stop, _ in slices])

    def close(self) -> None:
        pass
