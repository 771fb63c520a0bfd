"""The families' signatures served by `serving` over loopback: `entities` and `answer` over
REST (row and columnar formats) and gRPC answer as the in-memory signatures do (same text,
same character offsets) of the in-memory model the export was made from, and bad input is a 400 / INVALID_ARGUMENT naming what is wrong."""

import base64

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from helpers import tiny_families_export
from serving.client import ServingClient
from serving_helpers import Server

TEXTS = ["the cat sat on the mat .", "dogs  ran fast", "the dog sat on the mat fast the cats ran ."]
QUESTIONS = ["where is the cat ?", "who ran ?", "what sat ?"]
CONTEXTS = [" the cat sat on the mat .", "dogs ran fast", "the dog sat on the mat . the cats ran fast ."]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    base = tmp_path_factory.mktemp("families") / "families"
    functions = tiny_families_export(base / "1")
    server = Server(model_name="families", model_base_path=str(base))
    yield server, functions
    server.close()


def plain(tensor):
    values = tensor.numpy().tolist()
    return [[v.decode() if isinstance(v, bytes) else v for v in row] if isinstance(row, list)
            else row.decode() if isinstance(row, bytes) else row for row in values]


def expected(functions):
    entities = functions["entities"](tf.constant(TEXTS))
    answers = functions["answer"](tf.constant(QUESTIONS), tf.constant(CONTEXTS))
    return {name: plain(value) for name, value in entities.items()}, {name: plain(v) for name, v in answers.items()}


def same(got: dict, want: dict):
    assert got.keys() == want.keys()
    for name, value in want.items():
        if "score" in name:
            np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-6)
        else:
            assert got[name] == value, name


def test_rest_row_and_columnar_and_grpc_answer_as_the_in_memory_signatures(served):
    server, functions = served
    entities, answers = expected(functions)
    assert [c[s:e] for c, s, e in zip(CONTEXTS, answers["answer_start"], answers["answer_end"])] == answers["answer"]
    for row, text in enumerate(TEXTS):
        for start, end, found in zip(entities["entity_start"][row], entities["entity_end"][row],
                                     entities["entity_text"][row][:entities["num_entities"][row]]):
            assert text[start:end] == found
    code, body, _ = server.request("/v1/models/families:predict", {"signature_name": "entities", "inputs": {"text": TEXTS}})
    assert code == 200, body
    same(body["outputs"], entities)
    code, body, _ = server.request("/v1/models/families:predict", {
        "signature_name": "answer", "instances": [{"question": q, "context": c} for q, c in zip(QUESTIONS, CONTEXTS)]})
    assert code == 200, body
    same({name: [row[name] for row in body["predictions"]] for name in answers}, answers)

    stub = prediction_service_pb2_grpc.PredictionServiceStub(server.channel)
    for signature, inputs, want in (("entities", {"text": TEXTS}, entities),
                                    ("answer", {"question": QUESTIONS, "context": CONTEXTS}, answers)):
        request = predict_pb2.PredictRequest()
        request.model_spec.name, request.model_spec.signature_name = "families", signature
        for name, values in inputs.items():
            request.inputs[name].CopyFrom(tf.make_tensor_proto(values))
        response = stub.Predict(request, timeout=60)
        same({name: plain(tf.constant(tf.make_ndarray(proto))) for name, proto in response.outputs.items()}, want)
        # serving.client over gRPC gives text at every depth, as REST's JSON does.
        client = ServingClient("families", grpc_port=server.grpc_port, protocol="grpc", timeout=60)
        same(client.predict(signature, inputs), want)


@pytest.mark.parametrize("question, context, message", [
    ("", "the cat", "empty question"),
    ("who ?", "   ", "empty context"),
    ("who ran ?", "the dog ran fast . " * 20, "context too long: it needs more than 3 windows"),
    ("who ?", {"b64": base64.b64encode(b"the caf\xe9").decode()}, "the context input is not valid UTF-8"),
])
def test_bad_input_is_a_400_naming_what_is_wrong(served, question, context, message):
    server, _ = served
    code, body, _ = server.request("/v1/models/families:predict",
                                   {"signature_name": "answer", "inputs": {"question": [question], "context": [context]}})
    assert code == 400 and message in body["error"], body


def test_grpc_bad_input_is_invalid_argument(served):
    server, _ = served
    request = predict_pb2.PredictRequest()
    request.model_spec.name, request.model_spec.signature_name = "families", "entities"
    request.inputs["text"].CopyFrom(tf.make_tensor_proto([b"caf\xe9"], dtype=tf.string))
    with pytest.raises(grpc.RpcError) as error:
        prediction_service_pb2_grpc.PredictionServiceStub(server.channel).Predict(request, timeout=60)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "not valid UTF-8" in error.value.details()
