"""Training callbacks: what the throughput figure in metrics.json counts, and what evaluation
sees when the optimizer keeps a moving average of the weights."""

import time

import keras
import numpy as np

from kerasbert.config import TrainConfig
from kerasbert.training.callbacks import Throughput, training_callbacks
from kerasbert.training.optim import build_optimizer, make_optimizer


def run_block(throughput: Throughput, steps: int, step_seconds: float, after_block_seconds: float) -> dict:
    for batch in range(steps):
        throughput.on_train_batch_begin(batch)
        time.sleep(step_seconds)
        throughput.on_train_batch_end(batch)
    time.sleep(after_block_seconds)  # what a callback earlier in the list does: dev scoring, backup
    logs = {}
    throughput.on_epoch_end(0, logs)
    return logs


def test_throughput_counts_training_steps_only():
    throughput = Throughput(batch_size=8)
    run_block(throughput, steps=5, step_seconds=0.02, after_block_seconds=0.5)
    logs = run_block(throughput, steps=5, step_seconds=0.02, after_block_seconds=0.5)
    # Steps 1-4 of each block are timed (step 0 includes compiling): 4 * 8 / ~0.08 s = ~400/s.
    # Counting the 0.5 s after the block would give ~55/s.
    assert len(throughput.block_rates) == 2
    assert 250 < throughput.examples_per_second() <= 8 / 0.02
    assert logs["examples_per_second"] == throughput.block_rates[-1]  # history.csv's column


def test_ema_evaluation_sees_the_average_and_training_continues_from_the_raw_weights(tmp_path):
    class Recorder(keras.callbacks.Callback):
        """What an evaluation callback sees at block end, and the raw weights along the way."""

        def __init__(self):
            super().__init__()
            self.after_step, self.at_evaluation, self.at_block_start = [], [], []

        def on_train_batch_end(self, batch, logs=None):
            self.after_step.append(self.model.get_weights()[0].copy())

        def on_epoch_end(self, epoch, logs=None):
            self.at_evaluation.append(self.model.get_weights()[0].copy())

        def on_epoch_begin(self, epoch, logs=None):
            self.at_block_start.append(self.model.get_weights()[0].copy())

    momentum = 0.8
    config = TrainConfig(batch_size=4, total_steps=8, steps_per_block=4, learning_rate=0.1,
                         warmup_fraction=0.0, weight_decay=0.0, ema_momentum=momentum)
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=make_optimizer(config), loss="mse")
    build_optimizer(model)
    recorder = Recorder()
    callbacks = training_callbacks(str(tmp_path), is_chief=True, evaluation=(recorder,), ema=True)
    order = [type(c).__name__ for c in callbacks]
    # The backup is written before the average is swapped in: a resumed run continues raw training.
    assert order.index("BlockWeights") < order.index("SwapEMAWeights") < order.index("Recorder") \
        < order.index("HistoryCSV")

    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(32, 3)).astype("float32"), rng.normal(size=(32, 1)).astype("float32")
    model.fit(x, y, batch_size=4, epochs=2, steps_per_epoch=4, shuffle=False, verbose=0,
              callbacks=callbacks)

    average = recorder.after_step[0]  # keras' average starts at the first step's weights
    averages = [average]
    for weights in recorder.after_step[1:]:
        average = momentum * average + (1 - momentum) * weights
        averages.append(average)
    np.testing.assert_allclose(recorder.at_evaluation[0], averages[3], atol=1e-6)
    np.testing.assert_allclose(recorder.at_evaluation[1], averages[7], atol=1e-6)
    assert np.abs(averages[3] - recorder.after_step[3]).max() > 1e-3  # the average is not the raw
    np.testing.assert_allclose(recorder.at_block_start[1], recorder.after_step[3], atol=1e-7)


def test_chief_and_worker_backups_are_removed_whichever_ends_last(tmp_path):
    """A chief's `backup/` holds `backup/worker-1`; the worker may still write its last block
    after the chief ends. Neither removes the other's files, and no `backup/` is left."""
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])

    def backups_of(worker):
        callbacks = training_callbacks(str(tmp_path), is_chief=worker == 0, worker=worker, checkpoint=False)
        weights = next(c for c in callbacks if type(c).__name__ == "BlockWeights")
        weights.set_model(model)
        return weights

    for order in ([0, 1], [1, 0]):
        chief, worker = backups_of(0), backups_of(1)
        chief.on_epoch_end(0)
        worker.on_epoch_end(0)
        first, last = (chief, worker) if order == [0, 1] else (worker, chief)
        first.on_train_end()
        assert (tmp_path / "backup").is_dir()  # the other's backup is still there...
        if first is chief:
            assert (tmp_path / "backup" / "worker-1" / "block-0001.weights.h5").is_file()
            worker.on_epoch_end(1)  # ...and the worker writes its last block after the chief ended
        last.on_train_end()
        assert not (tmp_path / "backup").exists(), order
