"""Small plain-TF SavedModels for the serving tests and serving/'s docstring examples
(numeric, string, several inputs, and tf.Example classify/regress signatures), and one
TFLite model."""

import os
import time
import warnings

import tensorflow as tf

from kerasbert.export import set_signature_methods

EXAMPLES = tf.TensorSpec([None], tf.string, name="inputs")


class RaggedRows(tf.Module):
    """Signatures whose rows differ in width (the server joins sliced outputs)."""

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


class Toy(RaggedRows):
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


def converted_half_plus_two() -> bytes:
    """y = 0.5 x + 2 as a TFLite flatbuffer, x of shape [1, 1], no SignatureDef metadata."""
    function = tf.function(lambda x: {"y": 0.5 * x + 2.0}, input_signature=[tf.TensorSpec([1, 1], tf.float32, "x")])
    converter = tf.lite.TFLiteConverter.from_concrete_functions([function.get_concrete_function()])
    return converter.convert()


def with_signature_metadata(model: bytes, alias: str) -> bytes:
    """`model` with a `signature_defs_metadata` buffer (as TFLite's signature_def_util writes
    it): serving_default, input `alias` naming the model's input tensor with TF's `:0`."""
    import flatbuffers
    import flatbuffers.flexbuffers as flexbuffers
    from tensorflow.lite.python import schema_py_generated as schema

    with warnings.catch_warnings():  # tf.lite.Interpreter's notice of ai_edge_litert
        warnings.simplefilter("ignore")
        interpreter = tf.lite.Interpreter(model_content=model)
    signature = tf.compat.v1.saved_model.build_signature_def(method_name="tensorflow/serving/predict")
    signature.inputs[alias].name = interpreter.get_input_details()[0]["name"] + ":0"
    signature.inputs[alias].dtype = tf.float32.as_datatype_enum
    signature.outputs["y"].name = interpreter.get_output_details()[0]["name"] + ":0"
    signature.outputs["y"].dtype = tf.float32.as_datatype_enum
    tree = schema.ModelT.InitFromObj(schema.Model.GetRootAsModel(model, 0))
    data = schema.BufferT()
    data.data = list(flexbuffers.Dumps({"serving_default": signature.SerializeToString()}))
    tree.buffers.append(data)
    metadata = schema.MetadataT()
    metadata.name, metadata.buffer = "signature_defs_metadata", len(tree.buffers) - 1
    tree.metadata = (tree.metadata or []) + [metadata]
    builder = flatbuffers.Builder(1024)
    builder.Finish(tree.Pack(builder), file_identifier=b"TFL3")
    return bytes(builder.Output())


def save_half_plus_two_tflite(path):
    """Version folder `path` holding only a `model.tflite`: y = 0.5 x + 2, with a serving_default
    SignatureDef (input x, output y) in its metadata, as TF Serving's
    saved_model_half_plus_two_tflite has."""
    os.makedirs(path, exist_ok=True)
    with open(os.path.join(path, "model.tflite"), "wb") as f:
        f.write(with_signature_metadata(converted_half_plus_two(), alias="x"))


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


class Hostile(RaggedRows):
    """Signatures an attacker's requests are aimed at: one whose output has no batch dimension
    (a sum over rows), one per row, two inputs, and one that costs CPU time per row."""

    def __init__(self, burn_rounds=2000):
        super().__init__()
        self.burn_rounds = burn_rounds

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
        """Milliseconds of CPU per run of 16 rows (burn_rounds products of [rows, 64] x [64, 64])."""
        weights = tf.eye(64) * 0.5
        y = tf.while_loop(lambda i, h: i < self.burn_rounds, lambda i, h: (i + 1, tf.tanh(tf.matmul(h, weights)) + x),
                          (tf.constant(0), x))[1]
        return {"y": tf.reduce_sum(y, axis=1)}

    @tf.function(input_signature=[EXAMPLES])
    def classify(self, inputs):
        x = tf.io.parse_example(inputs, {"x": tf.io.FixedLenFeature([2], tf.float32)})["x"]
        return {"classes": tf.tile(tf.constant([["neg", "pos"]]), [tf.shape(inputs)[0], 1]), "scores": x}


def burn_rounds_for(seconds, rows):
    """The burn_rounds at which `burn` takes about `seconds` of CPU on `rows` rows on this
    machine (machines here differ 2-4x; a test that needs work longer than a deadline but
    slices shorter than its waits sets the work by the machine it runs on). CPU seconds, not
    the clock's: measured while the suite's other worker kept the cores busy, the clock-set
    work once ended before the deadline. Its threads share the work, so a slice's wall time
    is at most its CPU time."""
    model, x = Hostile(), tf.fill([rows, 64], 0.5)
    model.burn(x)  # traced
    start = time.process_time()
    model.burn(x)
    return max(2000, round(2000 * seconds / (time.process_time() - start)))


def save_hostile(path, burn_rounds=2000):
    model = Hostile(burn_rounds)
    tf.saved_model.save(model, path, signatures={name: getattr(model, name) for name in
                                                 ("sum_rows", "double", "pair", "burn", "classify", "words", "ids")})
