"""The embedding family (Sentence-BERT): kind `embedding`, a bi-encoder whose sentence embeddings
are compared by cosine, trained on pairs of texts from CSV, TSV or JSON Lines files.

    files       text_a, text_b, and an optional label (a score: any numbers, only their order counts)
    loss        scored pairs: CoSENT (losses.py; sentence-transformers' recommended loss for
                similarity scores: it ranks the pairs' cosines as the scores rank the pairs, with
                no range to map the scores into); unlabelled pairs: multiple-negatives ranking,
                each (anchor, positive) against the batch's other positives
    metrics     scored: `<task>_spearman` (cosines against scores); unlabelled: `<task>_recall_at_1`,
                `<task>_mrr_at_10` (each dev anchor ranks every dev positive: ranking.py); a task's
                part of `overall` is its headline clipped to [0, 1]
    signatures  `<head>`: text -> embedding (L2-normalised, the run's heads.pooling: mean for
                all-MiniLM-L6-v2), `<head>_tokens` the same from token tensors; what
                pipelines.batch_predict --signature, pipelines.search --signature and
                pipelines.build_index read
    transformers `--format transformers`: a sentence-transformers folder (sentence_transformers.py)

No head weights: the embedding is the encoder's pooled output itself. Settings (flat keys of a
declaration): text_a, text_b, label ("" = none: unlabelled pairs), id, clean, and `scale`, the
inverse temperature of both losses (20, as sentence-transformers').

Example:
    >>> from kerasbert.tasks import Task
    >>> sim = Task("sim", "embedding", text_a="sentence1", text_b="sentence2", label="score")
    >>> sim.metric_names, sim.signature_names
    (('sim_spearman',), ('sim', 'sim_tokens'))
    >>> Task("pairs", "embedding", text_a="question", text_b="answer").metric_names
    ('pairs_recall_at_1', 'pairs_mrr_at_10')
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from kerasbert.data.rows import DataError
from kerasbert.families.base import Family
from kerasbert.families.embedding.ranking import ranking_scores, spearman
from kerasbert.families.embedding.sentence_transformers import sentence_transformers_files
from kerasbert.families.sentence import CLEANERS, ColumnSettings

KIND = "embedding"


@dataclasses.dataclass(frozen=True)
class EmbeddingSettings(ColumnSettings):
    """The pair's columns (`ColumnSettings`: text_a, text_b, id, clean), an optional score column
    `label` ("": none) and the losses' `scale`.

    >>> EmbeddingSettings(text_a="q", text_b="a").columns_for("jsonl")
    Columns(text_a='q', text_b='a', label='', id=None)
    """

    label: str = ""  # a score column: CoSENT; "": unlabelled pairs, multiple-negatives ranking
    scale: float = 20.0  # the inverse temperature of the losses' cosines


class Embedding(Family):
    name = "embedding"
    kinds = (KIND,)
    metrics = {KIND: ("spearman", "recall_at_1", "mrr_at_10")}  # scored: the first; unlabelled: the others
    architecture = "BertModel"
    settings = EmbeddingSettings

    # --- Declaration ----------------------------------------------------------------------

    def check(self, task, fail):
        settings = task.settings
        missing = [key for key in ("text_a", "text_b") if not getattr(settings, key)]
        if missing or settings.text:
            fail(f"an embedding task names its two text columns text_a and text_b (no text). "
                 f"Received: text_a={settings.text_a!r}, text_b={settings.text_b!r}, text={settings.text!r}")
        if settings.layouts:
            fail("an embedding task reads its files by their columns, not a shipped layout")
        if settings.clean not in CLEANERS:
            fail(f"clean must be ptb, twice_quoted, review or empty. Received: {settings.clean!r}")
        if not settings.scale > 0:
            fail(f"scale must be > 0. Received: {settings.scale!r}")

    def metric_names(self, task):
        names = self.metrics[KIND][:1] if task.settings.label else self.metrics[KIND][1:]
        return tuple(f"{task.name}_{metric}" for metric in names)

    def headline(self, value):
        return min(max(value, 0.0), 1.0)

    def encoder_of(self, task, pair_encoder):
        return "bi"  # each text embedded alone, whatever the run's heads.pair_encoder

    def describe(self, task):
        return ", CoSENT on its scores" if task.settings.label else ", multiple-negatives ranking"

    # --- Files ----------------------------------------------------------------------------

    def label(self, task, value, where):
        if value is None:  # unlabelled pairs
            return 0.0
        try:
            score = float(value)
        except (TypeError, ValueError):
            raise DataError(f"{where}: label {value!r} is not a number; task {task.name!r} is an embedding "
                            "task, whose label is a similarity score") from None
        if not math.isfinite(score):
            raise ValueError(f"label {value!r} is not a finite number")
        return score

    # --- Model ----------------------------------------------------------------------------

    def head_units(self, task):
        return 1  # never built (head_input_shape): the embedding needs no head

    def head_input_shape(self, model, name, hidden):
        return None

    def head_output(self, model, name, x, training=False):
        from kerasbert.families.embedding.losses import cosines

        return cosines(*model.pair_embeddings(x, training))  # (batch,)

    def loss(self, model, name, x, y):
        import tensorflow as tf

        from kerasbert.families.embedding.losses import cosent_loss, mnrl_loss

        settings = model.task_specs[name].settings
        u, v = model.pair_embeddings(x, True)  # (batch, hidden) each
        if settings.label:
            return cosent_loss(u, v, tf.reshape(y, [-1]), settings.scale)
        return mnrl_loss(u, v, settings.scale)

    def batch_prediction(self, model, name, x):
        import tensorflow as tf

        u, v = model.pair_embeddings(x, False)
        return tf.stack([tf.math.l2_normalize(u, -1), tf.math.l2_normalize(v, -1)], axis=1)  # (batch, 2, hidden)

    # --- Evaluation -----------------------------------------------------------------------

    def scores(self, task, references, predictions):
        anchors, positives = predictions[:, 0], predictions[:, 1]  # unit rows
        if task.settings.label:
            return {task.metric_names[0]: spearman(np.sum(anchors * positives, -1), references)}
        return {f"{task.name}_{name}": value for name, value in ranking_scores(anchors, positives).items()}

    def prediction_row(self, task, example, reference, prediction):
        cosine = round(float(np.dot(prediction[0], prediction[1])), 6)
        return [example.uid, reference if task.settings.label else "", cosine]

    # --- Serving --------------------------------------------------------------------------

    def serving_functions(self, model, preprocessor, graph, name):
        import tensorflow as tf

        from kerasbert.families.sentence_export import TEXT, token_specs

        head = model.task_specs[name].head
        return {head: (lambda text: {"embedding": tf.math.l2_normalize(graph.embed_text(text), -1)}, [TEXT]),
                f"{head}_tokens": (lambda *t: {"embedding": tf.math.l2_normalize(graph.encode(*t), -1)},
                                   token_specs())}

    # --- transformers ---------------------------------------------------------------------

    def transformers_refusal(self, model, name):
        if model.pooling != "mean":
            return "its embedding is the [CLS] pooler's (heads.pooling=cls: dense + tanh), which " \
                   "sentence-transformers' Pooling does not compute: fine-tune with heads.pooling=mean"
        return ""

    def transformers_files(self, model, preprocessor, name):
        return sentence_transformers_files(model.backbone.hidden_dim, preprocessor.sequence_length)


EMBEDDING = Embedding()
