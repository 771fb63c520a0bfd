"""AdamW with BERT's learning-rate schedules.

- `linear`: linear warmup to the peak, then linear decay to 0 (BERT).
- `exponential`: lr0 * gamma ** (step / steps_per_block), the reference study's
  per-epoch decay with one block standing for one epoch (keras' ExponentialDecay).

Weight decay skips biases and LayerNorm parameters, as in BERT. The Adam update is
TensorFlow's fused kernel (`FusedAdamW`): one pass over each weight and its moments
instead of a dozen, with PyTorch's arithmetic where keras' differs.

Example:
    >>> optimizer = make_optimizer(TrainConfig(learning_rate=1e-4, total_steps=1000))
"""

from __future__ import annotations

import keras

from kerasbert.compat import keras as compat
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


@keras.saving.register_keras_serializable(package="kerasbert")
class FusedAdamW(compat.GradientsBeforeClipping, keras.optimizers.AdamW):
    """keras' AdamW whose Adam update is TensorFlow's fused `ResourceApplyAdam` kernel.

    keras' `update_step` writes the update as a dozen element-wise ops, each a pass over
    the weight, its gradient and its moments; on a CPU, for MiniLM's 30,522 x 384 token
    embedding, those passes were a fifth of a fine-tuning step. The kernel computes
    m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2 and
    w -= lr sqrt(1 - b2^t) / (1 - b1^t) m / (sqrt(v) + eps') in one pass.
    Weight decay, clipping, EMA and the slots (`momentum`, `velocity`) stay keras' own,
    so checkpoints of either class load into the other. Other backends, `amsgrad` and Keras
    releases kerasbert/compat/keras.py has not checked take keras' update.

    Where keras' AdamW and PyTorch's (BERT's recipe) differ, this class does as PyTorch:
    - epsilon is Algorithm 1's of Kingma and Ba, added to the bias-corrected sqrt(v_hat),
      so eps' = eps sqrt(1 - b2^t). keras adds eps to the uncorrected sqrt(v) (the paper's
      "epsilon hat"), a larger epsilon early in training: 2x at step 300 with b2 = 0.999.
      It damps the steps of weights whose gradients are near eps, such as attention's
      query and key kernels while a model from scratch sits on its first loss plateau.
    - A gathered embedding's gradient (`tf.IndexedSlices`) keeps a repeated token's rows
      apart. Here it is summed into the variable's gradient before clipping and Adam, as
      PyTorch's AdamW and `clip_grad_norm_` see it. keras clips the norm of the separate
      rows and adds their squares into the second moment.
    With gradients well above eps and no token twice in a batch, the two classes agree.

    Example:
    >>> import keras, tensorflow as tf
    >>> keras.utils.set_random_seed(0)
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, name="dense")], name="model")
    >>> data = tf.data.Dataset.from_tensor_slices((tf.ones([8, 3]), tf.ones([8, 1]))).batch(4).repeat()
        >>> model.compile(optimizer=FusedAdamW(learning_rate=1e-4, weight_decay=0.01, clipnorm=1.0), loss="mse")
        >>> history = model.fit(data, epochs=1, steps_per_epoch=2, verbose=0)
        >>> int(model.optimizer.iterations)
        2
    """

    def gradients_before_clipping(self, grads):
        if keras.backend.backend() == "tensorflow":
            import tensorflow as tf

            grads = [tf.convert_to_tensor(g) if isinstance(g, tf.IndexedSlices) else g for g in grads]
        return grads

    def update_step(self, gradient, variable, learning_rate):
        if self.amsgrad or keras.backend.backend() != "tensorflow" or not compat.checked():
            return super().update_step(gradient, variable, learning_rate)
        import tensorflow as tf

        def handle(v):
            return (v.value if isinstance(v, keras.Variable) else v).handle

        dtype = variable.dtype
        step = tf.cast(self.iterations + 1, dtype)
        momentum, velocity = compat.adam_slots(self, variable)
        beta2_power = tf.pow(tf.cast(self.beta_2, dtype), step)
        tf.raw_ops.ResourceApplyAdam(
            var=handle(variable), m=handle(momentum), v=handle(velocity),
            beta1_power=tf.pow(tf.cast(self.beta_1, dtype), step), beta2_power=beta2_power,
            lr=tf.cast(learning_rate, dtype), beta1=tf.cast(self.beta_1, dtype), beta2=tf.cast(self.beta_2, dtype),
            epsilon=tf.cast(self.epsilon, dtype) * tf.sqrt(1.0 - beta2_power),  # on sqrt(v_hat), as PyTorch
            grad=tf.cast(tf.convert_to_tensor(gradient), dtype))


def make_schedule(config: TrainConfig):
    """The config's learning-rate schedule: `linear` (WarmupLinearDecay) or `exponential`."""
    peak = config.learning_rate
    if config.schedule == "exponential":
        return keras.optimizers.schedules.ExponentialDecay(
            peak, decay_steps=config.steps_per_block, decay_rate=config.exponential_gamma)
    return WarmupLinearDecay(peak, int(config.warmup_fraction * config.total_steps),
                             config.total_steps)


def make_optimizer(config: TrainConfig, optimizer_class: type = None) -> keras.optimizers.AdamW:
    """The config's AdamW: `FusedAdamW`, or `optimizer_class` (keras' AdamW) with the same
    settings, for comparing the two."""
    clipnorm = config.clipnorm or None  # 0: no clipping
    optimizer = (optimizer_class or FusedAdamW)(
        learning_rate=make_schedule(config),
        weight_decay=config.weight_decay,
        clipnorm=clipnorm if config.clip_scope == "each" else None,
        global_clipnorm=clipnorm if config.clip_scope == "global" else None,
        epsilon=1e-6,
        use_ema=config.ema_momentum > 0,
        ema_momentum=config.ema_momentum,  # read by keras only with use_ema
    )
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    if config.skip_nonfinite_batches:
        from kerasbert.training.finite import SkipNonFiniteSteps

        return SkipNonFiniteSteps(optimizer)
    return optimizer


def build_optimizer(model: keras.Model) -> None:
    """Creates the compiled optimizer's slots now, for a built model.

    Under the default strategy Keras defers this to the first trace of the train
    step; creating variables there makes TensorFlow trace the step a second time,
    which doubles the start-up cost of every run. Call inside the strategy scope.

    Example:
    >>> import keras, tensorflow as tf
    >>> keras.utils.set_random_seed(0)
    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1, name="dense")], name="model")
        >>> model.compile(optimizer=make_optimizer(TrainConfig()), loss="mse")
        >>> build_optimizer(model)
        >>> len(model.optimizer.variables)  # iteration, learning rate, and 2 slots a weight: made now
        5
    """
    model.optimizer.build(model.trainable_variables)
