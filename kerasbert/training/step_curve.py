"""The training loss every few steps, for curves with more than one point a block.

history.csv has one row a block (the demo's fine-tuning: three), too few to read a trend.
`StepCurve` appends to `steps.csv` the mean of each `*loss` over the last `every` steps.
Keras hands a callback each metric's running mean since the block began; weighted by the
steps it counts (its Mean's `count`), the mean over steps (a, b] is
(c_b * mean_b - c_a * mean_a) / (c_b - c_a): a multitask run's per-task loss counts only its
task's steps, and is empty where the window had none of them. The counts are this worker's
own (a read that sums them over workers would wait for the others, which run no StepCurve);
the ratio is the same wherever every replica's step is of one task.

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
        self.last_sums = {}

    def on_epoch_begin(self, epoch, logs=None):
        if self.keys is None:
            self._keep_rows_until(epoch * self.steps_per_block)
        self.block, self.last_sums = epoch, {}  # Keras resets the metrics each epoch

    def on_train_batch_end(self, batch, logs=None):
        done = batch + 1
        if done % self.every and done != self.steps_per_block:
            return
        sums = self._sums({key: float(value) for key, value in (logs or {}).items() if key.endswith("loss")}, done)
        if self.keys is None:
            self.keys = sorted(sums)
            if not os.path.exists(self.path):
                self._write("w", ["step", *self.keys])
        window = []
        for key in self.keys:
            (total, count), (last_total, last_count) = sums.get(key, (0.0, 0.0)), self.last_sums.get(key, (0.0, 0.0))
            window.append(f"{(total - last_total) / (count - last_count):.6g}" if count > last_count else "")
        self._write("a", [self.block * self.steps_per_block + done, *window])
        self.last_sums = sums

    def _sums(self, means: dict[str, float], done: int) -> dict[str, tuple[float, float]]:
        """{loss name: (mean x count, count)} since the block began; the count is its Mean
        metric's (this worker's replicas), else the steps."""
        metrics = {}
        for metric in self.model.metrics:
            for inner in [metric, *getattr(metric, "metrics", ())]:  # compile's metrics sit in a container
                metrics[inner.name] = inner
        local = self.model.distribute_strategy.experimental_local_results  # no cross-worker read
        sums = {}
        for key, mean in means.items():
            metric = metrics.get(key)
            count = float(sum(local(metric.count.value))) if isinstance(metric, keras.metrics.Mean) else float(done)
            sums[key] = (mean * count, count)
        return sums

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
