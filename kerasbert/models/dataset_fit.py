"""A mixin for keras.Model subclasses: `fit` on a tf.data.Dataset does not ask keras to shuffle it.

keras' `fit` defaults to `shuffle=True` and then warns, for every Dataset, that it was
"passed, but will be ignored": a Dataset shuffles itself (`task_dataset(..., training=True)`
and `text_pretraining_dataset` do). kerasbert's models take Datasets, so the quick start
printed that warning on every call.

A plain mixin, not a keras.Model subclass: keras rewrites the bases of a subclass built
functional-style (BertPretrainer) to Functional, which would turn a shared Model base into
Functional for subclass-style models too (MultitaskBert).

Example:
    >>> import warnings, keras
    >>> class Linear(DatasetFit, keras.Model):
    ...     def __init__(self):
    ...         super().__init__()
    ...         self.dense = keras.layers.Dense(1)
    ...     def call(self, x):
    ...         return self.dense(x)
    >>> model = Linear()
    >>> model.compile(optimizer="sgd", loss="mse")
    >>> dataset = tf.data.Dataset.from_tensor_slices((tf.ones((4, 2)), tf.ones((4, 1)))).batch(2)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     history = model.fit(dataset, epochs=1, verbose=0)
    >>> [str(warning.message) for warning in caught if "shuffle" in str(warning.message)]  # no shuffle warning
    []
"""

from __future__ import annotations

import tensorflow as tf


class DatasetFit:
    def fit(self, x=None, *args, **kwargs):
        if isinstance(x, tf.data.Dataset):
            kwargs.setdefault("shuffle", False)
        return super().fit(x, *args, **kwargs)
