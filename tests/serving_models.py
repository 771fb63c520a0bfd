"""Small plain-TF SavedModels for the serving tests (numeric, string, several inputs)."""

import tensorflow as tf


class Toy(tf.Module):
    def __init__(self, scale):
        super().__init__()
        self.scale = tf.Variable(float(scale))

    @tf.function(input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
    def numeric(self, x):
        rows = tf.shape(x)[0]
        return {"y": x * self.scale, "rows": tf.fill([rows], tf.cast(rows, tf.int64))}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def strings(self, text):
        return {"length": tf.strings.length(text, unit="UTF8_CHAR"), "upper_bytes": tf.strings.upper(text)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.int64, name="a"),
                                  tf.TensorSpec([None], tf.float64, name="b")])
    def pair(self, a, b):
        return {"sum": tf.cast(a, tf.float64) + b * tf.cast(self.scale, tf.float64)}


def save_toy(path, scale):
    """Version folder `path` whose signatures scale by `scale` (so versions are distinguishable)."""
    toy = Toy(scale)
    tf.saved_model.save(toy, path, signatures={"serving_default": toy.numeric, "strings": toy.strings,
                                               "pair": toy.pair})
