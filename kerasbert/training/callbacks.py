"""Callbacks shared by the training pipelines: resumable backup, logs, speed.

Training runs in *blocks*: one Keras "epoch" is `steps_per_block` steps, and the unit
of resumption: a run killed mid-block restarts at the start of that block from its
backup, and the input pipeline skips the batches already trained on (see backup.py).

Example:
    >>> callbacks = training_callbacks(str(tmp_path), is_chief=True)  # for model.fit(..., callbacks=callbacks)
    >>> [type(callback).__name__ for callback in callbacks]
    ['StopOnNonFiniteLoss', 'BlockWeights', 'HistoryCSV', 'StepCurve', 'TensorBoard', 'BlockWeights']
"""

from __future__ import annotations

import os
import time

import keras
import numpy as np

from kerasbert.plots import STEP_CURVE
from kerasbert.training.backup import BlockWeights, last_block
from kerasbert.training.finite import StopOnNonFiniteLoss
from kerasbert.training.step_curve import StepCurve


class Throughput(keras.callbacks.Callback):
    """Examples per second of each block, compile time of the first block excluded.

    The clock stops at the end of the block's last training step, so work that other
    callbacks do at the end of a block (dev scoring, backups) does not count. Each block's
    rate goes into the logs as `examples_per_second` (history.csv's column: a resumed run's
    earlier blocks keep theirs).
    """

    def __init__(self, batch_size: int):
        super().__init__()
        self.batch_size = batch_size
        self.block_rates: list[float] = []
        self._start = self._end = None
        self._steps = 0

    def on_train_batch_begin(self, batch, logs=None):
        if self._start is None and batch >= 1:  # step 0 includes tracing/compiling
            self._start, self._steps = time.perf_counter(), 0

    def on_train_batch_end(self, batch, logs=None):
        if self._start is not None:
            self._steps += 1
            self._end = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        if self._start is not None and self._steps:
            self.block_rates.append(self._steps * self.batch_size / (self._end - self._start))
            if logs is not None:
                logs["examples_per_second"] = self.block_rates[-1]
        self._start = None

    def examples_per_second(self) -> float:
        return float(np.median(self.block_rates)) if self.block_rates else 0.0


def backup_dir(output_dir: str, worker: int, is_chief: bool) -> str:
    """Where a worker keeps its backup: `backup/` for the chief, `backup/worker-N` for the
    others (stable, so a restarted worker finds what it wrote before)."""
    backups = os.path.join(output_dir, "backup")
    return backups if is_chief else os.path.join(backups, f"worker-{worker}")


def training_callbacks(output_dir: str, is_chief: bool, throughput: Throughput | None = None,
                       checkpoint: bool = True, evaluation: tuple = (), ema: bool = False,
                       steps_per_block: int = 1, skip_nonfinite: bool = False,
                       worker: int = 0) -> list[keras.callbacks.Callback]:
    """A stop at the first non-finite loss (unless `skip_nonfinite`), the backup (for
    resume), `evaluation` callbacks, and on the chief only: checkpoints, CSV history,
    TensorBoard.

    Non-chief workers keep their backup in `backup/worker-N` (see `backup_dir`). With `ema` (an optimizer with `use_ema`),
    the moving-average weights are swapped in after the backup is written and
    before `evaluation` runs, and swapped out when the next block begins: the
    backup holds the raw training state, evaluation and checkpoints the average.
    """
    backups = backup_dir(output_dir, worker, is_chief)
    callbacks: list[keras.callbacks.Callback] = []
    if not skip_nonfinite:
        callbacks.append(StopOnNonFiniteLoss(steps_per_block, lambda: last_block(backups)))
    chiefs = backup_dir(output_dir, 0, True)
    callbacks.append(BlockWeights(backups, parent=None if backups == chiefs else chiefs))
    if ema:
        callbacks.append(keras.callbacks.SwapEMAWeights(swap_on_epoch=True))
    callbacks.extend(evaluation)  # before the loggers, which record what it adds to the logs
    if throughput is not None:
        callbacks.append(throughput)
    if is_chief:
        callbacks.append(HistoryCSV(os.path.join(output_dir, "history.csv"), append=True))
        callbacks.append(StepCurve(os.path.join(output_dir, STEP_CURVE), steps_per_block,
                                   every=steps_per_block // 10))  # ten points a block
        callbacks.append(keras.callbacks.TensorBoard(os.path.join(output_dir, "logs"),
                                                     update_freq="epoch"))
        if checkpoint:
            callbacks.append(BlockWeights(os.path.join(output_dir, "checkpoints"), remove_at_end=False))
    return callbacks


class HistoryCSV(keras.callbacks.CSVLogger):
    """keras' CSVLogger with one column per logged key. keras adds a `val_<key>` column for
    every key when the first block logs no `val_*` key, as these runs never do (dev metrics
    are `dev_*`), which filled half of history.csv with NA.

    Example:
        >>> callbacks = [HistoryCSV("runs/x/history.csv", append=True)]
    """

    def on_epoch_end(self, epoch, logs=None):
        if self.keys is None:
            self.keys = sorted(logs or {})
        super().on_epoch_end(epoch, logs)
