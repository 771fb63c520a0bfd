"""TF Serving conformance: what its own tests assert, asked of `python -m serving` over real
HTTP and gRPC on loopback. Each case names the file and test of tensorflow/serving it comes
from (paths under tensorflow_serving/).

The models: TF Serving's test model half_plus_two (y = 0.5 x + 2), saved as an ordinary TF2
program saves it (every signature's method_name is predict), under the name, version (123)
and label its tests use; and `echo`, whose signatures return their inputs, one for each
input map of util/json_tensor_test.cc, so what its parser tests assert shows in the answer.
"""

import http.client
import json

import pytest

from serving_models import save_echo, save_half_plus_two

M = "saved_model_half_plus_two_2_versions"  # kTestModelName
HANDLER = "model_servers/http_rest_api_handler_test.cc"
JSON_TENSOR = "util/json_tensor_test.cc"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from serving.process import LocalServer

    root = tmp_path_factory.mktemp("conformance")
    for version in (123, 124):
        save_half_plus_two(str(root / "half_plus_two" / str(version)))
    save_echo(str(root / "echo" / "1"))
    config = root / "models.config"
    config.write_text(f'model_config_list {{ config {{ name: "{M}" base_path: "{root / "half_plus_two"}" '
                      'model_platform: "tensorflow" model_version_policy { specific { versions: 123 } } '
                      'version_labels { key: "Version_Label" value: 123 } } '
                      f'config {{ name: "echo" base_path: "{root / "echo"}" model_platform: "tensorflow" }} }}')
    with LocalServer(M, config_file=str(config), log_path=str(root / "server.log"),
                     extra_flags=["--allow_version_labels_for_unavailable_models"]) as local:
        local.wait_for_version(123)
        yield local


def call(server, method, path, body=None, headers=None):
    """(status, content type, body text) of one request on a fresh connection."""
    connection = http.client.HTTPConnection("127.0.0.1", server.rest_port, timeout=60)
    data = body.encode("utf-8", "surrogateescape") if isinstance(body, str) else body
    connection.request(method, path, data, headers or {})
    response = connection.getresponse()
    raw = response.read()
    connection.close()
    return response.status, response.getheader("Content-Type"), raw.decode("utf-8", "replace")


class Text(str):
    """An expected answer compared as text, white space removed (TF Serving's number format)."""


def echo(signature, document):
    return json.dumps({"signature_name": signature, **document})


DEEP = "[" * 500_000 + "]" * 500_000


# (source, method, path, body, HTTP status, substring of the error message or expected JSON)
CASES = [
    # UnsupportedApiCalls: every path the handler cannot parse is INVALID_ARGUMENT (400).
    (f"{HANDLER}: UnsupportedApiCalls", "GET", "/v1/foo", None, 400, "Malformed request"),
    (f"{HANDLER}: UnsupportedApiCalls", "POST", "/v1/foo", "", 400, "Malformed request"),
    (f"{HANDLER}: UnsupportedApiCalls", "GET", "/v1/models", None, 400, "Missing model name"),
    (f"{HANDLER}: UnsupportedApiCalls", "GET", "/v1/models/debug/model_name", None, 400, "Malformed request"),
    (f"{HANDLER}: UnsupportedApiCalls", "POST", "/v1/models", "", 400, "Malformed request"),
    (f"{HANDLER}: UnsupportedApiCalls", "GET", "/v1/models/foo:predict", None, 400, "Malformed request"),
    (f"{HANDLER}: UnsupportedApiCalls", "GET", "/v1/models/foo/version/50:predict", None, 400,
     "Malformed request"),
    (f"{HANDLER}: UnsupportedApiCalls", "POST", "/v1/models/foo/version/50:regress", "", 400,
     "Malformed request"),
    (f"{HANDLER}: UnsupportedApiCalls", "POST", "/v1/models/foo/versions/HELLO:regress", "", 400,
     "Malformed request"),
    (f"{HANDLER}: UnsupportedApiCalls", "POST", "/v1/models/foo/versions/18446744073709551615:regress", "",
     400, "Failed to convert version"),
    (f"{HANDLER}: UnsupportedApiCalls", "POST", "/v1/models/foo/metadata", "", 400, "Malformed request"),
    (f"{HANDLER}: UnsupportedApiCalls", "POST", "/v1/models/foo/label/some_label:regress", "", 400,
     "Malformed request"),
    (f"{HANDLER}: UnsupportedApiCalls", "POST", "/v1/models/foo/versions/50/labels/some_label:regress", "",
     400, "Malformed request"),
    (f"{HANDLER}: UnsupportedApiCalls", "POST", "/v1/models/foo/versions/some_label:regress", "", 400,
     "Malformed request"),
    # PredictModelNameVersionErrors: NOT_FOUND (404).
    (f"{HANDLER}: PredictModelNameVersionErrors", "POST", "/v1/models/foo:predict", '{ "instances": [1] }',
     404, "Servable not found"),
    (f"{HANDLER}: PredictModelNameVersionErrors", "POST", "/v1/models/foo/versions/50:predict",
     '{ "instances": [1] }', 404, "Servable not found"),
    (f"{HANDLER}: PredictModelNameVersionErrors", "POST", f"/v1/models/{M}99:predict", '{ "instances": [1] }',
     404, "Servable not found"),
    (f"{HANDLER}: PredictModelNameVersionErrors (a version not served)", "POST",
     f"/v1/models/{M}/versions/124:predict", '{ "instances": [1] }', 404, "Servable not found"),
    # PredictRequestErrors.
    (f"{HANDLER}: PredictRequestErrors", "POST", f"/v1/models/{M}:predict", "", 400,
     "JSON Parse error: The document is empty"),
    (f"{HANDLER}: PredictRequestErrors", "POST", f"/v1/models/{M}:predict", "instances = [1, 2]", 400,
     "JSON Parse error: Invalid value"),
    (f"{HANDLER}: PredictRequestErrors", "POST", f"/v1/models/{M}:predict", '{ "instances": ["x", "y"] }', 400,
     "not of expected type: float"),
    (f"{HANDLER}: PredictRequestErrors", "POST", f"/v1/models/{M}/labels/Version_Nonexistent:predict",
     '{ "instances": ["x", "y"] }', 400, "Unrecognized servable version label"),
    (f"{HANDLER}: PredictRequestErrors", "POST", f"/v1/models/{M}:predict", '{ "signature_name": 100 }', 400,
     "'signature_name' key must be a string value."),
    # Predict: row and columnar, latest, version, label, explicit signature.
    (f"{HANDLER}: Predict", "POST", f"/v1/models/{M}:predict", '{"instances": [[1.0, 2.0], [3.0, 4.0]]}', 200,
     {"predictions": [[2.5, 3.0], [3.5, 4.0]]}),
    (f"{HANDLER}: Predict", "POST", f"/v1/models/{M}/versions/123:predict", '{"instances": [1.0, 2.0]}', 200,
     {"predictions": [2.5, 3.0]}),
    (f"{HANDLER}: Predict", "POST", f"/v1/models/{M}/labels/Version_Label:predict", '{"instances": [1.0, 2.0]}',
     200, {"predictions": [2.5, 3.0]}),
    (f"{HANDLER}: Predict", "POST", f"/v1/models/{M}/versions/123:predict",
     '{"signature_name": "serving_default", "instances": [3.0, 4.0]}', 200, {"predictions": [3.5, 4.0]}),
    (f"{HANDLER}: Predict", "POST", f"/v1/models/{M}/versions/123:predict",
     '{"signature_name": "serving_default", "inputs": [3.0, 4.0]}', 200, {"outputs": [3.5, 4.0]}),
    # Regress and Classify on signatures whose method_name is predict (TF2): TF Serving checks
    # method names only under --enable_signature_method_name_check (default false).
    (f"{HANDLER}: Regress", "POST", f"/v1/models/{M}:regress",
     '{"signature_name": "regress_x_to_y", "examples": [ { "x": 80.0 } ] }', 200, {"results": [42]}),
    (f"{HANDLER}: Regress", "POST", f"/v1/models/{M}/versions/123:regress",
     '{"signature_name": "regress_x_to_y", "examples": [ { "x": 80.0 } ] }', 200, {"results": [42]}),
    (f"{HANDLER}: Regress", "POST", f"/v1/models/{M}/labels/Version_Label:regress",
     '{"signature_name": "regress_x_to_y", "examples": [ { "x": 80.0 } ] }', 200, {"results": [42]}),
    (f"{HANDLER}: Classify", "POST", f"/v1/models/{M}:classify",
     '{"signature_name": "classify_x_to_y", "examples": [ { "x": 20.0 } ] }', 200, {"results": [[["", 12]]]}),
    (f"{HANDLER}: Classify", "POST", f"/v1/models/{M}/labels/Version_Label:classify",
     '{"signature_name": "classify_x_to_y", "examples": [ { "x": 10.0 } ] }', 200, {"results": [[["", 7]]]}),
    # GetStatus: latest, version, label.
    *[(f"{HANDLER}: GetStatus", "GET", f"/v1/models/{M}{suffix}", None, 200,
       {"model_version_status": [{"version": "123", "state": "AVAILABLE",
                                  "status": {"error_code": "OK", "error_message": ""}}]})
      for suffix in ("", "/versions/123", "/labels/Version_Label")],
]


E = "/v1/models/echo:predict"
CASES += [
    # Request parsing (FillPredictRequestFromJson), seen through the echo signatures.
    (f"{JSON_TENSOR}: SingleUnnamedTensor", "POST", E, echo("int32", {"instances": [[1, 2], [3, 4], [5, 6]]}),
     200, {"predictions": [[1, 2], [3, 4], [5, 6]]}),
    (f"{JSON_TENSOR}: DeeplyNestedWellFormed", "POST", E,
     '{"signature_name": "int32", "instances": [1], "nested": ' + DEEP + "}", 200, {"predictions": [1]}),
    (f"{JSON_TENSOR}: DeeplyNestedMalformed", "POST", E, '{"signature_name": ' + DEEP + "}", 400,
     "key must be a string value"),
    (f"{JSON_TENSOR}: MixedInputForFloatTensor", "POST", E,
     echo("float", {"instances": [1, 2.0, 3, 4, 5.003, 0.007, 0.0]}), 200,
     Text('{"predictions": [1.0, 2.0, 3.0, 4.0, 5.003, 0.007, 0.0]}')),
    (f"{JSON_TENSOR}: MixedInputForDoubleTensor", "POST", E,
     echo("double", {"instances": [8, 9.0, 10, 11, 12.001, 0.005, 0.0]}), 200,
     Text('{"predictions": [8.0, 9.0, 10.0, 11.0, 12.001, 0.005, 0.0]}')),
    (f"{JSON_TENSOR}: FloatTensorWithPrecisionLoss", "POST", E,
     '{"signature_name": "float", "instances": [1435774380, 1435774380.0]}', 200,
     Text('{"predictions": [1.43577434e+09, 1.43577434e+09]}')),  # float32 1435774336: 9 digits
    (f"{JSON_TENSOR}: FloatTensorThatExceedsMaxReturnsInf", "POST", E,
     '{"signature_name": "float", "instances": [1.79769e+308, -1.79769e+308]}', 200,
     Text('{"predictions": [Infinity, -Infinity]}')),
    (f"{JSON_TENSOR}: FloatTensorThatExceedsMinReturnsZero", "POST", E,
     '{"signature_name": "float", "instances": [2.22507e-308, -2.22507e-308]}', 200,
     Text('{"predictions": [0.0, -0.0]}')),
    (f"{JSON_TENSOR}: SingleUnnamedTensorBase64Scalars", "POST", E,
     echo("bytes", {"instances": [{"b64": "aGVsbG8="}, {"b64": "d29ybGQ="}]}), 200,
     {"predictions": [{"b64": "aGVsbG8="}, {"b64": "d29ybGQ="}]}),
    (f"{JSON_TENSOR}: SingleUnnamedTensorBase64Lists", "POST", E,
     echo("bytes", {"instances": [[{"b64": "aGVsbG8="}, {"b64": "d29ybGQ="}], [{"b64": "dGhlcmU="},
                                                                               {"b64": "Zm9v"}]]}), 200,
     {"predictions": [[{"b64": "aGVsbG8="}, {"b64": "d29ybGQ="}], [{"b64": "dGhlcmU="}, {"b64": "Zm9v"}]]}),
    (f"{JSON_TENSOR}: SingleNamedTensorBase64", "POST", E,
     echo("named_b64", {"instances": [{"str_tensor": {"b64": "aGVsbG8="}, "int_tensor": 1}]}), 200,
     {"predictions": [{"str_tensor_bytes": {"b64": "aGVsbG8="}, "int_tensor": 1}]}),
    (f"{JSON_TENSOR}: MultipleNamedTensor", "POST", E,
     echo("named", {"instances": [{"int_tensor": [[1, 2], [3, 4]], "str_tensor": ["foo", "bar"]},
                                  {"int_tensor": [[5, 6], [7, 8]], "str_tensor": ["baz", "bat"]}]}), 200,
     {"predictions": [{"int_tensor": [[1, 2], [3, 4]], "str_tensor_bytes": [{"b64": "Zm9v"}, {"b64": "YmFy"}]},
                      {"int_tensor": [[5, 6], [7, 8]], "str_tensor_bytes": [{"b64": "YmF6"}, {"b64": "YmF0"}]}]}),
    (f"{JSON_TENSOR}: SingleUnnamedTensorColumnarFormat", "POST", E,
     echo("int32", {"inputs": [[1, 2], [3, 4], [5, 6]]}), 200, {"outputs": [[1, 2], [3, 4], [5, 6]]}),
    (f"{JSON_TENSOR}: MultipleNamedTensorColumnarFormat", "POST", E,
     echo("named", {"inputs": {"int_tensor": [[1, 2], [3, 4]], "str_tensor": ["foo", "bar"]}}), 200,
     {"outputs": {"int_tensor": [[1, 2], [3, 4]], "str_tensor_bytes": [{"b64": "Zm9v"}, {"b64": "YmFy"}]}}),
    # SingleUnnamedTensorErrors.
    (f"{JSON_TENSOR}: SingleUnnamedTensorErrors", "POST", E, "", 400, "document is empty"),
    (f"{JSON_TENSOR}: SingleUnnamedTensorErrors", "POST", E,
     '{"signature_name": 5, "instances": [[1,2],[3,4],[5,6,7]]}', 400, "must be a string value"),
    (f"{JSON_TENSOR}: SingleUnnamedTensorErrors", "POST", E,
     echo("int32", {"instances": [[1, 2], [3, 4], [5, 6, 7]], "inputs": [[1, 2], [3, 4], [5, 6, 7]]}), 400,
     "Not formatted correctly"),
    (f"{JSON_TENSOR}: SingleUnnamedTensorErrors", "POST", E, echo("int32", {"instances": [[1, 2], [3, 4], [5, 6, 7]]}),
     400, "Expecting tensor size"),
    (f"{JSON_TENSOR}: SingleUnnamedTensorErrors", "POST", E, echo("int32", {"instances": [[1, 2], [3, 4], [[5, 6]]]}),
     400, "Expecting shape"),
    (f"{JSON_TENSOR}: SingleUnnamedTensorErrors", "POST", E, echo("int32", {"instances": [1, [1]]}), 400,
     "Expecting shape"),
    (f"{JSON_TENSOR}: SingleUnnamedTensorErrors", "POST", E, echo("int32", {"instances": [[1, 2], ["a", "b"]]}),
     400, "not of expected type"),
    # MultipleNamedTensorErrors.
    (f"{JSON_TENSOR}: MultipleNamedTensorErrors", "POST", E,
     echo("named", {"instances": [{"int_tensor": [[1, 2], [3, 4], [5, 6]], "str_tensor": ["foo", "bar"]},
                                  {"int_tensor": [[[7, 8], [9, 0], [1, 2]]], "str_tensor": ["baz", "bat"]}]}), 400,
     "Expecting shape"),
    (f"{JSON_TENSOR}: MultipleNamedTensorErrors", "POST", E,
     echo("named", {"instances": [{"int_tensor": [[1, 2], [3, 4], [5, 6], [7, 8]], "str_tensor": ["foo", "bar"]},
                                  {"int_tensor": [[7, 8], [9, 0], [1, 2]], "str_tensor": ["baz", "bat"]}]}), 400,
     "Expecting tensor size"),
    (f"{JSON_TENSOR}: MultipleNamedTensorErrors", "POST", E,
     echo("named", {"instances": [{"int_tensor": [[1, 2]], "str_tensor": ["foo"]}, [[7, 8]]]}), 400,
     "Expecting object but got list"),
    (f"{JSON_TENSOR}: MultipleNamedTensorErrors", "POST", E,
     echo("bytes", {"instances": [["baz", "bar"], {"str_tensor": ["baz", "bat"]}]}), 400,
     "Expecting value/list but got object"),
    # The parser's flags (json_tensor.cc, ParseJson): NaN and Infinity, data after the document.
    (f"{JSON_TENSOR}: FromJsonSingleFloatTensorNonFinite (util/json_tensor.cc: kParseNanAndInfFlag)", "POST", E,
     '{"signature_name": "float", "instances": [[NaN, Infinity], [3, -Infinity]]}', 200,
     Text('{"predictions": [[NaN, Infinity], [3.0, -Infinity]]}')),
    (f"{JSON_TENSOR}: FromJsonSingleFloatTensorSixDigitPrecision", "POST", E,
     echo("float", {"instances": [[9000000, 999999, 0.5], [0.0003, 0.00003, 555557.5]]}), 200,
     Text('{"predictions": [[9e+06, 999999.0, 0.5], [0.0003, 3e-05, 555557.5]]}')),
    ("util/json_tensor.cc: ParseJson (kParseStopWhenDoneFlag)", "POST", E,
     '{"signature_name": "int32", "instances": [7]} anything after the document', 200, {"predictions": [7]}),
    ("util/json_tensor.cc: ParseJson (rapidjson does not validate UTF-8)", "POST", E,
     '{"signature_name": "bytes", "instances": ["\udcff\udcfeok"]}', 200, {"predictions": [{"b64": "//5vaw=="}]}),
    (f"{JSON_TENSOR}: FromJsonSingleZeroBatchTensor", "POST", E, echo("int32", {"inputs": []}), 200,
     {"outputs": []}),
    # Which paths reach the REST handler (http_server.cc: RestApiRequestDispatcher, kPathRegex).
    (f"{HANDLER}: kPathRegex", "GET", "/statuspage", None, 404, None),
    (f"{HANDLER}: kPathRegex", "GET", "/index", None, 404, None),
    (f"{HANDLER}: kPathRegex (the query string is not part of the path)", "POST",
     f"/v1/models/{M}:predict?debug=1", '{"instances": [1.0]}', 200, {"predictions": [2.5]}),
    ("model_servers/http_server.cc: ProcessRequest (URL matching is case-insensitive)", "POST",
     f"/V1/MODELS/{M}:PREDICT", '{"instances": [1.0]}', 200, {"predictions": [2.5]}),
    ("model_servers/http_server.cc: ProcessRequest (CORS preflight without Origin)", "OPTIONS",
     f"/v1/models/{M}:predict", None, 400, "Origin header is missing in CORS preflight"),
]


@pytest.mark.parametrize("source, method, path, body, status, expected", CASES,
                         ids=[f"{i}-{c[1]} {c[2][:50]}" for i, c in enumerate(CASES)])
def test_rest_case(server, source, method, path, body, status, expected):
    got_status, content_type, text = call(server, method, path, body)
    assert got_status == status, (source, text[:500])
    if expected is None:  # not the handler's answer: libevent's own 404 page
        assert content_type.startswith("text/html") and "404 Not Found" in text
        return
    assert content_type == "application/json"
    if isinstance(expected, Text):
        assert "".join(text.split()) == "".join(expected.split()), source
    elif isinstance(expected, str):
        answer = json.loads(text)
        assert set(answer) == {"error"} and expected in answer["error"], (source, answer)
    else:
        assert json.loads(text) == expected, source


def test_cors_preflight_with_an_origin_is_answered_empty(server):
    """model_servers/http_server.cc: ProcessRequest, OPTIONS with an http(s) Origin."""
    status, content_type, text = call(server, "OPTIONS", f"/v1/models/{M}:predict",
                                      headers={"Origin": "https://example.org"})
    assert (status, content_type, text) == (200, None, "")


def test_method_name_check_when_enabled(server, tmp_path):
    """servables/tensorflow/classifier.cc, regressor.cc: with --enable_signature_method_name_check
    a TF2 signature (method_name predict) is refused by :classify and :regress."""
    from tensorflow_serving.apis import input_pb2

    from serving import classify_regress
    from serving.status import InvalidArgument
    from serving.servable import Servable

    save_half_plus_two(str(tmp_path / "1"))
    servable = Servable(M, 1, str(tmp_path / "1"))
    request = input_pb2.Input()
    request.example_list.examples.add().features.feature["x"].float_list.value.append(80.0)
    assert classify_regress.regress(servable, "regress_x_to_y", request).regressions[0].value == 42.0
    with pytest.raises(InvalidArgument, match="Expected regression signature method_name to be "
                                              "tensorflow/serving/regress. Was: tensorflow/serving/predict"):
        classify_regress.regress(servable, "regress_x_to_y", request, check_method_name=True)
    with pytest.raises(InvalidArgument, match="Expected classification signature method_name to be "
                                              "tensorflow/serving/classify. Was: tensorflow/serving/predict"):
        classify_regress.classify(servable, "classify_x_to_y", request, check_method_name=True)


def test_get_model_metadata(server):
    """http_rest_api_handler_test.cc: GetModelMetadata, against testdata/
    saved_model_half_plus_two_2_versions_metadata.json: model_spec printed with its defaults,
    then metadata.signature_def holding the SignatureDefMap (no "@type")."""
    status, _, text = call(server, "GET", f"/v1/models/{M}/metadata")
    assert status == 200
    answer = json.loads(text)
    assert answer["model_spec"] == {"name": M, "signature_name": "", "version": "123"}
    assert list(answer["metadata"]) == ["signature_def"]
    signatures = answer["metadata"]["signature_def"]
    assert list(signatures) == ["signature_def"]
    default = signatures["signature_def"]["serving_default"]
    assert default["method_name"] == "tensorflow/serving/predict" and default["defaults"] == {}
    x = default["inputs"]["x"]
    assert x["dtype"] == "DT_FLOAT" and x["tensor_shape"] == {"dim": [], "unknown_rank": True}
    assert set(signatures["signature_def"]) >= {"classify_x_to_y", "regress_x_to_y", "serving_default"}


# --- gRPC: PredictionService and ModelService, as tensorflow_model_server_test.py calls them ----

SERVER_TEST = "model_servers/tensorflow_model_server_test.py"


@pytest.fixture(scope="module")
def stubs(server):
    import grpc
    from tensorflow_serving.apis import model_service_pb2_grpc, prediction_service_pb2_grpc

    channel = grpc.insecure_channel(f"127.0.0.1:{server.grpc_port}")
    yield prediction_service_pb2_grpc.PredictionServiceStub(channel), model_service_pb2_grpc.ModelServiceStub(channel)
    channel.close()


def spec(message, name=M, signature="", version=None, label=None):
    message.model_spec.name = name
    message.model_spec.signature_name = signature
    if version is not None:
        message.model_spec.version.value = version
    if label is not None:
        message.model_spec.version_label = label
    return message


def examples_request(kind, signature, x):
    from tensorflow_serving.apis import classification_pb2, regression_pb2

    message = {"classify": classification_pb2.ClassificationRequest,
               "regress": regression_pb2.RegressionRequest}[kind]()
    spec(message, signature=signature)
    message.input.example_list.examples.add().features.feature["x"].float_list.value.extend([x])
    return message


def test_grpc_get_model_status(stubs):
    """tensorflow_model_server_test.py: testGetModelStatus."""
    from tensorflow_serving.apis import get_model_status_pb2

    result = stubs[1].GetModelStatus(spec(get_model_status_pb2.GetModelStatusRequest()), timeout=30)
    assert [(s.version, s.status.error_code) for s in result.model_version_status] == [(123, 0)]


def test_grpc_get_model_metadata(stubs):
    """tensorflow_model_server_test.py: testGetModelMetadata."""
    from tensorflow_serving.apis import get_model_metadata_pb2

    request = spec(get_model_metadata_pb2.GetModelMetadataRequest())
    request.metadata_field.append("signature_def")
    result = stubs[0].GetModelMetadata(request, timeout=30)
    signatures = get_model_metadata_pb2.SignatureDefMap()
    result.metadata["signature_def"].Unpack(signatures)
    assert result.model_spec.name == M and result.model_spec.version.value == 123
    assert signatures.signature_def["serving_default"].inputs["x"].dtype == 1  # DT_FLOAT


@pytest.mark.parametrize("kind, signature, x, expected", [("classify", "classify_x_to_y", 2.0, 3.0),
                                                          ("regress", "regress_x_to_y", 2.0, 3.0)])
def test_grpc_classify_and_regress_on_a_tf2_model(stubs, kind, signature, x, expected):
    """tensorflow_model_server_test.py: testClassifyTf2, testRegressTf2 (method_name predict)."""
    request = examples_request(kind, signature, x)
    result = getattr(stubs[0], kind.capitalize())(request, timeout=30)
    value = (result.result.classifications[0].classes[0].score if kind == "classify"
             else result.result.regressions[0].value)
    assert value == expected
    assert (result.model_spec.name, result.model_spec.signature_name, result.model_spec.version.value) == \
        (M, signature, 123)


def test_grpc_predict(stubs):
    """tensorflow_model_server_test.py: testPredictSavedModel (y = 0.5 x + 2)."""
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    request = spec(predict_pb2.PredictRequest(), signature="serving_default")
    request.inputs["x"].CopyFrom(tf.make_tensor_proto([2.0], dtype=tf.float32))
    result = stubs[0].Predict(request, timeout=30)
    assert tf.make_ndarray(result.outputs["y"]).tolist() == [3.0]
    assert result.model_spec.version.value == 123


@pytest.mark.parametrize("case, code, message", [
    ("unknown model", "NOT_FOUND", "Servable not found for request: Latest(nope)"),
    ("version not served", "NOT_FOUND", f"Servable not found for request: Specific({M}, 124)"),
    ("unknown label", "INVALID_ARGUMENT", "Unrecognized servable version label: nope"),
    ("unknown signature", "INVALID_ARGUMENT", 'Serving signature name: "nope" not found in signature def'),
    ("wrong dtype", "INVALID_ARGUMENT", "to be float but string is provided"),
])
def test_grpc_predict_errors_carry_tf_serving_status_codes(stubs, case, code, message):
    """servables/tensorflow/predict_util.cc and server_core.cc, through PredictionService.Predict:
    each error's gRPC status code and message."""
    import grpc
    import tensorflow as tf
    from tensorflow_serving.apis import predict_pb2

    request = spec(predict_pb2.PredictRequest(), name="nope" if case == "unknown model" else M,
                   signature="nope" if case == "unknown signature" else "",
                   version=124 if case == "version not served" else None,
                   label="nope" if case == "unknown label" else None)
    request.inputs["x"].CopyFrom(tf.make_tensor_proto(["a"] if case == "wrong dtype" else [2.0]))
    with pytest.raises(grpc.RpcError) as error:
        stubs[0].Predict(request, timeout=30)
    assert error.value.code().name == code and message in error.value.details()
