"""Compatibility layer: Keras 3 `fit` under `MultiWorkerMirroredStrategy`.

Upstream bug: keras-team/keras#20585 (also #20329, tensorflow/tensorflow#72388).
Two functions of `keras/src/backend/tensorflow/trainer.py` fail under the
collective all-reduce strategy:

1. `TensorFlowTrainer._maybe_symbolic_build` reduces the whole first input batch
   with `strategy.reduce("MEAN", batch)`, which cannot convert a dict of PerReplica
   values. Building only needs the shapes, so one replica's local batch is enough.
2. `reduce_per_replica` reduces the scalar step logs with
   `strategy.reduce("MEAN", v, axis=0)`, which fails on 0-d values; scalars need
   `axis=None`.

`install()` patches exactly these two, only for the Keras versions known to need
it, and is idempotent. Remove this module when Keras fixes the issue: the
two-process test in tests/test_distribution.py will show whether it is still needed.
"""

from __future__ import annotations

import keras
import tensorflow as tf

AFFECTED_KERAS = ("3.",)  # every Keras 3 release checked so far (3.15.1)
_installed = False


def install() -> None:
    global _installed
    if _installed or not keras.__version__.startswith(AFFECTED_KERAS):
        return
    from keras.src.backend.tensorflow import trainer as tf_trainer

    original_reduce = tf_trainer.reduce_per_replica

    def reduce_per_replica(values, strategy, reduction):
        if reduction in ("mean", "auto") and tf_trainer._collective_all_reduce_multi_worker(strategy):
            def reduce_one(v):
                if not tf_trainer._is_per_replica_instance(v):
                    return v
                # axis=None works for scalars (the bug) and means over replicas alike.
                return strategy.reduce("MEAN", v, axis=None)
            return tf.nest.map_structure(reduce_one, values)
        return original_reduce(values, strategy, reduction)

    def _maybe_symbolic_build(self, iterator=None, data_batch=None):
        if self._distribute_strategy is None:
            return
        if iterator is not None:
            for _, _, it in iterator:
                batch = next(it)
                # One replica's local values carry every shape the build needs.
                data_batch = tf.nest.map_structure(
                    lambda v: self.distribute_strategy.experimental_local_results(v)[0]
                    if isinstance(v, tf.distribute.DistributedValues) else v, batch)
                break
        with self.distribute_strategy.scope():
            self._symbolic_build(data_batch=data_batch)

    tf_trainer.reduce_per_replica = reduce_per_replica
    tf_trainer.TensorFlowTrainer._maybe_symbolic_build = _maybe_symbolic_build
    _installed = True
