"""The sentence regression family: kinds `score` (one text) and `pair_score` (a pair), a number in
[min_score, max_score].

    kind        head output                              loss                metrics (headline first)
    score       min + range * sigmoid(dense(1))          mse                 pearson, spearman
    pair_score  cross-encoder: as score, on the pair;    mse, or cosine      pearson, spearman
                bi-encoder: cos(u, v) mapped from        (heads.sts_loss)
                [-1, 1] to [min_score, max_score]

With the task's score_output "linear", dense(1) itself, unclipped (transformers' regression
head). pair_score heads take `heads.sts_encoder` (default: `heads.pair_encoder`). A task's part of
`overall` is (pearson + 1) / 2. Signatures: `<head>` -> score; `<head>_regress` -> outputs.

Example:
    >>> from kerasbert.tasks import get_task
    >>> REGRESSION.scores(get_task("sts"), [0.0, 2.5, 5.0], np.array([0.5, 2.0, 4.0]))
    {'sts_pearson': 0.9966158955401239, 'sts_spearman': 1.0}
    >>> REGRESSION.headline(0.6)
    0.8
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kerasbert.families.sentence import SentenceFamily

PAIR = "pair_score"
SCORE_OUTPUTS = ("sigmoid", "linear")


def cosine(u, v):
    """Row-wise cosine similarity of two (batch, hidden) tensors."""
    import tensorflow as tf

    return tf.reduce_sum(tf.math.l2_normalize(u, -1) * tf.math.l2_normalize(v, -1), -1)


class Regression(SentenceFamily):
    name = "regression"
    kinds = ("score", PAIR)
    metrics = {"score": ("pearson", "spearman"), PAIR: ("pearson", "spearman")}
    architecture = "BertForSequenceClassification"
    serving_verb = "regress"

    def check_labels(self, task, fail):
        if task.score_output not in SCORE_OUTPUTS:
            fail(f"score_output must be sigmoid or linear. Received: {task.score_output!r}")
        elif task.min_score is not None and task.max_score is not None and not task.min_score < task.max_score:
            fail(f"min_score must be below max_score. Received: {task.min_score:g}, {task.max_score:g}")

    def is_resolved(self, task):
        return task.score_output == "linear" or (task.min_score is not None and task.max_score is not None)

    def resolved(self, task, train_labels):
        values = [float(value) for value in train_labels]
        return dataclasses.replace(task, min_score=task.min_score if task.min_score is not None else min(values),
                                   max_score=task.max_score if task.max_score is not None else max(values))

    def headline(self, value):
        return (value + 1) / 2

    def pair_encoder_of(self, task, pair_encoder, sts_encoder):
        return (sts_encoder or pair_encoder) if task.kind == PAIR else pair_encoder

    # --- Model ----------------------------------------------------------------------------

    def head_units(self, task):
        return 1

    def head_input_shape(self, model, name, hidden):
        if model.encoder_of(name) == "bi":
            return None  # a cosine: the head is never called and has no weights
        return super().head_input_shape(model, name, hidden)

    def head_output_from(self, model, name, u, v=None, training=False):
        import tensorflow as tf

        spec, head = model.task_specs[name], model.head(name)
        if v is None and spec.score_output == "linear":
            return head(model.dropout(u, training=training))[:, 0]
        low, span = spec.min_score, spec.max_score - spec.min_score
        if v is None:
            return low + span * tf.sigmoid(head(model.dropout(u, training=training))[:, 0])
        return low + span / 2 * (cosine(u, v) + 1.0)

    def prediction(self, model, name, u, v=None):
        import tensorflow as tf

        output, spec = self.head_output_from(model, name, u, v), model.task_specs[name]
        if spec.score_output == "linear" and model.encoder_of(name) != "bi":
            return output
        return tf.clip_by_value(output, spec.min_score, spec.max_score)

    def loss(self, model, name, x, y):
        import tensorflow as tf

        spec = model.task_specs[name]
        y = tf.reshape(y, [-1])  # (batch,)
        if spec.kind == PAIR and model.sts_loss == "cosine":  # cos(u, v) regressed to y's place in the range
            target = (y - spec.min_score) / (spec.max_score - spec.min_score) if spec.min_score else y / spec.max_score
            return tf.reduce_mean(tf.square(cosine(*model.pair_embeddings(x, True)) - target))
        return tf.reduce_mean(tf.square(model.head_output(name, x, training=True) - y))

    # --- Evaluation and serving -----------------------------------------------------------

    def scores(self, task, references, predictions):
        import scipy.stats  # here: it takes 2-4 s to import, and most processes never score a regression

        labels, names = np.asarray(references), task.metric_names
        return {names[0]: float(scipy.stats.pearsonr(predictions, labels)[0]),
                names[1]: float(scipy.stats.spearmanr(predictions, labels)[0])}

    def serving_outputs(self, task, prediction):
        return {"score": prediction}

    def examples_outputs(self, task, outputs):
        return {"outputs": outputs["score"]}


REGRESSION = Regression()
