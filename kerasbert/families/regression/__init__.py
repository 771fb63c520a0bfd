"""The sentence regression family: kinds `score` (one text) and `pair_score` (a pair), a number in
[min_score, max_score].

    kind        head output                              loss                metrics (headline first)
    score       min + range * sigmoid(dense(1))          mse                 pearson, spearman
    pair_score  cross-encoder: as score, on the pair;    mse, or cosine      pearson, spearman
                bi-encoder: cos(u, v) mapped from        (the task's `loss`)
                [-1, 1] to [min_score, max_score]

With the task's score_output "linear", dense(1) itself, unclipped (transformers' regression
head). A pair_score head is the task's `encoder` (default: the run's `heads.pair_encoder`;
`heads.sts_encoder` and `heads.sts_loss` until issue 86). A task's part of
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
import math

import numpy as np

from kerasbert.data.rows import DataError
from kerasbert.errors import TaskError
from kerasbert.families.sentence import ColumnSettings, SentenceFamily

PAIR = "pair_score"
SCORE_OUTPUTS = ("sigmoid", "linear")


@dataclasses.dataclass(frozen=True)
class ScoreSettings(ColumnSettings):
    """The columns of a score task and its range: `min_score`..`max_score` (None: the training
    labels'), and `score_output`: "sigmoid" (min_score + range * sigmoid(logit)) or "linear" (the
    logit, unclipped: transformers' regression head; imported checkpoints keep it, and need no range).

    >>> ScoreSettings(text="review", min_score=1, max_score=5).max_score
    5.0
    """

    min_score: float | None = None
    max_score: float | None = None
    score_output: str = "sigmoid"
    encoder: str = ""  # a pair's: cross | bi; "" = the run's heads.pair_encoder
    loss: str = "mse"  # mse on the score | cosine (cos(u, v) regressed to the score's place in the range; bi)

    def __post_init__(self):
        super().__post_init__()
        for name in ("min_score", "max_score"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, float(getattr(self, name)))


def cosine(u, v):
    """Row-wise cosine similarity of two (batch, hidden) tensors."""
    import tensorflow as tf

    return tf.reduce_sum(tf.math.l2_normalize(u, -1) * tf.math.l2_normalize(v, -1), -1)


class Regression(SentenceFamily):
    name = "regression"
    kinds = ("score", PAIR)
    metrics = {"score": ("pearson", "spearman"), PAIR: ("pearson", "spearman")}
    architecture = "BertForSequenceClassification"
    problem_type = "regression"
    serving_verb = "regress"
    settings = ScoreSettings

    def check_labels(self, task, fail):
        settings = task.settings
        if settings.score_output not in SCORE_OUTPUTS:
            fail(f"score_output must be sigmoid or linear. Received: {settings.score_output!r}")
        elif (settings.min_score is not None and settings.max_score is not None
              and not settings.min_score < settings.max_score):
            fail(f"min_score must be below max_score. Received: {settings.min_score:g}, {settings.max_score:g}")
        if settings.encoder not in ("", "cross", "bi"):
            fail(f"encoder must be cross, bi or empty (the run's heads.pair_encoder). Received: {settings.encoder!r}")
        if (settings.encoder or settings.loss != "mse") and task.kind != PAIR:
            fail(f"encoder and loss are a pair_score task's: a {task.kind} task reads one text")
        if settings.loss not in ("mse", "cosine"):
            fail(f"loss must be mse or cosine. Received: {settings.loss!r}")

    def check_heads(self, task, pair_encoder):
        if task.settings.loss == "cosine" and self.encoder_of(task, pair_encoder) != "bi":
            raise TaskError(f"task {task.name!r}: loss=cosine needs a bi-encoder similarity head (it compares "
                            f"two embeddings): encoder=bi, or heads.pair_encoder=bi")

    def upgraded_heads(self, task, heads):
        old = {"encoder": heads.get("sts_encoder", ""), "loss": heads.get("sts_loss", "mse")}
        return {key: value for key, value in old.items()
                if task.kind == PAIR and value != getattr(ScoreSettings, key) and
                getattr(task.settings, key) == getattr(ScoreSettings, key)}

    def is_resolved(self, task):
        settings = task.settings
        return settings.score_output == "linear" or (settings.min_score is not None and settings.max_score is not None)

    def resolved(self, task, train_labels):
        values, settings = [float(value) for value in train_labels], task.settings
        return dataclasses.replace(
            task, min_score=settings.min_score if settings.min_score is not None else min(values),
            max_score=settings.max_score if settings.max_score is not None else max(values))

    # --- Files ----------------------------------------------------------------------------

    def train_labels(self, task, path, column, rows):
        """The finite numeric labels of a training file's `rows` (empty ones are damaged rows,
        passed over); DataError at the first that is not a number."""
        values = []
        for row in rows:
            if row.label is None or (isinstance(row.label, str) and not row.label.strip()):
                continue
            try:
                value = float(row.label)
            except (TypeError, ValueError):
                raise DataError(f"{path}:{row.line}: column {column!r}: label {row.label!r} is not a "
                                "number; a score task's labels are numbers") from None
            if math.isfinite(value):
                values.append(value)
        return values

    def label(self, task, value, where):
        try:
            score = float(value)
        except (TypeError, ValueError):
            raise DataError(f"{where}: label {value!r} is not a number; task {task.name!r} is a {task.kind} "
                            "task (a regression)") from None
        if not math.isfinite(score):
            raise ValueError(f"label {value!r} is not a finite number")
        low, high = task.settings.min_score, task.settings.max_score
        if low is not None and not low <= score <= high:
            raise ValueError(f"score {score:g} outside [{low:g}, {high:g}]")
        return score

    def headline(self, value):
        return (value + 1) / 2

    def head_difference(self, old, task):
        difference = super().head_difference(old, task)
        ranges = [(t.settings.min_score, t.settings.max_score, t.settings.score_output) for t in (old, task)]
        if not difference and ranges[0] != ranges[1]:
            return f"its scores are {ranges[0][0]}-{ranges[0][1]} ({ranges[0][2]})"
        return difference

    def pair_encoder_of(self, task, pair_encoder):
        return task.settings.encoder or pair_encoder

    # --- Model ----------------------------------------------------------------------------

    def head_units(self, task):
        return 1

    def head_input_shape(self, model, name, hidden):
        if model.encoder_of(name) == "bi":
            return None  # a cosine: the head is never called and has no weights
        return super().head_input_shape(model, name, hidden)

    def head_output_from(self, model, name, u, v=None, training=False):
        import tensorflow as tf

        spec, head = model.task_specs[name].settings, model.head(name)
        if v is None and spec.score_output == "linear":
            return head(model.dropout(u, training=training))[:, 0]
        low, span = spec.min_score, spec.max_score - spec.min_score
        if v is None:
            return low + span * tf.sigmoid(head(model.dropout(u, training=training))[:, 0])
        return low + span / 2 * (cosine(u, v) + 1.0)

    def prediction(self, model, name, u, v=None):
        import tensorflow as tf

        output, spec = self.head_output_from(model, name, u, v), model.task_specs[name].settings
        if spec.score_output == "linear" and model.encoder_of(name) != "bi":
            return output
        return tf.clip_by_value(output, spec.min_score, spec.max_score)

    def loss(self, model, name, x, y):
        import tensorflow as tf

        spec = model.task_specs[name].settings
        y = tf.reshape(y, [-1])  # (batch,)
        if spec.loss == "cosine":  # a bi-encoder pair (check_heads): cos(u, v) regressed to y's place in the range
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
