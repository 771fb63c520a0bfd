"""TF Serving's Predict (servables/tensorflow/predict_util.cc, RunPredict): the one path
every front end calls, REST's (on its event loop or on its thread pool) and gRPC's.

A request names a model spec and a signature and brings inputs in its own encoding (JSON,
TensorProtos); `decode(servable)` turns them into arrays for the servable found. Predict
runs them through the session (serving/session.py: in slices of bounded model work, the
request's deadline and its client's cancellation checked between slices; or batched,
serving/batching.py) and records the model's time. Writing the answer is the front end's.

`predict` is a coroutine so that it can await a batching session on an event loop without a
thread waiting; `predict_blocking` runs the same coroutine on a thread, the session's run
blocking it.

Example:
    >>> from serving.metrics import ServingMetrics
    >>> from serving.session import DirectSession
    >>> predictor = Predictor(manager, DirectSession(), ServingMetrics(enabled=False))
    >>> decode = lambda servable: {"x": np.array([[1.0, 2.0]], np.float32)}
    >>> predictor.predict_blocking(("toy", None, None), "serving_default", decode).outputs
    {'rows': array([1]), 'y': array([[2., 4.]], dtype=float32)}
"""

from __future__ import annotations

import time
from typing import Callable, Coroutine, NamedTuple

import numpy as np

from serving.servable import Servable

Decode = Callable[[Servable], dict[str, np.ndarray]]


class Prediction(NamedTuple):
    """What a Predict answers with: the servable that ran (its version names the answer's) and
    the signature's outputs."""
    servable: Servable
    outputs: dict[str, np.ndarray]


class Predictor:
    """Predict over a manager's servables and a session."""

    def __init__(self, manager, session, metrics):
        self.manager, self.session, self.metrics = manager, session, metrics

    @property
    def runs_on_loop(self) -> bool:
        """The session can be awaited on an event loop (a batching session)."""
        return hasattr(self.session, "run_async")

    async def predict(self, spec: tuple, signature: str, decode: Decode, deadline: float | None = None,
                      cancelled: Callable[[], bool] | None = None, on_loop: bool = False) -> Prediction:
        """Predict for the model `spec` (name, version or None, label or None); `cancelled()` is
        true once the client has gone. `on_loop`: awaited on an event loop (needs runs_on_loop)."""
        servable = self.manager.get(*spec)  # held until the answer is written
        inputs = decode(servable)
        started = time.monotonic()
        if on_loop:
            outputs = await self.session.run_async(servable, signature, inputs, deadline, cancelled)
        else:
            outputs = self.session.run(servable, signature, inputs, deadline, cancelled)
        self.metrics.runtime(spec[0], "Predict", time.monotonic() - started)
        return Prediction(servable, outputs)

    def predict_blocking(self, spec: tuple, signature: str, decode: Decode, deadline: float | None = None,
                         cancelled: Callable[[], bool] | None = None) -> Prediction:
        """`predict` on the calling thread (gRPC's, or a REST pool thread)."""
        return run_without_loop(self.predict(spec, signature, decode, deadline, cancelled))


def run_without_loop(call: Coroutine):
    """The result of a coroutine that awaits nothing that suspends (`predict` with on_loop
    False), run to its end on the calling thread, with no event loop."""
    try:
        call.send(None)
    except StopIteration as finished:
        return finished.value
    call.close()
    raise RuntimeError("a coroutine run without an event loop waited for one")
