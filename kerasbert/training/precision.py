"""Keras' global dtype policy, for the length of one run only.

Example:
    >>> with mixed_precision(config.train.mixed_precision):
    ...     model = BertPretrainer(build_encoder("mini", 8000))  # bfloat16 compute on CPU
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
