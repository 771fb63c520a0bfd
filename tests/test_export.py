"""SavedModel export: layout, versions, signatures in a fresh TF-only process, TFSMLayer."""

import base64
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import ROOT
from helpers import TEXTS_A, TEXTS_B, expected_outputs, tiny_model_dir
from kerasbert.export import export_saved_model
from kerasbert.tasks import BUILTIN_TASKS as TASKS
from serving.servable import program_key
from serving.warmup import read_warmup_requests

def serialized_examples(**texts):
    """tf.Examples with one bytes feature per keyword, as {"b64": ...} JSON values."""
    rows = []
    for values in zip(*texts.values()):
        features = {key: tf.train.Feature(bytes_list=tf.train.BytesList(value=[value.encode()]))
                    for key, value in zip(texts, values)}
        example = tf.train.Example(features=tf.train.Features(feature=features))
        rows.append({"b64": base64.b64encode(example.SerializeToString()).decode()})
    return rows


def signature_calls(packed, pair_encoder, sts_encoder) -> dict:
    """Every signature of a tiny run's export with its inputs (TEXTS_A, TEXTS_B, their tokens as
    the in-process preprocessor packs them, tf.Examples of them)."""
    token_keys = ["token_ids", "segment_ids", "padding_mask"]

    def pair_keys(encoder):
        return token_keys + ([f"{k}_b" for k in token_keys] if encoder == "bi" else [])
    return {
        "sentiment": {"text": TEXTS_A}, "serving_default": {"text": TEXTS_A},
        "paraphrase": {"text_a": TEXTS_A, "text_b": TEXTS_B},
        "similarity": {"text_a": TEXTS_A, "text_b": TEXTS_B}, "embed": {"text": TEXTS_A},
        "sentiment_tokens": {k: packed["sst"][k].numpy().tolist() for k in token_keys},
        "paraphrase_tokens": {k: packed["para"][k].numpy().tolist() for k in pair_keys(pair_encoder)},
        "similarity_tokens": {k: packed["sts"][k].numpy().tolist() for k in pair_keys(sts_encoder)},
        "sentiment_classify": {"inputs": serialized_examples(text=TEXTS_A)},
        "paraphrase_classify": {"inputs": serialized_examples(text_a=TEXTS_A, text_b=TEXTS_B)},
        "similarity_regress": {"inputs": serialized_examples(text_a=TEXTS_A, text_b=TEXTS_B)},
    }


# Each pair task once as a cross-encoder and once as a bi-encoder, and a mixed model both ways.
ENCODERS = [("cross", "bi"), ("bi", "cross")]


@pytest.fixture(scope="module")
def mixed_exports(tmp_path_factory):
    """mixed_exports(pair_encoder, sts_encoder) -> (model, preprocessor, version folder): a tiny
    run of those encoders, exported once for the tests below (read it; never change it)."""
    exports = {}

    def export(pair_encoder, sts_encoder):
        if (pair_encoder, sts_encoder) not in exports:
            run = tmp_path_factory.mktemp(f"{pair_encoder}-{sts_encoder}")
            model, pre = tiny_model_dir(str(run / "run"), pair_encoder, sts_encoder)
            path = export_saved_model(str(run / "run"), str(run / "exports"))
            assert path == str(run / "exports" / "1")
            exports[pair_encoder, sts_encoder] = model, pre, path
        return exports[pair_encoder, sts_encoder]
    return export


def test_every_signature_in_a_fresh_tf_only_process_matches_keras(tmp_path, mixed_exports):
    # Both exports loaded in one fresh process.
    wanted, arguments = [], []
    for pair_encoder, sts_encoder in ENCODERS:
        model, pre, path = mixed_exports(pair_encoder, sts_encoder)
        outputs, packed = expected_outputs(model, pre)
        wanted.append(outputs)
        calls = tmp_path / f"{pair_encoder}-{sts_encoder}.json"
        calls.write_text(json.dumps(signature_calls(packed, pair_encoder, sts_encoder)))
        arguments += [path, str(calls)]
    result = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "load_export.py"), *arguments],
                            capture_output=True, text=True, timeout=300, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stderr[-3000:]
    lines = result.stdout.strip().splitlines()[-len(ENCODERS):]
    for line, expected, encoder in zip(lines, wanted, ENCODERS):
        out = json.loads(line)
        assert {"sentiment", "paraphrase", "similarity", "embed", "sentiment_tokens", "paraphrase_tokens",
                "similarity_tokens", "embed_tokens", "serving_default"} <= set(out["signatures"]), encoder
        aliases = {"serving_default": "sentiment", "sentiment_tokens": "sentiment",
                   "paraphrase_tokens": "paraphrase", "similarity_tokens": "similarity"}
        p = expected["paraphrase"]["probability"]
        expected["sentiment_classify"] = {"classes": list(TASKS["sst"].settings.class_names) * len(TEXTS_A),
                                          "scores": expected["sentiment"]["probabilities"]}
        expected["paraphrase_classify"] = {"classes": ["not duplicate", "duplicate"] * len(TEXTS_A),
                                           "scores": np.stack([1 - p, p], -1)}
        expected["similarity_regress"] = {"outputs": expected["similarity"]["score"]}
        for name, outputs in out["outputs"].items():
            for key, value in expected[aliases.get(name, name)].items():
                if key in ("classes", "class_name"):
                    assert outputs[key] == value, f"{encoder} {name}/{key}"
                else:
                    np.testing.assert_allclose(np.array(outputs[key]), value, atol=1e-5,
                                               err_msg=f"{encoder} {name}/{key}")


def test_versions_count_up_are_never_overwritten_and_carry_assets(tmp_path):
    model, _ = tiny_model_dir(str(tmp_path / "run"), "cross")
    base = str(tmp_path / "exports")
    first = export_saved_model(str(tmp_path / "run"), base)
    second = export_saved_model(str(tmp_path / "run"), base)
    assert [os.path.basename(first), os.path.basename(second)] == ["1", "2"]
    with pytest.raises(FileExistsError, match="never overwritten"):
        export_saved_model(str(tmp_path / "run"), base, version=1)
    assert sorted(os.listdir(base)) == ["1", "2"]  # no half-built folder left behind
    assets = os.listdir(os.path.join(second, "assets"))
    assert {"kerasbert_config.json", "vocab.txt"} <= set(assets)
    assert json.load(open(os.path.join(second, "assets", "kerasbert_config.json")))["heads"]["pair_encoder"] == "cross"
    warmups = read_warmup_requests(second)
    assert [r.model_spec.signature_name for r in warmups] == ["sentiment", "paraphrase", "similarity", "embed"]
    # Each weight is saved once (not once per Keras variable and once per tf.Variable).
    reader = tf.train.load_checkpoint(os.path.join(second, "variables", "variables"))
    saved = sum(np.prod(shape) for key, shape in reader.get_variable_to_shape_map().items()
                if reader.get_variable_to_dtype_map()[key].is_floating)
    assert 0 < saved <= sum(np.prod(w.shape) for w in model.weights if "float" in str(w.dtype))
    assert len(tf.saved_model.load(second).variables) == len(reader.get_variable_to_shape_map()) - 1
    # A re-export of the same model can take a server's warm standby copy.
    assert program_key(first) == program_key(second)


def test_tfsmlayer_embed_inside_a_new_keras_model_and_saved_model_cli(mixed_exports):
    path = mixed_exports("bi", "cross")[2]
    text = keras.Input(shape=(), dtype="string", name="text")
    embedding = keras.layers.TFSMLayer(path, call_endpoint="embed")(text)["embedding"]
    classifier = keras.Model(text, keras.layers.Dense(3)(embedding))
    assert classifier.predict(tf.constant(TEXTS_A), verbose=0).shape == (2, 3)
    cli = os.path.join(os.path.dirname(sys.executable), "saved_model_cli")
    shown = subprocess.run([cli, "show", "--dir", path, "--all"], capture_output=True, text=True)  # one TF start
    sections = {section.split("']:", 1)[0]: section for section in shown.stdout.split("signature_def['")[1:]}
    assert {"sentiment", "paraphrase", "similarity", "embed", "embed_tokens", "serving_default",
            "sentiment_classify", "similarity_regress"} <= set(sections), shown.stdout[-2000:]
    assert "Method name is: tensorflow/serving/classify" in sections["sentiment_classify"]


def test_an_export_killed_mid_write_leaves_nothing_a_server_would_load(tmp_path):
    import signal
    import time

    from serving.source import versions_on_disk

    tiny_model_dir(str(tmp_path / "run"), "cross")
    base = tmp_path / "exports"
    base.mkdir()
    command = [sys.executable, "-m", "pipelines.export", "--model_dir", str(tmp_path / "run"),
               "--export_base", str(base)]
    process = subprocess.Popen(command, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT},
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.time() + 120
    while time.time() < deadline and not any(base.glob(".1-building-*/saved_model.pb")):
        assert process.poll() is None, "the export finished before it could be killed"
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    assert process.returncode == -signal.SIGKILL
    left = os.listdir(base)
    assert len(left) == 1 and left[0].startswith(".1-building-")  # hidden, not a version
    assert versions_on_disk(str(base)) == {}  # what a polling server would load
    # The next export takes version 1 and clears what the killed one left.
    assert export_saved_model(str(tmp_path / "run"), str(base)) == str(base / "1")
    assert os.listdir(base) == ["1"]


@pytest.mark.parametrize("compute_dtype, min_cosine", [("bfloat16", 0.999), ("int8", 0.99)])
def test_a_reduced_precision_export_serves_close_to_float32(tmp_path, compute_dtype, min_cosine):
    model, pre = tiny_model_dir(str(tmp_path / "run"), "cross")
    path = export_saved_model(str(tmp_path / "run"), str(tmp_path / "exports"), compute_dtype=compute_dtype)
    stored = tf.train.load_checkpoint(os.path.join(path, "variables", "variables")).get_variable_to_dtype_map()
    assert tf.as_dtype(compute_dtype) in stored.values()  # the kernels kept in that type, not cast per call
    served = tf.saved_model.load(path).signatures["embed"](text=tf.constant(TEXTS_A))["embedding"].numpy()
    expected = model.embed(pre.pack(tf.constant(TEXTS_A))).numpy()
    cosine = np.sum(served * expected, -1) / np.linalg.norm(served, axis=-1) / np.linalg.norm(expected, axis=-1)
    assert cosine.min() > min_cosine and np.abs(served - expected).max() > 1e-6  # close, and really reduced
    with pytest.raises(ValueError, match="compute_dtype must be one of"):
        export_saved_model(str(tmp_path / "run"), str(tmp_path / "exports"), compute_dtype="float16")


def test_one_sentence_runs_the_few_node_encoder_in_a_session_as_keras_answers(tiny_export):
    """A one-row request takes kerasbert/models/one_row.py's encoder in a session, as TF Serving
    runs the graph (fewer nodes than a two-row request runs), and answers as the Keras model
    does; a batch keeps the unpadded encoder."""
    from tensorflow.core.protobuf import config_pb2

    from kerasbert.finetuning.load import load_finetuned

    run_dir, path = tiny_export
    _, model, pre = load_finetuned(run_dir)
    requests = ([TEXTS_A[0]], [TEXTS_A[1]], TEXTS_A)
    expected = [model.embed(pre.pack(tf.constant(texts))).numpy() for texts in requests]
    graph, nodes_run = tf.Graph(), []
    with graph.as_default(), tf.compat.v1.Session(graph=graph) as session:
        signature = tf.compat.v1.saved_model.loader.load(session, ["serve"], path).signature_def["embed"]
        for texts, embedding in zip(requests, expected):
            metadata = config_pb2.RunMetadata()
            served = session.run(signature.outputs["embedding"].name, {signature.inputs["text"].name: texts},
                                 options=config_pb2.RunOptions(trace_level=config_pb2.RunOptions.FULL_TRACE),
                                 run_metadata=metadata)
            np.testing.assert_allclose(served, embedding, atol=1e-5)
            nodes_run.append(sum(len(device.node_stats) for device in metadata.step_stats.dev_stats))
    assert nodes_run[0] < 0.8 * nodes_run[2], nodes_run  # unpadded: about as many (a tiny model: 2 blocks)


def test_an_xla_export_answers_one_sentence_from_a_compiled_encoder_as_the_unpadded_one(tmp_path, tiny_export):
    from kerasbert.errors import ConfigError
    from kerasbert.finetuning.load import load_finetuned

    run_dir = tiny_export[0]
    _, model, pre = load_finetuned(run_dir)
    path = export_saved_model(run_dir, str(tmp_path / "exports"), xla=True)
    with open(os.path.join(path, "saved_model.pb"), "rb") as f:
        assert b"_XlaMustCompile" in f.read()  # the one-row encoder is XLA's
    embed = tf.saved_model.load(path).signatures["embed"]
    for texts in ([TEXTS_A[0]], [TEXTS_A[1]], TEXTS_A):  # one row (compiled), then a batch (unpadded)
        served = embed(text=tf.constant(texts))["embedding"].numpy()
        np.testing.assert_allclose(served, model.embed(pre.pack(tf.constant(texts))).numpy(), atol=1e-5)
    with pytest.raises(ConfigError, match="xla compiles the float32 encoder only"):
        export_saved_model(run_dir, str(tmp_path / "exports"), compute_dtype="int8", xla=True)
