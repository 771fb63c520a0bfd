"""A run that goes non-finite stops, and nothing non-finite is kept as if it were trained.

`StopOnNonFiniteLoss` raises `NonFiniteError` at the first training step whose loss is NaN
or infinite, before the block ends: no backup, evaluation or checkpoint of that block is
written, and the message names the step and the last backup (all backups are finite:
`BlockWeights` checks the weights before it writes). With `train.skip_nonfinite_batches`,
`SkipNonFiniteSteps` leaves the weights as they were for a batch whose gradients are not
finite, and counts it, instead.

Example (the second batch holds an infinity):
    >>> import keras, tensorflow as tf
    >>> keras.utils.set_random_seed(0)
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, name="dense")], name="model")
    >>> data = tf.data.Dataset.from_tensor_slices((tf.constant([[1.0, 2.0, 3.0], [float("inf"), 0.0, 0.0]]), tf.ones([2, 1]))).batch(1)
    >>> model.compile(optimizer="adam", loss="mse")
    >>> model.fit(data, epochs=1, verbose=0, callbacks=[StopOnNonFiniteLoss(steps_per_block=2, last_backup=lambda: 0)])
    Traceback (most recent call last):
    ...
    kerasbert.errors.NonFiniteError: loss became infinite at step 2 (block 1); no backup was written yet, ...
"""

from __future__ import annotations

import math

import keras

from kerasbert.compat.keras import NonFiniteStepHooks
from kerasbert.errors import NonFiniteError


def nonfinite_variables(variables) -> list[str]:
    """The paths of the floating-point `variables` that hold a NaN or an infinity.

    Example:
    >>> import keras, tensorflow as tf
    >>> keras.utils.set_random_seed(0)
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, name="dense")], name="model")
        >>> nonfinite_variables(model.weights)
        []
        >>> model.layers[0].bias.assign([float("nan")])
        <tf.Tensor: shape=(1,), dtype=float32, numpy=array([nan], dtype=float32)>
        >>> nonfinite_variables(model.weights)
        ['model/dense/bias']
    """
    bad = []
    for variable in variables:
        if "float" not in str(variable.dtype):
            continue
        if not bool(keras.ops.convert_to_numpy(keras.ops.all(keras.ops.isfinite(variable)))):
            bad.append(getattr(variable, "path", variable.name))
    return bad


def check_finite_weights(model: keras.Model, what: str) -> None:
    """Raises NonFiniteError naming the first non-finite weights of `model`; `what` says
    what was about to happen ("writing the backup of block 3", "exporting")."""
    bad = nonfinite_variables(model.weights)
    if bad:
        raise NonFiniteError(f"{len(bad)} weight tensor(s) hold NaN or infinite values (first: {bad[0]}); "
                             f"refused {what}")


class StopOnNonFiniteLoss(keras.callbacks.Callback):
    """Raises NonFiniteError at the first step whose logged loss is not finite.

    `last_backup()` gives the number of the newest backup block (0: none), for the message.
    """

    def __init__(self, steps_per_block: int, last_backup):
        super().__init__()
        self.steps_per_block, self.last_backup, self.block = steps_per_block, last_backup, 0

    def on_epoch_begin(self, epoch, logs=None):
        self.block = epoch

    def on_train_batch_end(self, batch, logs=None):
        loss = (logs or {}).get("loss")
        if loss is None or math.isfinite(float(loss)):
            return
        step = self.block * self.steps_per_block + batch + 1
        last = self.last_backup()
        print(flush=True)  # ends keras' progress bar line
        resume = (f"the last finite backup is block {last}, which the same command resumes from "
                  f"(step {last * self.steps_per_block})" if last else
                  "no backup was written yet, so the same command starts again from step 0")
        raise NonFiniteError(f"loss became {'NaN' if math.isnan(float(loss)) else 'infinite'} at step {step} "
                             f"(block {self.block + 1}); {resume}. Lower train.learning_rate, or pass "
                             "--set train.skip_nonfinite_batches=true to skip such batches")


@keras.saving.register_keras_serializable(package="kerasbert")
class SkipNonFiniteSteps(NonFiniteStepHooks):
    """Applies a step only when all its gradients are finite; counts the steps it skips.

    keras' LossScaleOptimizer already decides "finite or not" once for all replicas, in the
    cross-replica context that `tf.distribute` needs; here the loss scale stays 1 and a
    skipped step adds one to `skipped_steps` instead of halving it.

    Example:
    >>> import keras, tensorflow as tf
    >>> keras.utils.set_random_seed(0)
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, name="dense")], name="model")
    >>> data = tf.data.Dataset.from_tensor_slices((tf.constant([[1.0, 2.0, 3.0], [float("inf"), 0.0, 0.0]]), tf.ones([2, 1]))).batch(1)
        >>> from kerasbert.training.optim import FusedAdamW
        >>> model.compile(optimizer=SkipNonFiniteSteps(FusedAdamW(1e-4)), loss="mse")
        >>> history = model.fit(data, epochs=1, verbose=0)
        >>> int(model.optimizer.skipped_steps.numpy()), nonfinite_variables(model.weights)
        (1, [])
    """

    def __init__(self, inner_optimizer, name=None, **_scale_settings):
        super().__init__(inner_optimizer, initial_scale=1.0, name=name)

    @property
    def skipped_steps(self):
        return self.step_counter

    def apply_finite(self, grads, trainable_variables):
        self.inner_optimizer.apply(grads, trainable_variables=trainable_variables)

    def skip_non_finite(self):
        self.step_counter.assign_add(1)
