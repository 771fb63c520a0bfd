"""TF Serving conformance: what its own tests assert, asked of `python -m serving` over real
HTTP on loopback. Each case names the file and test of tensorflow/serving it comes from.

The model is TF Serving's test model, half_plus_two (y = 0.5 x + 2), saved as an ordinary
TF2 program saves it (every signature's method_name is predict), served under the name,
version (123) and label its tests use.
"""

import http.client
import json

import pytest

from serving_models import save_half_plus_two

M = "saved_model_half_plus_two_2_versions"  # kTestModelName
HANDLER = "model_servers/http_rest_api_handler_test.cc"
JSON_TENSOR = "util/json_tensor_test.cc"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    from serving.process import LocalServer

    root = tmp_path_factory.mktemp("conformance")
    for version in (123, 124):
        save_half_plus_two(str(root / "half_plus_two" / str(version)))
    config = root / "models.config"
    config.write_text(f'model_config_list {{ config {{ name: "{M}" base_path: "{root / "half_plus_two"}" '
                      'model_platform: "tensorflow" model_version_policy { specific { versions: 123 } } '
                      'version_labels { key: "Version_Label" value: 123 } } }')
    with LocalServer(M, config_file=str(config), log_path=str(root / "server.log"),
                     extra_flags=["--allow_version_labels_for_unavailable_models"]) as local:
        local.wait_for_version(123)
        yield local


def call(server, method, path, body=None):
    """(status, content type, parsed JSON body) of one request on a fresh connection."""
    connection = http.client.HTTPConnection("127.0.0.1", server.rest_port, timeout=30)
    data = body.encode() if isinstance(body, str) else body
    connection.request(method, path, data, {"Content-Type": "application/json"} if data is not None else {})
    response = connection.getresponse()
    raw = response.read()
    connection.close()
    return response.status, response.getheader("Content-Type"), json.loads(raw)


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


@pytest.mark.parametrize("source, method, path, body, status, expected", CASES,
                         ids=[f"{i}-{c[1]} {c[2][:60]}" for i, c in enumerate(CASES)])
def test_rest_case(server, source, method, path, body, status, expected):
    got_status, content_type, answer = call(server, method, path, body)
    assert content_type == "application/json"
    assert got_status == status, (source, answer)
    if isinstance(expected, str):
        assert set(answer) == {"error"} and expected in answer["error"], (source, answer)
    else:
        assert answer == expected, source


def test_get_model_metadata(server):
    """http_rest_api_handler_test.cc: GetModelMetadata, against testdata/
    saved_model_half_plus_two_2_versions_metadata.json: model_spec printed with its defaults,
    then metadata.signature_def holding the SignatureDefMap (no "@type")."""
    status, _, answer = call(server, "GET", f"/v1/models/{M}/metadata")
    assert status == 200
    assert answer["model_spec"] == {"name": M, "signature_name": "", "version": "123"}
    assert list(answer["metadata"]) == ["signature_def"]
    signatures = answer["metadata"]["signature_def"]
    assert list(signatures) == ["signature_def"]
    default = signatures["signature_def"]["serving_default"]
    assert default["method_name"] == "tensorflow/serving/predict" and default["defaults"] == {}
    x = default["inputs"]["x"]
    assert x["dtype"] == "DT_FLOAT" and x["tensor_shape"] == {"dim": [], "unknown_rank": True}
    assert set(signatures["signature_def"]) >= {"classify_x_to_y", "regress_x_to_y", "serving_default"}
