"""The private Keras and keras-hub API kerasbert relies on (kerasbert/compat/) is still
there, on the one release of each it was checked against. Upgrading either fails this test
on purpose: read the private code again, then add the release to CHECKED_KERAS or
CHECKED_KERAS_HUB."""

import ast
import glob
import os

import keras
import keras_hub

from conftest import ROOT
from kerasbert.compat import keras as compat
from kerasbert.compat import keras_hub as hub_compat


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


def test_the_installed_keras_hub_is_a_checked_release():
    assert keras_hub.__version__ in hub_compat.CHECKED_KERAS_HUB, (
        f"keras-hub {keras_hub.__version__} is not in kerasbert/compat/keras_hub.py's CHECKED_KERAS_HUB")


def test_the_private_layers_of_a_transformer_block_are_where_they_were():
    backbone = keras_hub.models.BertBackbone(vocabulary_size=10, num_layers=1, num_heads=2, hidden_dim=8,
                                             intermediate_dim=16, max_sequence_length=4)
    parts = hub_compat.block_parts(backbone.transformer_layers[0])
    assert isinstance(parts.attention, keras.layers.MultiHeadAttention)
    for name in ("attention_dropout", "output_dropout"):
        assert isinstance(getattr(parts, name), keras.layers.Dropout), name
    for name in ("attention_norm", "output_norm"):
        assert isinstance(getattr(parts, name), keras.layers.LayerNormalization), name
    assert parts.intermediate.kernel.shape == (8, 16) and parts.output.kernel.shape == (16, 8)
    assert isinstance(compat.attention_dropout(parts.attention), keras.layers.Dropout)


def test_the_private_optimizer_names_the_hooks_use_still_exist():
    optimizer = keras.optimizers.AdamW(1e-3)
    weight = keras.Variable([1.0, 2.0])
    optimizer.build([weight])
    momentum, velocity = compat.adam_slots(optimizer, weight)
    assert momentum.shape == velocity.shape == weight.shape and momentum is not velocity
    assert callable(keras.optimizers.AdamW._clip_gradients)
    for name in ("_stateful_handle_finite_grads", "_stateful_handle_non_finite_grads"):
        assert callable(getattr(keras.optimizers.LossScaleOptimizer, name)), name


def private_uses(source: str) -> list[str]:
    """Private API a module's source touches: `x._name` on anything but self/cls, and imports
    from `keras.src` or `keras_hub.src`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__") \
                and not (isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")):
            found.append(ast.unparse(node))
        elif isinstance(node, ast.ImportFrom) and ".src" in f"{node.module}.":
            found.append(f"from {node.module}")
        elif isinstance(node, ast.Import):
            found += [f"import {alias.name}" for alias in node.names if ".src" in f"{alias.name}."]
    return found


def test_private_api_is_used_only_in_compat():
    assert sorted(private_uses("optimizer._momentums\nfrom keras.src import ops\nimport keras_hub.src\nself._own")) \
        == ["from keras.src", "import keras_hub.src", "optimizer._momentums"]
    package = os.path.join(ROOT, "kerasbert")
    outside = {os.path.relpath(path, ROOT): private_uses(open(path, encoding="utf-8").read())
               for path in glob.glob(os.path.join(package, "**", "*.py"), recursive=True)
               if not path.startswith(os.path.join(package, "compat") + os.sep)}
    assert {path: uses for path, uses in outside.items() if uses} == {}
