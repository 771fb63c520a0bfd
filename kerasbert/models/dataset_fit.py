"""A mixin for keras.Model subclasses: `fit` on a tf.data.Dataset does not ask keras to shuffle it.

keras' `fit` defaults to `shuffle=True` and then warns, for every Dataset, that it was
"passed, but will be ignored": a Dataset shuffles itself (`task_dataset(..., training=True)`
and `text_pretraining_dataset` do). kerasbert's models take Datasets, so the quick start
printed that warning on every call.

A plain mixin, not a keras.Model subclass: keras rewrites the bases of a subclass built
functional-style (BertPretrainer) to Functional, which would turn a shared Model base into
Functional for subclass-style models too (MultitaskBert).

Example:
    >>> class MyModel(DatasetFit, keras.Model): ...
    >>> MyModel(...).fit(dataset, steps_per_epoch=100)  # no shuffle warning
"""

from __future__ import annotations

import tensorflow as tf


class DatasetFit:
    def fit(self, x=None, *args, **kwargs):
        if isinstance(x, tf.data.Dataset):
            kwargs.setdefault("shuffle", False)
        return super().fit(x, *args, **kwargs)
