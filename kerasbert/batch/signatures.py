"""What a SavedModel's signature takes, read from saved_model.pb without loading the model.

Example:
    >>> string_inputs(export_dir, "paraphrase")  # e.g. saved_models/kerasbert/3
    ('text_a', 'text_b')
"""

from __future__ import annotations

import os

from kerasbert.errors import ConfigError

# TF Serving's :classify and :regress take serialized tf.Examples, not text.
_EXAMPLE_METHODS = ("tensorflow/serving/classify", "tensorflow/serving/regress")


def signature_def(model_dir: str, signature: str):
    from tensorflow.core.protobuf import saved_model_pb2

    path = os.path.join(model_dir, "saved_model.pb")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{model_dir}: not a SavedModel version folder (no saved_model.pb)")
    saved_model = saved_model_pb2.SavedModel()
    with open(path, "rb") as f:
        saved_model.ParseFromString(f.read())
    signatures = saved_model.meta_graphs[0].signature_def
    if signature not in signatures:
        names = sorted(name for name in signatures if not name.startswith("__"))
        raise ConfigError(f"{model_dir} has no signature {signature!r}; it has: {', '.join(names)}")
    return signatures[signature]


def string_inputs(model_dir: str, signature: str) -> tuple[str, ...]:
    """The signature's inputs, in order (text before text_b), all of them strings; a
    ValueError for a signature that takes token ids or tf.Examples."""
    from tensorflow.core.framework import types_pb2

    definition = signature_def(model_dir, signature)
    if definition.method_name in _EXAMPLE_METHODS:
        raise ConfigError(f"signature {signature!r} takes serialized tf.Examples (TF Serving's :classify or "
                         f":regress); batch prediction takes a text signature (without the suffix)")
    names = tuple(sorted(definition.inputs))
    not_text = [name for name in names if definition.inputs[name].dtype != types_pb2.DT_STRING]
    if not_text:
        raise ConfigError(f"signature {signature!r} takes token ids ({', '.join(not_text)}); batch prediction "
                         f"takes a signature with text inputs (without _tokens)")
    return names
