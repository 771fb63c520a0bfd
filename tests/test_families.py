"""A family is one module: a toy family declared here (classification from the first token's
state, kind `first_token`), registered for the test only, trains in a run, is scored, evaluated,
exported and served over loopback without a line of kerasbert changed."""

import dataclasses
import json

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import run_main
from kerasbert.families import Family, family_of, register, unregister
from kerasbert.families.classification import class_label
from kerasbert.families.sentence import ClassSettings
from kerasbert.families.sentence_export import TEXT, token_specs
from kerasbert.labels import sorted_labels
from kerasbert.packing import ENCODER_KEYS
from kerasbert.tasks import Task, TaskError

WORDS = {"refund": "billing", "charge": "billing", "crash": "bug", "error": "bug"}
REST = ["the", "page", "was", "slow", "today", "again", "card", "screen"]


class FirstToken(Family):
    """Classes from the [CLS] token's final state (no pooling): a head, loss, metric and
    signatures of its own; its files are column files (text, label), its settings the shared
    `ClassSettings` (columns, labels, class names)."""

    name, kinds, metrics = "first_token", ("first_token",), {"first_token": ("accuracy",)}
    settings = ClassSettings

    def check(self, task, fail):
        if not task.settings.text or task.settings.text_a or task.settings.text_b:
            fail("a first_token task names one text column, text")

    def is_resolved(self, task):
        return bool(task.settings.num_classes)

    def resolved(self, task, train_labels):
        return dataclasses.replace(task, labels=sorted_labels(train_labels))

    def train_labels(self, task, path, column, rows):
        return [row.label for row in rows]

    def label(self, task, value, where):
        return class_label(task, value, where)

    def head_units(self, task):
        return task.settings.num_classes

    def head_input_shape(self, model, name, hidden):
        return (None, hidden)

    def head_output(self, model, name, x, training=False):
        return model.head(name)(model.sequence(x, training)[:, 0])  # (batch, classes) from [CLS]

    def loss(self, model, name, x, y):
        labels = tf.cast(tf.reshape(y, [-1]), tf.int32)
        return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
            labels, self.head_output(model, name, x, training=True), from_logits=True))

    def batch_prediction(self, model, name, x):
        return tf.nn.softmax(self.head_output(model, name, x))

    def scores(self, task, references, predictions):
        return {task.metric_names[0]: float(np.mean(predictions.argmax(-1) == np.asarray(references)))}

    def prediction_row(self, task, example, reference, prediction):
        names = task.settings.served_names
        return [example.uid, names[int(reference)], names[int(np.argmax(prediction))]]

    def serving_functions(self, model, preprocessor, graph, name):
        names = tf.constant(model.task_specs[name].settings.served_names)

        def outputs(*tokens):
            probabilities = self.batch_prediction(model, name, dict(zip(ENCODER_KEYS, tokens)))
            return {"probabilities": probabilities, "class_name": tf.gather(names, tf.argmax(probabilities, -1))}

        head = model.task_specs[name].head
        return {head: (lambda text: outputs(*graph.pack[1](graph.tokenize(text))), [TEXT]),
                f"{head}_tokens": (outputs, token_specs())}


@pytest.fixture
def first_token():
    family = register(FirstToken())
    yield family
    unregister(family)


def sentence(i):
    first = list(WORDS)[i % len(WORDS)]
    return " ".join([first, *(REST[(i * k) % len(REST)] for k in range(1, 3 + i % 4))]), WORDS[first]


def test_a_family_declared_in_a_test_trains_scores_evaluates_exports_and_serves(tmp_path, capsys, first_token,
                                                                               tiny_checkpoint):
    from serving_helpers import Server

    unregister(first_token)
    with pytest.raises(TaskError, match="kind must be one of"):  # a kind is its family's, registered
        Task("first", "first_token", text="text")
    register(first_token)
    with pytest.raises(TaskError, match="names one text column"):
        Task("first", "first_token", text_a="a", text_b="b")
    data = tmp_path / "data"
    data.mkdir()
    for split, count in (("train", 32), ("dev", 16)):
        (data / f"first-{split}.jsonl").write_text("".join(
            json.dumps(dict(zip(("text", "label"), sentence(i)))) + "\n" for i in range(count)))
    config = {"tasks": {"first": {"kind": "first_token", "train_file": "first-train.jsonl",
                                  "dev_file": "first-dev.jsonl", "text": "text", "head": "topic"}},
              "data": {"max_sequence_length": 16},
              "train": {"batch_size": 8, "total_steps": 4, "steps_per_block": 2, "learning_rate": 1e-3}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    output, export_base = tmp_path / "out", tmp_path / "export" / "first"
    run_main(["pipelines.finetune", "--config", str(tmp_path / "config.json"), "--data_dir", str(data),
              "--init_checkpoint", tiny_checkpoint, "--output_dir", str(output)], capsys, check=True)
    metrics = json.loads((output / "metrics.json").read_text())
    assert 0 <= metrics["first_accuracy"] <= 1 and metrics["overall"] == metrics["first_accuracy"]
    assert (output / "predictions" / "first-dev.tsv").read_text().splitlines()[1].split("\t")[1] in ("billing", "bug")

    evaluated = run_main(["pipelines.evaluate", "--model_dir", str(output), "--task", "first",
                          "--data_file", str(data / "first-dev.jsonl")], capsys, check=True)
    assert json.loads(evaluated.stdout)["first_accuracy"] == pytest.approx(metrics["first_accuracy"])

    run_main(["pipelines.export", "--model_dir", str(output), "--export_base", str(export_base)], capsys, check=True)
    texts = [sentence(i)[0] for i in range(4)]
    served = tf.saved_model.load(str(export_base / "1")).signatures["topic"](text=tf.constant(texts))
    assert family_of("first_token") is first_token and served["probabilities"].shape == (4, 2)
    server = Server(model_name="first", model_base_path=str(export_base))
    try:
        code, body, _ = server.request("/v1/models/first:predict", {"signature_name": "topic", "instances":
                                                                   [{"text": text} for text in texts]})
    finally:
        server.close()
    assert code == 200, body
    assert [row["class_name"] for row in body["predictions"]] == [name.decode() for name in
                                                                  served["class_name"].numpy()]
    np.testing.assert_allclose([row["probabilities"] for row in body["predictions"]], served["probabilities"],
                               rtol=1e-5, atol=1e-6)
