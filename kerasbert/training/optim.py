"""AdamW with BERT's learning-rate schedules.

- `linear`: linear warmup to the peak, then linear decay to 0 (BERT).
- `exponential`: lr0 * gamma ** (step / steps_per_block), the reference study's
  per-epoch decay with one block standing for one epoch (keras' ExponentialDecay).

Weight decay skips biases and LayerNorm parameters, as in BERT.

Example:
    >>> optimizer = make_optimizer(TrainConfig(learning_rate=1e-4, total_steps=1000))
"""

from __future__ import annotations

import keras

from kerasbert.config import TrainConfig


@keras.saving.register_keras_serializable(package="kerasbert")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup over `warmup_steps`, then linear decay to 0 at `total_steps`."""

    def __init__(self, peak_learning_rate, warmup_steps, total_steps):
        self.peak_learning_rate = peak_learning_rate
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps

    def __call__(self, step):
        step = keras.ops.cast(step, "float32")
        warmup = step / max(self.warmup_steps, 1)
        decay = (self.total_steps - step) / max(self.total_steps - self.warmup_steps, 1)
        return self.peak_learning_rate * keras.ops.maximum(keras.ops.minimum(warmup, decay), 0.0)

    def get_config(self):
        return {"peak_learning_rate": self.peak_learning_rate,
                "warmup_steps": self.warmup_steps, "total_steps": self.total_steps}


def make_schedule(config: TrainConfig, learning_rate: float | None = None):
    peak = learning_rate or config.learning_rate
    if config.schedule == "exponential":
        return keras.optimizers.schedules.ExponentialDecay(
            peak, decay_steps=config.steps_per_block, decay_rate=config.exponential_gamma)
    return WarmupLinearDecay(peak, int(config.warmup_fraction * config.total_steps),
                             config.total_steps)


def make_optimizer(config: TrainConfig) -> keras.optimizers.AdamW:
    optimizer = keras.optimizers.AdamW(
        learning_rate=make_schedule(config),
        weight_decay=config.weight_decay,
        clipnorm=config.clipnorm or None,
        epsilon=1e-6,
        use_ema=config.ema_momentum > 0,
        ema_momentum=config.ema_momentum,  # read by keras only with use_ema
    )
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    return optimizer


def build_optimizer(model: keras.Model) -> None:
    """Creates the compiled optimizer's slots now, for a built model.

    Under the default strategy Keras defers this to the first trace of the train
    step; creating variables there makes TensorFlow trace the step a second time,
    which doubles the start-up cost of every run. Call inside the strategy scope.

    Example:
        >>> model.compile(optimizer=make_optimizer(config.train))
        >>> build_optimizer(model)
    """
    model.optimizer.build(model.trainable_variables)
