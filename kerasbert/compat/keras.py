"""Every use of Keras' private API in kerasbert, in one place, behind one version gate.

- `install_multiworker_fit()`: Keras 3 `fit` under `MultiWorkerMirroredStrategy` (upstream
  keras-team/keras#20585, also #20329, tensorflow/tensorflow#72388). Two functions of
  `keras/src/backend/tensorflow/trainer.py` fail under the collective all-reduce strategy:
  `TensorFlowTrainer._maybe_symbolic_build` reduces the whole first input batch with
  `strategy.reduce("MEAN", batch)`, which cannot convert a dict of PerReplica values
  (building needs only shapes, so one replica's local batch is enough); and
  `reduce_per_replica` reduces the scalar step logs with `axis=0`, which fails on 0-d
  values (scalars need `axis=None`).
- `ordered_export_archive(model)`: an ExportArchive that saves the endpoints' variables in
  the model's weight order, so a re-export of one model has the same program fingerprint
  (a server may then restore weights into a graph it has loaded: `--warm_standby`). It
  overrides the archive's private `_filter_and_track_resources`.

- `attention_dropout(layer)`: the dropout a `MultiHeadAttention` applies to its attention
  probabilities (the private `_dropout_layer`), for kerasbert/models/unpadded.py.
- `adam_slots(optimizer, variable)`: the momentum and velocity an Adam keeps for a weight
  (the private `_get_variable_index`, `_momentums`, `_velocities`), for FusedAdamW's kernel.
- `GradientsBeforeClipping`: an optimizer mixin whose `gradients_before_clipping(grads)` runs
  before keras clips them (it overrides the private `_clip_gradients`), for FusedAdamW.
- `NonFiniteStepHooks`: a LossScaleOptimizer whose `apply_finite(grads, variables)` and
  `skip_non_finite()` decide what a step with finite or non-finite gradients does (they
  override the private `_stateful_handle_finite_grads`/`_stateful_handle_non_finite_grads`),
  for kerasbert/training/finite.py's SkipNonFiniteSteps.

All act only on the Keras releases in CHECKED_KERAS. Elsewhere fit runs unpatched,
exports use the plain archive (correct, only without the stable fingerprint), the
encoder runs padded (`kerasbert.models.unpadded.available()` is False), FusedAdamW takes
keras' own Adam update and clipping, SkipNonFiniteSteps refuses to be built, and
tests/test_compat.py fails, so that an upgrade is a decision: check the private names
below still exist and behave, then add the release.

Example:
    >>> install_multiworker_fit()  # before model.fit under MultiWorkerMirroredStrategy
    >>> archive = ordered_export_archive(model)
"""

from __future__ import annotations

import logging

import keras
import tensorflow as tf

from kerasbert.errors import KerasbertError

CHECKED_KERAS = ("3.15.1",)  # the releases whose private code below was read and tested
log = logging.getLogger(__name__)
_multiworker_installed = False


def checked() -> bool:
    return keras.__version__ in CHECKED_KERAS


def install_multiworker_fit() -> None:
    """Patches Keras' `fit` for MultiWorkerMirroredStrategy (see the module docstring); idempotent.
    On a Keras release not checked here it changes nothing, and says so."""
    global _multiworker_installed
    if _multiworker_installed:
        return
    if not checked():
        log.warning("Keras %s is not one this project checked (%s): multi-worker fit runs unpatched; "
                    "see kerasbert/compat/keras.py", keras.__version__, ", ".join(CHECKED_KERAS))
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
    _multiworker_installed = True


def ordered_export_archive(model) -> keras.export.ExportArchive:
    """An ExportArchive for `model`: variables in weight order on a checked Keras, else plain."""
    if not checked():
        log.warning("Keras %s is not one this project checked (%s): exporting with the plain "
                    "ExportArchive (re-exports will not share a program fingerprint)",
                    keras.__version__, ", ".join(CHECKED_KERAS))
        return keras.export.ExportArchive()
    return _OrderedExportArchive(model)


class _OrderedExportArchive(type(keras.export.ExportArchive())):  # the backend's archive class (private)
    """An ExportArchive that saves the endpoints' variables in the model's weight order.

    keras lists them in the order the endpoints captured them, which follows object
    ids, so two exports of one model had different program fingerprints. In a fixed
    order a re-export has the same fingerprint, and a server may restore its weights
    into a graph it has already loaded (`python -m serving --warm_standby`).
    """

    def __init__(self, model):
        super().__init__()
        self._rank = {id(weight.value): rank for rank, weight in enumerate(model.weights)}

    def _filter_and_track_resources(self):
        super()._filter_and_track_resources()
        variables = sorted(self._tf_trackable._all_variables,
                           key=lambda v: (self._rank.get(id(v), len(self._rank)), v.name))
        trackable = self._tf_trackable
        trackable._all_variables = variables
        # The loaded object's .variables, as archive.track(model) would give, but the same
        # tf.Variable objects, so the checkpoint still holds each weight once.
        trackable.variables = list(variables)
        trackable.trainable_variables = [v for v in variables if v.trainable]
        trackable.non_trainable_variables = [v for v in variables if not v.trainable]


def attention_dropout(layer: keras.layers.MultiHeadAttention) -> keras.layers.Layer:
    """The Dropout layer `layer` applies to its attention probabilities (check `checked()` first)."""
    return layer._dropout_layer


def adam_slots(optimizer: keras.optimizers.Optimizer, variable) -> tuple:
    """The (momentum, velocity) slot variables a built keras Adam keeps for `variable`
    (check `checked()` first)."""
    index = optimizer._get_variable_index(variable)
    return optimizer._momentums[index], optimizer._velocities[index]


class GradientsBeforeClipping:
    """Mixin for a keras optimizer: `gradients_before_clipping(grads)` rewrites the gradients
    before keras clips and applies them (on a checked release; elsewhere it is not called)."""

    def gradients_before_clipping(self, grads: list) -> list:
        return grads

    def _clip_gradients(self, grads):
        if checked():
            grads = self.gradients_before_clipping(grads)
        return super()._clip_gradients(grads)


class NonFiniteStepHooks(keras.optimizers.LossScaleOptimizer):
    """A LossScaleOptimizer whose subclass says what a step does with finite gradients
    (`apply_finite`) and with non-finite ones (`skip_non_finite`); the loss scale's own
    cross-replica "all finite?" decision picks one. Only on a checked release."""

    def __init__(self, inner_optimizer, **kwargs):
        if not checked():
            raise KerasbertError(f"Keras {keras.__version__} is not one this project checked "
                                 f"({', '.join(CHECKED_KERAS)}): train.skip_nonfinite_batches needs private "
                                 "hooks that may have changed; see kerasbert/compat/keras.py")
        super().__init__(inner_optimizer, **kwargs)

    def apply_finite(self, grads, trainable_variables) -> None:
        raise NotImplementedError

    def skip_non_finite(self) -> None:
        raise NotImplementedError

    def _stateful_handle_finite_grads(self, grads, trainable_variables):
        self.apply_finite(grads, trainable_variables)

    def _stateful_handle_non_finite_grads(self):
        self.skip_non_finite()
