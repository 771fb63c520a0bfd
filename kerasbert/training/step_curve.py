"""The training loss every few steps, for curves with more than one point a block.

history.csv has one row a block (the demo's fine-tuning: three), too few to read a trend.
`StepCurve` appends to `steps.csv` the mean of each `*loss` over the last `every` steps.
Keras hands a callback each metric's running mean since the block began, so the mean over
steps (a, b] of a block is (b * mean_b - a * mean_a) / (b - a).

Example:
    >>> import keras, tensorflow as tf
    >>> keras.utils.set_random_seed(0)
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, name="dense")], name="model")
    >>> data = tf.data.Dataset.from_tensor_slices((tf.ones([8, 3]), tf.ones([8, 1]))).batch(4).repeat()
    >>> model.compile(optimizer="adam", loss="mse")
    >>> curve = StepCurve(f"{tmp_path}/steps.csv", steps_per_block=4, every=2)
    >>> history = model.fit(data, epochs=2, steps_per_epoch=4, verbose=0, callbacks=[curve])
    >>> [line.split(",")[0] for line in open(f"{tmp_path}/steps.csv")]  # step, then the mean loss of every 2 steps
    ['step', '2', '4', '6', '8']
"""

from __future__ import annotations

import csv
import os

import keras


class StepCurve(keras.callbacks.Callback):
    """Appends `step,<loss columns>` rows to `path` every `every` steps (resumable: rows
    past the step a resumed run starts at are dropped)."""

    def __init__(self, path: str, steps_per_block: int, every: int):
        super().__init__()
        self.path, self.steps_per_block, self.every = path, steps_per_block, max(1, every)
        self.block, self.keys = 0, None
        self.last_batch, self.last_means = 0, {}

    def on_epoch_begin(self, epoch, logs=None):
        if self.keys is None:
            self._keep_rows_until(epoch * self.steps_per_block)
        self.block, self.last_batch, self.last_means = epoch, 0, {}

    def on_train_batch_end(self, batch, logs=None):
        done = batch + 1
        if done % self.every and done != self.steps_per_block:
            return
        means = {key: float(value) for key, value in (logs or {}).items() if key.endswith("loss")}
        if self.keys is None:
            self.keys = sorted(means)
            if not os.path.exists(self.path):
                self._write("w", ["step", *self.keys])
        span = done - self.last_batch
        window = [(done * means.get(key, float("nan")) - self.last_batch * self.last_means.get(key, 0.0)) / span
                  for key in self.keys]
        self._write("a", [self.block * self.steps_per_block + done, *(f"{value:.6g}" for value in window)])
        self.last_batch, self.last_means = done, means

    def _write(self, mode: str, row: list) -> None:
        with open(self.path, mode, newline="") as f:
            csv.writer(f).writerow(row)

    def _keep_rows_until(self, step: int) -> None:
        if not os.path.exists(self.path):
            return
        with open(self.path, newline="") as f:
            rows = list(csv.reader(f))
        with open(self.path, "w", newline="") as f:
            csv.writer(f).writerows([rows[0]] + [row for row in rows[1:] if int(row[0]) <= step])
        self.keys = rows[0][1:]
