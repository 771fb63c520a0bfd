"""Keras' global dtype policy, for the length of one run only.

Example:
    >>> import keras
    >>> with mixed_precision(True):  # config.train.mixed_precision
    ...     model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    >>> model.layers[0].compute_dtype  # on a CPU; float16 on a GPU
    'bfloat16'
    >>> keras.mixed_precision.global_policy().name  # as it was before
    'float32'
"""

from __future__ import annotations

import contextlib

import keras
import tensorflow as tf


@contextlib.contextmanager
def mixed_precision(enabled: bool):
    """With `enabled`: mixed_float16 on a GPU, mixed_bfloat16 elsewhere; the policy in force
    before is restored on the way out, so a later run in the same process (the demo's
    fine-tuning after its pretraining) does not inherit it."""
    previous = keras.mixed_precision.global_policy()
    if enabled:
        keras.mixed_precision.set_global_policy(
            "mixed_float16" if tf.config.list_physical_devices("GPU") else "mixed_bfloat16")
    try:
        yield
    finally:
        keras.mixed_precision.set_global_policy(previous)
