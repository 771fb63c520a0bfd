"""Small plain-TF SavedModels for the serving tests (numeric, string, several inputs,
and tf.Example classify/regress signatures)."""

import tensorflow as tf

from kerasbert.export import set_signature_methods

EXAMPLES = tf.TensorSpec([None], tf.string, name="inputs")


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

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="ids")])
    def ids(self, ids):
        return {"total": tf.reduce_sum(ids, axis=1)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def words(self, text):
        """Outputs as wide as the call's most words, padded as kerasbert's `entities` pads its
        own: "" for strings, -1 for integers, 0 for floats."""
        words = tf.strings.split(text)
        return {"word": words.to_tensor(default_value=""),
                "length": tf.strings.length(words).to_tensor(default_value=-1),
                "score": tf.cast(tf.strings.length(words), tf.float32).to_tensor(default_value=0.0),
                "count": words.row_lengths()}

    @tf.function(input_signature=[EXAMPLES])
    def classify(self, inputs):
        """Examples with float feature x (2 values) -> classes neg/pos, scores softmax(x * scale)."""
        x = tf.io.parse_example(inputs, {"x": tf.io.FixedLenFeature([2], tf.float32)})["x"]
        classes = tf.tile(tf.constant([["neg", "pos"]]), [tf.shape(inputs)[0], 1])
        return {"classes": classes, "scores": tf.nn.softmax(x * self.scale)}

    @tf.function(input_signature=[EXAMPLES])
    def regress(self, inputs):
        """Examples with float x (2 values), int64 bias (default 0) -> sum(x) * scale + bias."""
        features = tf.io.parse_example(inputs, {"x": tf.io.FixedLenFeature([2], tf.float32),
                                                "bias": tf.io.FixedLenFeature([], tf.int64, default_value=0)})
        return {"outputs": tf.reduce_sum(features["x"], -1) * self.scale + tf.cast(features["bias"], tf.float32)}


def save_toy(path, scale):
    """Version folder `path` whose signatures scale by `scale` (so versions are distinguishable)."""
    toy = Toy(scale)
    tf.saved_model.save(toy, path, signatures={"serving_default": toy.numeric, "strings": toy.strings,
                                               "pair": toy.pair, "classify": toy.classify,
                                               "regress": toy.regress})
    set_signature_methods(path, {"classify": "tensorflow/serving/classify", "regress": "tensorflow/serving/regress"})


class Counted(tf.Module):
    """Counts its calls in a variable, so a test can see whether warm-up ran."""

    def __init__(self):
        super().__init__()
        self.calls = tf.Variable(0, dtype=tf.int64)

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def identity(self, x):
        self.calls.assign_add(1)
        return {"y": x}

    @tf.function(input_signature=[])
    def count(self):
        return {"calls": self.calls.read_value()}


class HalfPlusTwo(tf.Module):
    """TF Serving's test model `half_plus_two` (y = 0.5 x + 2), saved as any TF2 program
    saves it: every signature's method_name is predict (no rewrite)."""

    def __init__(self):
        super().__init__()
        self.a, self.b = tf.Variable(0.5), tf.Variable(2.0)

    @tf.function(input_signature=[tf.TensorSpec(None, tf.float32, name="x")])
    def predict(self, x):
        return {"y": self.a * x + self.b}

    def _x(self, inputs):
        return tf.io.parse_example(inputs, {"x": tf.io.FixedLenFeature([1], tf.float32)})["x"]  # (batch, 1)

    @tf.function(input_signature=[EXAMPLES])
    def classify_x_to_y(self, inputs):
        return {"scores": self.a * self._x(inputs) + self.b}

    @tf.function(input_signature=[EXAMPLES])
    def regress_x_to_y(self, inputs):
        return {"outputs": self.a * self._x(inputs) + self.b}


def save_half_plus_two(path):
    model = HalfPlusTwo()
    tf.saved_model.save(model, path, signatures={"serving_default": model.predict,
                                                 "classify_x_to_y": model.classify_x_to_y,
                                                 "regress_x_to_y": model.regress_x_to_y})


class Echo(tf.Module):
    """Returns its inputs: what TF Serving's json_tensor_test.cc feeds its parser, run
    through a real server and back (one signature per input map of those tests)."""

    def _echo(dtype, *names):
        specs = [tf.TensorSpec(None, dtype if not isinstance(dtype, tuple) else dtype[i], name=name)
                 for i, name in enumerate(names)]

        @tf.function(input_signature=specs)
        def echo(self, *tensors):
            return {f"{name}_bytes" if spec.dtype == tf.string else name: tf.identity(tensor)
                    for name, spec, tensor in zip(names, specs, tensors)}
        return echo

    int32 = _echo(tf.int32, "default")
    float = _echo(tf.float32, "default")
    double = _echo(tf.float64, "default")
    bytes = _echo(tf.string, "default")
    named = _echo((tf.int32, tf.string), "int_tensor", "str_tensor")
    named_b64 = _echo((tf.string, tf.int32), "str_tensor", "int_tensor")
    del _echo


def save_echo(path):
    echo = Echo()
    tf.saved_model.save(echo, path, signatures={name: getattr(echo, name) for name in
                                                ("int32", "float", "double", "bytes", "named", "named_b64")})


class Hostile(tf.Module):
    """Signatures an attacker's requests are aimed at: one whose output has no batch dimension
    (a sum over rows), one per row, two inputs, and one that costs CPU time per row."""

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def sum_rows(self, x):
        return {"total": tf.reduce_sum(x)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="x")])
    def double(self, x):
        return {"y": x * 2.0}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.float32, name="a"),
                                  tf.TensorSpec([None], tf.float32, name="b")])
    def pair(self, a, b):
        return {"y": a * 2.0}

    @tf.function(input_signature=[tf.TensorSpec([None, 64], tf.float32, name="x")])
    def burn(self, x):
        """Milliseconds of CPU per run of 16 rows (2000 products of [rows, 64] x [64, 64])."""
        weights = tf.eye(64) * 0.5
        y = tf.while_loop(lambda i, h: i < 2000, lambda i, h: (i + 1, tf.tanh(tf.matmul(h, weights)) + x),
                          (tf.constant(0), x))[1]
        return {"y": tf.reduce_sum(y, axis=1)}

    @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name="ids")])
    def ids(self, ids):
        return {"total": tf.reduce_sum(ids, axis=1)}

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name="text")])
    def words(self, text):
        """Outputs as wide as the call's most words, padded as kerasbert's `entities` pads its
        own: "" for strings, -1 for integers, 0 for floats."""
        words = tf.strings.split(text)
        return {"word": words.to_tensor(default_value=""),
                "length": tf.strings.length(words).to_tensor(default_value=-1),
                "score": tf.cast(tf.strings.length(words), tf.float32).to_tensor(default_value=0.0),
                "count": words.row_lengths()}

    @tf.function(input_signature=[EXAMPLES])
    def classify(self, inputs):
        x = tf.io.parse_example(inputs, {"x": tf.io.FixedLenFeature([2], tf.float32)})["x"]
        return {"classes": tf.tile(tf.constant([["neg", "pos"]]), [tf.shape(inputs)[0], 1]), "scores": x}


def save_hostile(path):
    model = Hostile()
    tf.saved_model.save(model, path, signatures={name: getattr(model, name) for name in
                                                 ("sum_rows", "double", "pair", "burn", "classify", "words", "ids")})
