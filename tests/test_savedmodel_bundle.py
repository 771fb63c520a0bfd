"""A version loaded as TF Serving's SavedModelBundle: TF1- and TF2-written SavedModels, inputs
checked by name and dtype only (the graph judges shapes), a request's inputs that do not
share their rows run as one call, and `model.tflite` served with --prefer_tflite_model
(tensorflow_model_server_test.py: testPredictSavedModel, testPredictREST,
testPredictColumnarREST, testPredictOnTfLite, testPredictWithSignatureDefOnTfLite)."""

import json
import os
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tensorflow as tf

from serving_models import converted_half_plus_two, save_toy, with_signature_metadata


def save_tf1_half_plus_x(path: str, plus: float) -> None:
    """A SavedModel written by TF1's builder, as TF Serving's saved_model_half_plus_two.py
    writes half_plus_two and half_plus_three: `x` is no placeholder but the parsed feature of
    serialized tf.Examples (so of shape [None, 1]), fed directly by `serving_default` (y = 0.5 x
    + plus) and by `matmul` (x @ [[0.5]] + plus: x must be a matrix); `regress` takes the
    serialized Examples themselves (its `inputs`, a placeholder of shape [None]). As in TF
    Serving's half_plus_three, written by an older TF, the SignatureDefs hold no shapes."""
    graph = tf.Graph()
    with graph.as_default():
        examples = tf.compat.v1.placeholder(tf.string, shape=[None], name="tf_example")
        parsed = tf.io.parse_example(examples, {"x": tf.io.FixedLenFeature([1], tf.float32)})
        x = tf.identity(parsed["x"], name="x")  # (batch, 1)
        a = tf.compat.v1.get_variable("a", initializer=0.5)
        b = tf.compat.v1.get_variable("b", initializer=float(plus))
        y = tf.add(a * x, b, name="y")
        w = tf.compat.v1.get_variable("w", initializer=[[0.5]])
        z = tf.add(tf.matmul(x, w), b, name="z")
        with tf.compat.v1.Session(graph=graph) as session:
            session.run(tf.compat.v1.global_variables_initializer())
            builder = tf.compat.v1.saved_model.Builder(path)
            def info(tensor):
                tensor_info = tf.compat.v1.saved_model.build_tensor_info(tensor)
                tensor_info.ClearField("tensor_shape")
                return tensor_info

            signature = tf.compat.v1.saved_model.build_signature_def
            builder.add_meta_graph_and_variables(session, ["serve"], signature_def_map={
                "serving_default": signature({"x": info(x)}, {"y": info(y)}, "tensorflow/serving/predict"),
                "matmul": signature({"x": info(x)}, {"y": info(z)}, "tensorflow/serving/predict"),
                "regress": signature({"inputs": info(examples)}, {"outputs": info(y)}, "tensorflow/serving/regress")})
            builder.save()


def test_a_tf1_savedmodel_loads_and_runs_each_signature(tmp_path):
    """testPredictSavedModel's saved_model_half_plus_three (TF1-written, an intermediate tensor
    fed): tf.saved_model.load refused it ("Shapes must be equal rank")."""
    from serving.classify_regress import regress
    from serving.servable import Servable
    from tensorflow_serving.apis import input_pb2

    save_tf1_half_plus_x(str(tmp_path / "1"), plus=3.0)
    servable = Servable("half_plus_three", 1, str(tmp_path / "1"))
    assert servable.signature_names() == ["matmul", "regress", "serving_default"]
    x = servable.check_inputs("serving_default", {"x": [[2.0], [3.0]]})
    assert servable.run("serving_default", x)["y"].tolist() == [[4.0], [4.5]]
    request = input_pb2.Input()
    request.example_list.examples.add().features.feature["x"].float_list.value.append(2.0)
    assert regress(servable, "regress", request).regressions[0].value == 4.0


def test_shapes_are_the_graphs_to_judge(tmp_path):
    """predict_util.cc checks names and dtypes; a placeholder's declared [None, 1] takes [1],
    [3] and [2, 2, 2] where the graph can (elementwise), and a shape the graph cannot take
    fails in the op, with its own INVALID_ARGUMENT."""
    import grpc

    from serving.servable import Servable
    from serving.status import InvalidArgument, grpc_code

    save_tf1_half_plus_x(str(tmp_path / "1"), plus=2.0)
    servable = Servable("half_plus_two", 1, str(tmp_path / "1"))
    assert servable.loaded.graph.get_tensor_by_name("x:0").shape.as_list() == [None, 1]
    for x in ([2.0], [2.0, 3.0, 4.0], np.full((2, 2, 2), 2.0)):
        y = servable.run("serving_default", servable.check_inputs("serving_default", {"x": x}))["y"]
        np.testing.assert_allclose(y, np.asarray(x) * 0.5 + 2)
    with pytest.raises(InvalidArgument, match="must be 'float'|Cannot convert|could not convert"):
        servable.check_inputs("serving_default", {"x": np.array([b"a"], object)})  # a dtype is still checked
    with pytest.raises(Exception) as refused:
        servable.run("matmul", servable.check_inputs("matmul", {"x": [2.0, 3.0]}))  # a vector to MatMul
    assert grpc_code(refused.value) == grpc.StatusCode.INVALID_ARGUMENT
    assert "In[0]" in str(refused.value)  # MatMul's own words (they differ by kernel)


def test_inputs_of_different_rows_are_one_call_without_batching(tmp_path):
    """api_rest.md: the columnar format is for inputs that do not share a batch size. A request
    whose inputs differ in their 0th dimension is one model call, even where its rows would
    be sliced; the graph broadcasts (or refuses) them."""
    from serving.session import DirectSession, ModelWorkLimits
    from serving.servable import Servable
    from serving.status import TensorFlowError

    save_toy(str(tmp_path / "1"), scale=2.0)
    servable = Servable("toy", 1, str(tmp_path / "1"))
    session = DirectSession(ModelWorkLimits(max_execution_batch_size=2))
    a, b = np.arange(5, dtype=np.int64), np.array([0.5])
    np.testing.assert_allclose(session.run(servable, "pair", {"a": a, "b": b})["sum"], a + 1.0)
    with pytest.raises(TensorFlowError, match="Incompatible shapes"):  # [5] + [3]: the op refuses
        session.run(servable, "pair", {"a": a, "b": np.ones(3)})


@pytest.mark.parametrize("metadata", [False, True])
def test_a_tflite_model_is_served_with_prefer_tflite_model(tmp_path, metadata):
    import grpc
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    from serving.process import LocalServer

    model = converted_half_plus_two()
    if metadata:
        model = with_signature_metadata(model, alias="x")
    os.makedirs(tmp_path / "m" / "123")
    (tmp_path / "m" / "123" / "model.tflite").write_bytes(model)  # the folder holds no SavedModel
    with LocalServer("default", str(tmp_path / "m"), log_path=str(tmp_path / "server.log"),
                     extra_flags=["--prefer_tflite_model=true", "--num_tflite_pools=2"]) as server:
        assert server.wait_for_version(123) == 123
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "default"
        request.inputs["x"].CopyFrom(tf.make_tensor_proto([2.0], tf.float32))  # [1]: the model's is [1, 1]
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            result = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=30)
        output = "y" if metadata else "Identity"  # without metadata, outputs are named by their tensors
        assert tf.make_ndarray(result.outputs[output]).tolist() == [3.0]
        assert result.model_spec.version.value == 123
        body = json.dumps({"instances": [[2.0], [4.0]]}).encode()
        with urllib.request.urlopen(urllib.request.Request(server.url(":predict"), body), timeout=30) as response:
            assert json.loads(response.read()) == {"predictions": [[3.0], [4.0]]}
    if not metadata:
        assert "No signature def found in TFLite model. Generating one." in (tmp_path / "server.log").read_text()


def test_rest_and_grpc_take_what_the_graph_takes(tmp_path):
    """testPredictSavedModel (gRPC x: [1]) and testPredictREST ({"instances": [2.0, 3.0, 4.0]})
    on a [None, 1] input; a shape the graph refuses is a 400 carrying the op's message."""
    import grpc
    from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

    from serving.process import LocalServer

    save_tf1_half_plus_x(str(tmp_path / "m" / "123"), plus=2.0)
    with LocalServer("default", str(tmp_path / "m"), log_path=str(tmp_path / "server.log")) as server:
        server.wait_for_version(123)
        request = predict_pb2.PredictRequest()
        request.model_spec.name = "default"
        request.inputs["x"].CopyFrom(tf.make_tensor_proto([2.0], tf.float32))
        request.output_filter.append("y")
        with grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}") as channel:
            result = prediction_service_pb2_grpc.PredictionServiceStub(channel).Predict(request, timeout=30)
        assert tf.make_ndarray(result.outputs["y"]).tolist() == [3.0]

        def predict(document):
            body = json.dumps(document).encode()
            try:
                with urllib.request.urlopen(urllib.request.Request(server.url(":predict"), body), timeout=30) as answer:
                    return answer.status, json.loads(answer.read())
            except urllib.error.HTTPError as error:
                return error.code, json.loads(error.read())

        assert predict({"instances": [2.0, 3.0, 4.0]}) == (200, {"predictions": [3.0, 3.5, 4.0]})
        assert predict({"inputs": {"x": [[2.0], [3.0]]}}) == (200, {"outputs": [[3.0], [3.5]]})
        status, answer = predict({"signature_name": "matmul", "instances": [2.0, 3.0]})
        assert status == 400 and "In[0]" in answer["error"], answer

        # 8 MB of {"instances": [0, 0, ...]} (4M rows) to this [None, 1] input, as TF Serving's
        # half_plus_two takes it: 200, every row answered (test_hostile's finding 9: was a 504 after
        # 30 s at default flags, writing 4M floats took 16 s). Its seconds: printed (pytest -s).
        rows = 4 << 20
        started = time.monotonic()
        request = urllib.request.Request(server.url(":predict"), b'{"instances": [' + b",".join([b"0"] * rows) + b"]}")
        with urllib.request.urlopen(request, timeout=120) as answer:
            text = answer.read()
        print(f"\n4M rows of 0 answered 200 in {time.monotonic() - started:.2f} s")
        assert text.startswith(b'{"predictions": [2.0, 2.0') and text.count(b",") == rows - 1
