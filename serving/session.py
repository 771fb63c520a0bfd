"""The "session" every method runs through: (servable, signature, input arrays, deadline)
-> output arrays. Predict, classify and regress all call `run`, so whatever wraps it
(batching.BatchingSession) applies to all three, as TF Serving's BatchingSession wraps
the TF Session its servables run.

A deadline is a time.monotonic() value (None: none). It travels with the request, as TF
Serving hands --rest_api_timeout_in_ms and a gRPC call's own deadline to the session's
RunOptions: a request whose deadline has passed is not started.

Example:
    >>> session = DirectSession()
    >>> session.run(servable, "serving_default", {"x": np.array([[1.0, 2.0]], np.float32)},
    ...             deadline=time.monotonic() + 30)
    {'y': array([[2., 4.]], dtype=float32)}
"""

from __future__ import annotations

import time

import numpy as np

from serving.status import DeadlineExceeded


def check_deadline(deadline: float | None, where: str = "before it started") -> None:
    if deadline is not None and time.monotonic() >= deadline:
        raise DeadlineExceeded(f"Deadline Exceeded: the request's deadline passed {where}")


class DirectSession:
    """Each request runs alone, as one call of the signature (no batching)."""

    def run(self, servable, signature: str, inputs: dict[str, np.ndarray],
            deadline: float | None = None) -> dict[str, np.ndarray]:
        check_deadline(deadline)
        return servable.run(signature, servable.check_inputs(signature, inputs))

    def close(self) -> None:
        pass
