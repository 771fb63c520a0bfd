"""Call an exported kerasbert SavedModel from a plain TensorFlow program: no kerasbert, no Keras.

    python examples/load_saved_model.py --model saved_models/kerasbert/1 --text "A gripping film."

The graph tokenizes raw text itself with tf_text's WordPiece ops; importing
tensorflow_text registers them. Any TF program can do the same, and inside Keras:
`keras.layers.TFSMLayer(path, call_endpoint="embed")`.
"""

import argparse

parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
parser.add_argument("--model", required=True, help="A version folder: <export_base>/<N>.")
parser.add_argument("--text", action="append", required=True, help="A sentence (repeatable).")
args = parser.parse_args()

# After the flags, so that --help answers before TensorFlow loads; kerasbert.quiet only hides
# TensorFlow's C++ start-up lines (KERASBERT_VERBOSE=1 shows them): the model needs no kerasbert.
import numpy as np  # noqa: E402

from kerasbert.quiet import native_stderr_hidden  # noqa: E402

with native_stderr_hidden():
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  registers the ops the tokenizer in the graph uses

    tf.config.list_physical_devices()

np.set_printoptions(precision=3, suppress=True)

loaded = tf.saved_model.load(args.model)
print("signatures:", ", ".join(sorted(loaded.signatures)))
texts = tf.constant(args.text)

# 1. `embed`: one sentence embedding per text (mean of the token states).
embeddings = loaded.signatures["embed"](text=texts)["embedding"]
print("embed:", embeddings.shape, "cosine of the first and last text:",
      float(tf.reduce_sum(tf.math.l2_normalize(embeddings[0], -1) * tf.math.l2_normalize(embeddings[-1], -1))))

# 2. `serving_default`: the first task the model was exported with. A pair task's
# signature takes text_a and text_b: here each text is paired with itself.
default = loaded.signatures["serving_default"]
_, inputs = default.structured_input_signature
feed = {name: texts for name in inputs}  # {"text": ...} or {"text_a": ..., "text_b": ...}
for name, value in sorted(default(**feed).items()):
    print(f"serving_default {name}:", value.numpy())
