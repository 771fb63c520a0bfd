"""The sentence classification family: kinds `classes` (one text), `pair_classes` (a pair) and
`pair_binary` (a pair, two classes, one output: the probability of the second).

    kind          head output                     loss                    metrics (headline first)
    classes       softmax over the classes        cross-entropy           accuracy
    pair_classes  softmax over the classes        cross-entropy           accuracy
    pair_binary   probability of the 2nd class    binary cross-entropy    accuracy, f1
                                                  (+ multiple negatives ranking on positives:
                                                  the task's mnrl_weight, bi-encoder only)

Heads: dropout + dense(num_classes), or dense(1) for binary, on the sentence embedding or a
bi-encoder pair's [u, v, |u - v|, u * v]. Signatures: `<head>` -> probabilities (or probability),
label, class_name; `<head>_classify` -> classes, scores. Per-class precision, recall and F1 in
the run's report; a confusion matrix for `classes` and `pair_classes`.

Example:
    >>> from kerasbert.tasks import get_task
    >>> CLASSIFICATION.scores(get_task("para"), [0, 1, 1, 0], np.array([0.2, 0.9, 0.4, 0.1]))
    {'para_accuracy': 0.75, 'para_f1': 0.6666666666666666}
    >>> CLASSIFICATION.per_class(get_task("para"), [0, 1, 1], np.array([0.2, 0.9, 0.4]))["duplicate"]
    {'precision': 1.0, 'recall': 0.5, 'f1': 0.6666666666666666, 'support': 2}
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from kerasbert.data.rows import DataError
from kerasbert.errors import TaskError
from kerasbert.families.sentence import ClassSettings, SentenceFamily
from kerasbert.labels import label_key, sorted_labels

BINARY = "pair_binary"  # one output column: the second class's probability


@dataclasses.dataclass(frozen=True)
class ClassificationSettings(ClassSettings):
    """A classes task's columns and classes (`ClassSettings`), and a pair_binary bi-encoder's
    multiple-negatives ranking loss on its positive pairs (`heads.para_mnrl_weight` and
    `heads.mnrl_scale` until issue 86).

    >>> ClassificationSettings(text_a="q1", text_b="q2", mnrl_weight=0.5).mnrl_scale
    20.0
    """

    mnrl_weight: float = 0.0  # its weight beside the binary cross-entropy (0: none)
    mnrl_scale: float = 20.0  # the inverse temperature of its softmax


class Classification(SentenceFamily):
    name = "classification"
    settings = ClassificationSettings
    kinds = ("classes", "pair_classes", BINARY)
    metrics = {"classes": ("accuracy",), "pair_classes": ("accuracy",), BINARY: ("accuracy", "f1")}
    architecture = "BertForSequenceClassification"
    problem_type = "single_label_classification"
    serving_verb = "classify"

    def check_labels(self, task, fail):
        settings = task.settings
        if settings.labels and settings.class_names and len(settings.labels) != len(settings.class_names):
            fail(f"{len(settings.class_names)} class names for {len(settings.labels)} labels")
        for name, values in (("labels", settings.labels), ("class_names", settings.class_names)):
            if len(set(values)) != len(values):
                fail(f"{name} names a class twice: {list(values)}")
        if task.kind == BINARY and settings.num_classes not in (0, 2):
            fail(f"a pair_binary task has 2 classes. Received: {settings.num_classes}")
        if self.is_resolved(task) and settings.num_classes < 2:
            fail(f"a classes task needs at least 2 classes. Received: {list(settings.labels or settings.class_names)}")
        if settings.mnrl_weight < 0 or (settings.mnrl_weight and task.kind != BINARY):
            fail(f"mnrl_weight is a pair_binary task's, >= 0. Received: {settings.mnrl_weight!r}")

    def check_heads(self, task, pair_encoder):
        if task.settings.mnrl_weight and self.encoder_of(task, pair_encoder) != "bi":
            raise TaskError(f"task {task.name!r}: mnrl_weight > 0 needs a bi-encoder pair head: heads.pair_encoder=bi")

    def upgraded_heads(self, task, heads):
        old = {"mnrl_weight": heads.get("para_mnrl_weight", 0.0), "mnrl_scale": heads.get("mnrl_scale", 20.0)}
        return {key: value for key, value in old.items()
                if task.kind == BINARY and value != getattr(ClassificationSettings, key) and
                getattr(task.settings, key) == getattr(ClassificationSettings, key)}

    def is_resolved(self, task):
        return bool(task.settings.num_classes)

    def resolved(self, task, train_labels):
        return dataclasses.replace(task, labels=sorted_labels(train_labels))

    # --- Files ----------------------------------------------------------------------------

    def train_labels(self, task, path, column, rows):
        """The non-empty labels of a training file's `rows`; DataError for one class only."""
        values = [row.label for row in rows
                  if row.label is not None and not (isinstance(row.label, str) and not row.label.strip())]
        distinct = {label_key(value) for value in values}
        if len(distinct) == 1:
            raise DataError(f"{path}: column {column!r} has one class only ({distinct.pop()!r}); a "
                            f"classes task needs two or more")
        return values

    def label(self, task, value, where):
        return class_label(task, value, where)

    def check_training(self, task, path, column, labels):
        seen = {int(label) for label in labels}
        names = task.settings.served_names
        unseen = [names[i] for i in range(len(names)) if i not in seen]
        if unseen:
            raise DataError(f"{path}: column {column!r} has no training example of class(es) {unseen} "
                            f"of task {task.name!r}")

    def describe(self, task):
        return f", classes {list(task.settings.served_names)}"

    # --- Model ----------------------------------------------------------------------------

    def head_units(self, task):
        return 1 if task.kind == BINARY else task.settings.num_classes

    def head_output_from(self, model, name, u, v=None, training=False):
        import tensorflow as tf

        features = u if v is None else tf.concat([u, v, tf.abs(u - v), u * v], axis=-1)  # (batch, 4 * hidden)
        logits = model.head(name)(model.dropout(features, training=training))  # (batch, classes or 1)
        return logits[:, 0] if model.task_specs[name].kind == BINARY else logits

    def prediction(self, model, name, u, v=None):
        import tensorflow as tf

        output = self.head_output_from(model, name, u, v)
        return tf.sigmoid(output) if model.task_specs[name].kind == BINARY else tf.nn.softmax(output)

    def loss(self, model, name, x, y):
        import keras
        import tensorflow as tf

        y = tf.reshape(y, [-1])  # (batch,)
        if model.task_specs[name].kind == BINARY:
            return self._binary_loss(model, name, x, y)
        return tf.reduce_mean(keras.losses.sparse_categorical_crossentropy(
            tf.cast(y, tf.int32), model.head_output(name, x, training=True), from_logits=True))

    def _binary_loss(self, model, name, x, y):
        import keras
        import tensorflow as tf

        u, v = model.task_embeddings(name, x, training=True)
        loss = tf.reduce_mean(keras.losses.binary_crossentropy(
            y[:, None], self.head_output_from(model, name, u, v, training=True)[:, None], from_logits=True))
        settings = model.task_specs[name].settings
        if settings.mnrl_weight:
            # Multiple negatives ranking on the same embeddings: each positive's b must
            # outscore the other b's.
            scores = settings.mnrl_scale * tf.matmul(tf.math.l2_normalize(u, -1),
                                                  tf.math.l2_normalize(v, -1), transpose_b=True)
            ranking = keras.losses.sparse_categorical_crossentropy(
                tf.range(tf.shape(y)[0]), scores, from_logits=True)  # (batch,)
            positives = tf.cast(y > 0.5, ranking.dtype)
            loss += settings.mnrl_weight * tf.math.divide_no_nan(
                tf.reduce_sum(ranking * positives), tf.reduce_sum(positives))
        return loss

    # --- Evaluation -----------------------------------------------------------------------

    def predicted_classes(self, task, predictions) -> np.ndarray:
        """Class ids from predictions (probabilities, or pair_binary's probability)."""
        return (predictions >= 0.5).astype(int) if task.kind == BINARY else predictions.argmax(-1)

    def scores(self, task, references, predictions):
        labels, names = np.asarray(references), task.metric_names
        if task.kind != BINARY:
            return {names[0]: float(np.mean(predictions.argmax(-1) == labels))}
        predicted = predictions >= 0.5
        truth = labels >= 0.5
        true_positives = np.sum(predicted & truth)
        precision = true_positives / max(np.sum(predicted), 1)
        recall = true_positives / max(np.sum(truth), 1)
        f1 = 2 * precision * recall / max(precision + recall, 1e-12)
        return {names[0]: float(np.mean(predicted == truth)), names[1]: float(f1)}

    def per_class(self, task, references, predictions):
        return class_report(task, references, self.predicted_classes(task, predictions))

    def head_names(self, task):
        return task.settings.served_names

    def head_order(self, old, task):
        return slice(None) if task.kind == BINARY else super().head_order(old, task)

    def same_head_names(self, old, task) -> bool:
        if task.kind == BINARY:  # one output column: its two names cannot be reordered
            return tuple(self.head_names(old)) == tuple(self.head_names(task))
        return super().same_head_names(old, task)

    def has_confusion(self, task):
        return task.kind != BINARY

    # --- Serving --------------------------------------------------------------------------

    def serving_outputs(self, task, prediction):
        import tensorflow as tf

        if task.kind == BINARY:
            result = {"probability": prediction, "label": tf.cast(prediction >= 0.5, tf.int64)}
        else:
            result = {"probabilities": prediction, "label": tf.argmax(prediction, axis=-1)}
        result["class_name"] = tf.gather(tf.constant(task.settings.served_names), result["label"])
        return result

    def examples_outputs(self, task, outputs):
        import tensorflow as tf

        from kerasbert.families.sentence_export import classes_and_scores

        if task.kind == BINARY:
            probability = outputs["probability"]
            return classes_and_scores(tf.stack([1.0 - probability, probability], axis=-1), task.settings.served_names)
        return classes_and_scores(outputs["probabilities"], task.settings.served_names)

    # --- transformers ---------------------------------------------------------------------

    def transformers_labels(self, task):
        return list(task.settings.served_names)

    def head_from_transformers(self, task, weight, bias, labels):
        if task.kind == BINARY:  # softmax over (z0, z1) is sigmoid(z1 - z0)
            return (weight[1] - weight[0])[None], (bias[1] - bias[0])[None]
        return weight, bias

    def head_to_transformers(self, task, weight, bias):
        if task.kind == BINARY:  # rows (0, z): softmax gives sigmoid(z) to the second class
            return np.concatenate([np.zeros_like(weight), weight]), np.concatenate([np.zeros_like(bias), bias])
        return weight, bias


def class_label(task, value, where: str) -> int:
    """The class id of a file's label `value` (at `where`: path, line, column): ValueError (a
    damaged row) for a number that is not finite, DataError for a value that is not a class.

    >>> from kerasbert.tasks import get_task
    >>> class_label(get_task("para"), "1.0", "quora.tsv:2: column 'is_duplicate'")
    1
    """
    number = value if isinstance(value, (int, float)) else _float_or_none(value)
    if number is not None and not math.isfinite(number):
        raise ValueError(f"label {value!r} is not a finite number")
    try:
        return task.settings.class_of(value)
    except ValueError:
        raise DataError(f"{where}: label {value!r} is not one of task {task.name!r}'s classes "
                        f"{list(task.settings.label_values)}") from None


def _float_or_none(text):
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


def class_report(task, labels, predicted) -> dict[str, dict[str, float]]:
    """Per class of a classes task: precision, recall, F1 and support, by class name.

    >>> from kerasbert.tasks import get_task
    >>> class_report(get_task("para"), [0, 1, 1], [0, 1, 0])["duplicate"]
    {'precision': 1.0, 'recall': 0.5, 'f1': 0.6666666666666666, 'support': 2}
    """
    labels, predicted = np.asarray(labels, int), np.asarray(predicted, int)
    report = {}
    for index, name in enumerate(task.settings.served_names):
        true_positives = int(np.sum((predicted == index) & (labels == index)))
        precision = true_positives / max(int(np.sum(predicted == index)), 1)
        recall = true_positives / max(int(np.sum(labels == index)), 1)
        report[name] = {"precision": precision, "recall": recall,
                        "f1": 2 * precision * recall / (precision + recall) if precision + recall else 0.0,
                        "support": int(np.sum(labels == index))}
    return report


CLASSIFICATION = Classification()
