"""The run skeleton that pretraining and fine-tuning share.

Every kerasbert training run takes the same steps around its own data and model:

    1. open the output folder: a finished run is kept (unless overwrite); else seed,
       folder, config.json, and the backup to resume from (weights, optimizer state and
       the data's step all come from that one file);
    2. prepare the model in the strategy scope: fresh heads trained alone first (a new
       run only), compile with the run's optimizer, build, restore the backup;
       check the disk can hold the backups;
    3. fit block by block from the resumed block, with the backups, history, TensorBoard
       and throughput callbacks;
    4. write the outputs on the chief, metrics.json last (what marks the run finished).

A loss that becomes NaN or infinite stops the run with an error naming the step and the
backup the next start resumes from (training/finite.py); no backup, best weights or
metrics.json with non-finite values is ever written.

In a fit script (a sketch, not run: kerasbert/pretraining/run.py and finetuning/run.py are
the real ones; tests/helpers.py start_run runs one on a tiny model):
    run = TrainingRun(config, "runs/ft", RUN_OUTPUTS)
    if run.finished is not None:
        return run.finished
    batches = my_batches.skip(run.start_step)
    with strategy.scope():
        model = build_my_model()
        run.prepare(model, lambda optimizer: model.compile(optimizer=optimizer), batches)
    fit = run.fit(model, batches)
    run.stage(f"done: {fit.examples_per_second:.0f} examples/s")
"""

from __future__ import annotations

import dataclasses
import os
import time
from typing import Callable

import keras

from kerasbert.config import save_config
from kerasbert.console import stage
from kerasbert.training.backup import find_backup, last_block, restore
from kerasbert.training.callbacks import Throughput, backup_dir, training_callbacks
from kerasbert.training.head_warmup import warm_up_heads
from kerasbert.training.optim import build_optimizer, make_optimizer
from kerasbert.training.progress import fit_output
from kerasbert.training.run_folder import check_free_space, check_output_dir
from kerasbert.training.strategy import worker_info


class Interrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM during training; the message says where the next start resumes."""


@dataclasses.dataclass(frozen=True)
class FitResult:
    """What a fit measured: seconds in `model.fit`, and examples/s without compile time."""

    train_seconds: float
    examples_per_second: float
    skipped_nonfinite_batches: int = 0  # with train.skip_nonfinite_batches


class TrainingRun:
    """One run's folder, resume point and clock (step 1 above), and steps 2 and 3.

    Args:
        config: a PretrainConfig or FinetuneConfig (its `train` section is used here).
        output_dir: the run's folder.
        outputs: the files and folders the run writes there (what `overwrite` removes).
        overwrite: start from scratch even where a finished run is.
    """

    def __init__(self, config, output_dir: str, outputs: tuple[str, ...], overwrite: bool = False):
        self.started = time.perf_counter()
        self.train, self.output_dir = config.train, output_dir
        self.worker, self.is_chief = worker_info()
        self.finished = check_output_dir(output_dir, outputs, overwrite, self.is_chief, config)
        self.backup, self.start_block = None, 0
        if self.finished is not None:
            return
        keras.utils.set_random_seed(self.train.seed)
        os.makedirs(output_dir, exist_ok=True)
        if self.is_chief:
            save_config(config, os.path.join(output_dir, "config.json"))
        self.backup = self._find_backup(output_dir)
        self.start_block = self.backup.blocks_done if self.backup else 0

    def _find_backup(self, output_dir: str):
        """The chief's newest backup; a worker's own of the same block where the chief's
        folder is visible (a shared file system), else its own newest: all workers must
        start from the same block."""
        chiefs = find_backup(backup_dir(output_dir, 0, True))
        if self.is_chief:
            return chiefs
        own = find_backup(backup_dir(output_dir, self.worker, False))
        if chiefs is not None and (own is None or own.blocks_done != chiefs.blocks_done):
            return chiefs
        return own

    @property
    def start_step(self) -> int:
        """The step the run starts at: the data skips this many batches."""
        return self.start_block * self.train.steps_per_block

    @property
    def verbose(self) -> int:
        return 1 if self.is_chief else 0

    def stage(self, message: str) -> None:
        """Prints a stage line with the time since the run started."""
        stage(message, self.started)

    def resuming(self) -> str:
        """"; resuming at step N from <backup>" for a resumed run, else ""."""
        return f"; resuming at step {self.start_step} from {self.backup.path}" if self.backup else ""

    def prepare(self, model: keras.Model, compile_model: Callable[[keras.optimizers.Optimizer], None],
                batches, build: Callable[[], object] | None = None, heads: str = "heads") -> None:
        """Step 2, in the strategy scope: with `train.head_warmup_steps`, trains the `heads`
        alone on `batches` first (a resumed run restores warmed heads instead); compiles
        with the run's optimizer (`compile_model(optimizer)`); calls `build` (a model whose
        layers build on first call); restores the backup. Then checks the free disk space."""
        train = self.train
        if train.head_warmup_steps and self.start_step == 0:
            self.stage(f"training the {heads} alone for {train.head_warmup_steps} steps, encoder frozen")
            warm_up_heads(model, batches, train.head_warmup_steps, train.head_warmup_learning_rate,
                          compile_model, verbose=self.verbose)
        compile_model(make_optimizer(train))
        if build is not None:
            build()
        build_optimizer(model)
        restore(model, self.backup)
        if self.is_chief:
            check_free_space(self.output_dir, model.count_params())

    def fit(self, model: keras.Model, batches, evaluation: tuple = (), checkpoint: bool = True,
            **fit_kwargs) -> FitResult:
        """Step 3: `model.fit` from the resumed block to the last, one block an epoch, with
        the backup, history and TensorBoard callbacks and `evaluation` after each block."""
        train = self.train
        throughput = Throughput(train.batch_size)
        callbacks = training_callbacks(self.output_dir, self.is_chief, throughput, checkpoint=checkpoint,
                                       evaluation=evaluation, ema=train.ema_momentum > 0,
                                       steps_per_block=train.steps_per_block,
                                       skip_nonfinite=train.skip_nonfinite_batches, worker=self.worker)
        verbose, progress = fit_output(self.verbose)  # plain lines when not on a terminal
        fit_started = time.perf_counter()
        try:
            model.fit(batches, initial_epoch=self.start_block, epochs=train.num_blocks,
                      steps_per_epoch=train.steps_per_block, shuffle=False, callbacks=callbacks + progress,
                      verbose=verbose, **fit_kwargs)
        except KeyboardInterrupt:
            own = backup_dir(self.output_dir, self.worker, self.is_chief)
            resume = last_block(own) * train.steps_per_block
            raise Interrupted(f"interrupted at step {int(model.optimizer.iterations.numpy())}; the same command "
                              f"resumes from step {resume}") from None
        self.steps_trained = int(model.optimizer.iterations.numpy())
        skipped = getattr(model.optimizer, "skipped_steps", None)
        skipped = int(skipped.numpy()) if skipped is not None else 0
        if skipped:
            self.stage(f"skipped {skipped} batch(es) whose gradients were not finite (train.skip_nonfinite_batches)")
        return FitResult(time.perf_counter() - fit_started, throughput.examples_per_second(), skipped)
