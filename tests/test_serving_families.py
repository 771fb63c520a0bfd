"""The families' signatures served by `serving` over loopback: `entities` and `answer` over
REST (row and columnar formats) and gRPC answer as the in-memory signatures do (same text,
same character offsets) of the in-memory model the export was made from, and bad input is a 400 / INVALID_ARGUMENT naming what is wrong."""

import base64
import json
import os
import subprocess
import sys

import grpc
import numpy as np
import pytest
import tensorflow as tf
from tensorflow_serving.apis import predict_pb2, prediction_service_pb2_grpc

from conftest import ROOT
from serving.client import ServingClient
from serving_helpers import Server

TEXTS = ["the cat sat on the mat .", "dogs  ran fast", "the dog sat on the mat fast the cats ran ."]
QUESTIONS = ["where is the cat ?", "who ran ?", "what sat ?"]
CONTEXTS = [" the cat sat on the mat .", "dogs ran fast", "the dog sat on the mat . the cats ran fast ."]


@pytest.fixture(scope="module")
def served(tiny_families):
    path, functions = tiny_families
    server = Server(model_name="families", model_base_path=os.path.dirname(path))
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


def test_the_export_needs_only_tensorflow_and_tf_text_ops(served):
    """The op audit (kerasbert/op_audit.py) on the tagging and span families' export: every op
    in reach of tensorflow_model_server (the sentence families': tests/test_op_audit.py)."""
    from kerasbert.op_audit import TF_TEXT, audit_ops

    audit = audit_ops(os.path.join(served[0].flags.model_base_path, "1"))
    assert audit.problems() == []
    assert {"FastWordpieceTokenizeWithOffsets", "RegexSplitWithOffsets"} <= {op for op, o in audit.ops.items() if o == TF_TEXT}


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


def test_the_command_line_client_takes_any_signatures_inputs_by_name_and_prints_entities_and_answers(served,
                                                                                                     capsys):
    from serving import client

    server, functions = served
    entities, answers = expected(functions)
    for protocol, port in (("rest", server.rest_port), ("grpc", server.grpc_port)):
        def run(*args):
            code = client.main(["--model_name", "families", "--protocol", protocol, "--port", str(port),
                                "--timeout", "60", *args])
            out = capsys.readouterr()
            return code, out.out, out.err

        code, out, _ = run("--signature", "answer", "--input", f"question={QUESTIONS[2]}",
                           "--input", f"context={CONTEXTS[2]}")
        start, end = answers["answer_start"][2], answers["answer_end"][2]
        assert code == 0
        assert out == f"answer: {answers['answer'][2]!r} [{start}:{end}) score {answers['score'][2]:.4f}\n"
        code, out, _ = run("--signature", "entities", "--input", f"text={TEXTS[2]}")
        count = entities["num_entities"][2]
        found = list(zip(*(entities[key][2][:count] for key in (
            "entity_type", "entity_text", "entity_start", "entity_end", "entity_score"))))
        kind_width, text_width = max(len(kind) for kind, *_ in found), max(len(repr(text)) for _, text, *_ in found)
        assert code == 0 and out.splitlines() == [f"{count} entities:"] + [
            f"  {kind:<{kind_width}}  {text!r:<{text_width}}  [{start}:{end})  score {score:.4f}"
            for kind, text, start, end, score in found]
        # Two rows of one input, and --json for the outputs as the server gives them.
        code, out, _ = run("--signature", "entities", "--input", f"text={TEXTS[0]}", "--input", f"text={TEXTS[1]}",
                           "--json")
        widest = max(entities["num_entities"][:2])  # a batch's entity columns: its largest count
        assert code == 0 and json.loads(out)["entity_text"] == [row[:widest] for row in entities["entity_text"][:2]]
        # Inputs that are not text are JSON: a token-id signature's rows.
        code, out, _ = run("--signature", "entities_tokens", "--input", "token_ids=[2, 6, 8, 3]",
                           "--input", "segment_ids=[0, 0, 0, 0]", "--input", "padding_mask=[1, 1, 1, 1]")
        assert code == 0 and out.startswith("tag: [") and "tag_id: [" in out
        # A signature's inputs misnamed: the client names them before asking.
        code, _, err = run("--signature", "answer", "--text", QUESTIONS[0], "--text_b", CONTEXTS[0])
        assert code == 1 and err == ("error: signature 'answer' takes inputs context, question; received text_a, "
                                     "text_b (pass each as --input NAME=VALUE)\n")
        code, _, err = run("--signature", "entities_tokens", "--input", "token_ids=2 6", "--input", "segment_ids=0",
                           "--input", "padding_mask=1")
        assert code == 1 and "error: --input token_ids=2 6: input 'token_ids' is DT_INT32, so its value is JSON (a " \
                             "number or a list)" in err


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="with a GPU TensorFlow's start-up lines are shown")
def test_the_command_line_client_over_grpc_prints_the_answer_and_nothing_else(served):
    server, functions = served
    _, answers = expected(functions)
    environment = {key: value for key, value in os.environ.items()
                   if key not in ("TF_CPP_MIN_LOG_LEVEL", "KERASBERT_VERBOSE")}
    result = subprocess.run([sys.executable, "-m", "serving.client", "--model_name", "families", "--protocol", "grpc",
                             "--port", str(server.grpc_port), "--timeout", "60", "--signature", "answer",
                             "--input", f"question={QUESTIONS[0]}", "--input", f"context={CONTEXTS[0]}"],
                            cwd=ROOT, env={**environment, "PYTHONPATH": ROOT}, capture_output=True, text=True,
                            timeout=300)
    assert (result.returncode, result.stderr) == (0, "")
    assert result.stdout.startswith(f"answer: {answers['answer'][0]!r} [")
