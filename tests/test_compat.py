"""The private Keras API kerasbert relies on (kerasbert/compat/keras.py) is still there, on
the one Keras release it was checked against. Upgrading Keras fails this test on purpose:
read the private code again, then add the release to CHECKED_KERAS."""

import keras

from kerasbert.compat import keras as compat


def test_the_installed_keras_is_a_checked_release():
    assert keras.__version__ in compat.CHECKED_KERAS, (
        f"Keras {keras.__version__} is not in kerasbert/compat/keras.py's CHECKED_KERAS")


def test_the_private_names_the_patches_replace_still_exist():
    from keras.src.backend.tensorflow import trainer as tf_trainer

    for name in ("reduce_per_replica", "_collective_all_reduce_multi_worker", "_is_per_replica_instance"):
        assert callable(getattr(tf_trainer, name)), name
    assert callable(tf_trainer.TensorFlowTrainer._maybe_symbolic_build)
    archive = keras.export.ExportArchive()
    assert callable(type(archive)._filter_and_track_resources) and hasattr(archive, "_tf_trackable")


def test_an_unchecked_release_gets_the_plain_archive(monkeypatch, caplog):
    monkeypatch.setattr(compat, "CHECKED_KERAS", ("0.0.0",))
    archive = compat.ordered_export_archive(keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)]))
    assert type(archive) is type(keras.export.ExportArchive())
    assert "not one this project checked" in caplog.text
