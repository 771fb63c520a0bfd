"""The sentence families' serving signatures: `<head>` (text, or text_a and text_b), `<head>_tokens`
(token tensors) and TF Serving's `<head>_classify` / `<head>_regress` (serialized tf.Examples),
over the export's shared graph (`kerasbert.export.ServingGraph`: tokenize, pack, encode).

What each returns is its family's (`serving_outputs`, `examples_outputs` of
kerasbert/families/classification/ and regression/).

Example:
    >>> [spec.name for spec in token_specs("_b")]
    ['token_ids_b', 'segment_ids_b', 'padding_mask_b']
"""

from __future__ import annotations

import tensorflow as tf

from kerasbert.packing import ENCODER_KEYS

TEXT = tf.TensorSpec([None], tf.string, name="text")
TEXT_A = tf.TensorSpec([None], tf.string, name="text_a")
TEXT_B = tf.TensorSpec([None], tf.string, name="text_b")
EXAMPLES = tf.TensorSpec([None], tf.string, name="inputs")
SEGMENT = tf.RaggedTensorSpec([None, None], tf.int32, ragged_rank=1, row_splits_dtype=tf.int64)  # token ids


def token_specs(suffix: str = "") -> list[tf.TensorSpec]:
    return [tf.TensorSpec([None, None], tf.int32, name=f"{name}{suffix}") for name in ENCODER_KEYS]


def text_features(serialized, *names):
    """The bytes features `names` of serialized tf.Examples, each (batch,)."""
    spec = {name: tf.io.FixedLenFeature([], tf.string) for name in names}
    features = tf.io.parse_example(serialized, spec)
    return [features[name] for name in names]


def classes_and_scores(scores, labels: tuple[str, ...]):
    """TF Serving's classify outputs: the task's class names per row, and their scores."""
    names = tf.constant(labels)
    return {"classes": tf.tile(names[tf.newaxis], [tf.shape(scores)[0], 1]), "scores": scores}


def sentence_signatures(family, graph, task) -> dict:
    """{name: (function, input signature)} of a sentence task's text, token and :classify or
    :regress signatures; `graph` is the export's `ServingGraph`, `family` the task's."""
    name = task.name
    text_name, tokens_name, examples_name = family.signature_names(task)

    def outputs(u, v=None):
        return family.serving_outputs(task, graph.model.task_prediction_from(name, u, v))

    def from_examples(serialized):
        if family.is_pair(task):
            result = outputs(*graph.pair_embeddings(name, *text_features(serialized, "text_a", "text_b")))
        else:
            result = outputs(graph.embed_text(*text_features(serialized, "text")))
        return family.examples_outputs(task, result)

    if family.is_pair(task):
        text = (lambda a, b: outputs(*graph.pair_embeddings(name, a, b)), [TEXT_A, TEXT_B])
        token_inputs = token_specs() + (token_specs("_b") if graph.bi[name] else [])
    else:
        text = (lambda t: outputs(graph.embed_text(t)), [TEXT])
        token_inputs = token_specs()
    tokens = (lambda *t: outputs(*graph.token_embeddings(name, t)), token_inputs)
    return {text_name: text, tokens_name: tokens, examples_name: (from_examples, [EXAMPLES])}
