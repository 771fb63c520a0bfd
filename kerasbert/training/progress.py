"""Training progress as plain lines when the output is not a terminal.

Keras' progress bar redraws one line with `\r`, backspaces and ANSI colours, and takes every
POSIX system for a terminal (keras/src/utils/progbar.py), so a log file or a pipe keeps all
of it. Off a terminal, `fit` runs silent and `PlainProgress` prints one line every `interval`
seconds and one at the end of each block:

    step 40/450 (block 1/3) 12s: loss 2.1043 - sst_loss 1.5012

Example:
    >>> verbose, callbacks = fit_output(verbose=1)  # then model.fit(..., verbose=verbose, callbacks=callbacks)
    >>> verbose, [type(callback).__name__ for callback in callbacks]  # off a terminal (a terminal: 1, [])
    (0, ['PlainProgress'])
"""

from __future__ import annotations

import numbers
import sys
import time

import keras


def fit_output(verbose: int, stream=None) -> tuple[int, list[keras.callbacks.Callback]]:
    """`fit`'s verbose and the callbacks that print progress: Keras' bar on a terminal,
    PlainProgress elsewhere, nothing when `verbose` is 0."""
    stream = stream or sys.stdout
    if not verbose or (hasattr(stream, "isatty") and stream.isatty()):
        return verbose, []
    return 0, [PlainProgress(stream=stream)]


class PlainProgress(keras.callbacks.Callback):
    """One plain line of progress every `interval` seconds and at each epoch's end."""

    def __init__(self, interval: float = 30.0, stream=None):
        super().__init__()
        self.interval, self.stream = interval, stream or sys.stdout
        self.started = self.last = time.perf_counter()
        self.epoch = 0

    def on_train_begin(self, logs=None):
        self.started = self.last = time.perf_counter()

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch = epoch

    def on_train_batch_end(self, batch, logs=None):
        if time.perf_counter() - self.last >= self.interval:
            self._line(batch + 1, logs)

    def on_epoch_end(self, epoch, logs=None):
        self._line(self.params.get("steps") or 0, logs)

    def _line(self, batch: int, logs) -> None:
        steps, epochs = self.params.get("steps") or 0, self.params.get("epochs") or 0
        metrics = " - ".join(f"{name} {value:.4f}" for name, value in (logs or {}).items()
                             if isinstance(value, numbers.Real))
        print(f"step {self.epoch * steps + batch}/{epochs * steps} (block {self.epoch + 1}/{epochs}) "
              f"{time.perf_counter() - self.started:.0f}s: {metrics}", file=self.stream, flush=True)
        self.last = time.perf_counter()
