"""Loads an export in a process that imports only tensorflow and tensorflow_text, calls
every signature on the inputs given as JSON, and prints the outputs as JSON.

    python tests/load_export.py EXPORT_DIR INPUTS_JSON
"""

import json
import sys

import tensorflow as tf
import tensorflow_text  # noqa: F401  registers the tokenizer ops

loaded = tf.saved_model.load(sys.argv[1])
with open(sys.argv[2]) as f:
    calls = json.load(f)
outputs = {}
for name, inputs in calls.items():
    tensors = {key: tf.constant(value, tf.string if isinstance(value[0], str) else tf.int32)
               for key, value in inputs.items()}
    outputs[name] = {key: value.numpy().tolist() for key, value in loaded.signatures[name](**tensors).items()}
# TensorFlow may import keras itself; neither kerasbert nor keras-hub is needed to serve.
assert not any(m.startswith(("kerasbert", "keras_hub")) for m in sys.modules), "needed kerasbert/keras_hub"
print(json.dumps({"signatures": sorted(loaded.signatures.keys()), "outputs": outputs}))
