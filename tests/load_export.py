"""Loads exports in a process that imports only tensorflow and tensorflow_text, calls
every signature on the inputs given as JSON ({"b64": ...} for bytes), and prints the
outputs as JSON, a line per export in the order given.

    python tests/load_export.py EXPORT_DIR INPUTS_JSON [EXPORT_DIR INPUTS_JSON ...]
"""

import base64
import json
import sys

import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the tokenizer ops


def tensor(values):
    if isinstance(values[0], dict):
        return tf.constant([base64.b64decode(v["b64"]) for v in values], tf.string)
    return tf.constant(values, tf.string if isinstance(values[0], str) else tf.int32)


def jsonable(array):
    return [v.decode() for v in array.reshape(-1)] if array.dtype == object else array.tolist()


for export, inputs_json in zip(sys.argv[1::2], sys.argv[2::2]):
    loaded = tf.saved_model.load(export)
    with open(inputs_json) as f:
        calls = json.load(f)
    outputs = {}
    for name, inputs in calls.items():
        tensors = {key: tensor(value) for key, value in inputs.items()}
        outputs[name] = {key: jsonable(value.numpy()) for key, value in loaded.signatures[name](**tensors).items()}
    # TensorFlow may import keras itself; neither kerasbert nor keras-hub is needed to serve.
    assert not any(m.startswith(("kerasbert", "keras_hub")) for m in sys.modules), "needed kerasbert/keras_hub"
    print(json.dumps({"signatures": sorted(loaded.signatures.keys()), "outputs": outputs}))
