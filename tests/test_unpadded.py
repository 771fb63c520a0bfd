"""The unpadded forward pass computes what keras-hub's BertBackbone computes, at the real tokens."""

import numpy as np
import pytest
import tensorflow as tf

from kerasbert.config import ModelConfig
from kerasbert.finetuning.model import MultitaskBert
from kerasbert.models.encoder import build_encoder
from kerasbert.models import unpadded as unpadded_module
from kerasbert.models.unpadded import encode_tokens, sentence_embedding
from kerasbert.tasks import Task


def batch():
    """Rows of different lengths (one of them full, one a single token), two segments, and
    distinct values in every field."""
    padding_mask = np.array([[1, 1, 1, 1, 1, 1, 0, 0], [1, 1, 1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0, 0, 0]], "int32")
    token_ids = np.where(padding_mask > 0, np.arange(24).reshape(3, 8) % 17 + 3, 0).astype("int32")
    segment_ids = np.array([[0, 0, 0, 1, 1, 1, 0, 0], [0, 0, 0, 0, 1, 1, 1, 1], [0] * 8], "int32")
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


@pytest.fixture(scope="module")
def backbone():
    encoder = build_encoder(ModelConfig(preset="custom", num_layers=2, hidden_dim=16, num_heads=2, dropout=0.1), 20)
    for variable in encoder.weights:  # away from the initialisation (zero biases, unit LayerNorm)
        variable.assign(np.random.default_rng(len(variable.path)).normal(0, 0.2, variable.shape))
    return encoder


@pytest.mark.parametrize("rows_per_chunk", [1, 2, 8])
def test_token_states_equal_the_backbones_at_real_tokens(backbone, rows_per_chunk, monkeypatch):
    monkeypatch.setattr(unpadded_module, "ROWS_PER_CHUNK", rows_per_chunk)  # inference attention, rows sorted
    x = batch()
    real = x["padding_mask"] > 0
    expected = backbone(x)["sequence_output"].numpy()[real]
    states, tokens = encode_tokens(backbone, {k: tf.constant(v) for k, v in x.items()})
    np.testing.assert_allclose(tokens.scatter(states).numpy()[real], expected, atol=1e-5)
    np.testing.assert_array_equal(tokens.row.numpy(), [1] * 8 + [0] * 6 + [2])  # longest row first


def test_inference_attention_takes_rows_without_tokens_and_empty_batches(backbone, monkeypatch):
    monkeypatch.setattr(unpadded_module, "ROWS_PER_CHUNK", 2)  # the last chunk holds only empty rows
    x = batch()
    x = {k: np.concatenate([v[:1], np.zeros_like(v[:2]), v[1:]]) for k, v in x.items()}  # rows 1, 2 empty
    real = x["padding_mask"] > 0
    states, tokens = encode_tokens(backbone, {k: tf.constant(v) for k, v in x.items()})
    np.testing.assert_allclose(tokens.scatter(states).numpy()[real],
                               backbone(x)["sequence_output"].numpy()[real], atol=1e-5)
    empty = {k: tf.constant(v[:0]) for k, v in x.items()}
    assert encode_tokens(backbone, empty)[0].shape == (0, 16)
    assert tf.function(lambda inputs: encode_tokens(backbone, inputs)[0])(empty).shape == (0, 16)  # as exported


@pytest.mark.parametrize("pooling", ["mean", "cls"])
def test_sentence_embedding_equals_multitask_embed(backbone, pooling):
    model = MultitaskBert(backbone, tasks=("sst",), pooling=pooling)
    x = batch()
    expected = model.embed({k: tf.constant(v) for k, v in x.items()}).numpy()
    got = tf.function(lambda inputs: sentence_embedding(backbone, inputs, pooling))({k: tf.constant(v) for k, v in x.items()})
    np.testing.assert_allclose(got.numpy(), expected, atol=1e-5)


def test_gradients_equal_the_padded_ones_and_dropout_applies(backbone):
    model = MultitaskBert(backbone, tasks=("sst",))
    x = {k: tf.constant(v) for k, v in batch().items()}
    direction = tf.constant(np.random.default_rng(1).normal(size=(3, 16)), tf.float32)
    gradients = {}
    for unpadded in (False, True):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(model.embed(x, unpadded=unpadded) * direction)
        gradients[unpadded] = tape.gradient(loss, backbone.trainable_variables)
    for variable, padded, ours in zip(backbone.trainable_variables, gradients[False], gradients[True]):
        if "pooled_dense" in variable.path:  # mean pooling does not use the pooler
            continue
        np.testing.assert_allclose(tf.convert_to_tensor(ours).numpy(), tf.convert_to_tensor(padded).numpy(),
                                   atol=1e-5, err_msg=variable.path)
    first, second = (model.embed(x, training=True, unpadded=True).numpy() for _ in range(2))
    assert not np.allclose(first, second)  # the backbone's dropout (0.1) is on in training


@pytest.mark.parametrize("kind, keys", [("tags", {"labels": ("O", "B-PER", "I-PER")}), ("span", {})])
def test_tags_and_span_heads_read_the_same_states_and_train_alike(backbone, kind, keys):
    """The families' heads read every token's state: unpadded (where serving spends its time on
    padding: NER sentences in file order fill about half their batch) they equal the padded
    backbone's at the real tokens, and so do their losses' gradients."""
    # Without dropout: its masks are drawn per call, and the two paths draw differently.
    still = build_encoder(ModelConfig(preset="custom", num_layers=2, hidden_dim=16, num_heads=2, dropout=0.0), 20)
    still.set_weights(backbone.get_weights())
    model = MultitaskBert(still, tasks=(Task("task", kind, **keys),), dropout=0.0)
    x = {k: tf.constant(v) for k, v in batch().items()}
    real = batch()["padding_mask"] > 0
    outputs, gradients = {}, {}
    for unpadded in (False, True):
        model.unpadded = unpadded
        y = tf.constant([[0, 1, 2, 0, -1, -1, -1, -1], [1, 2, 2, 0, 0, 0, 1, 2], [0] + [-1] * 7]) if kind == "tags" \
            else tf.constant([[1, 3], [2, 6], [0, 0]])
        with tf.GradientTape() as tape:
            loss = model.task_loss("task", x, y)
        outputs[unpadded] = model.head_output("task", x).numpy()
        gradients[unpadded] = tape.gradient(loss, model.trainable_variables)
    np.testing.assert_allclose(outputs[True][real], outputs[False][real], atol=1e-5)
    assert not np.allclose(outputs[True][~real], outputs[False][~real])  # padding skipped: the unpadded path ran
    for variable, padded, ours in zip(model.trainable_variables, gradients[False], gradients[True]):
        if "pooled_dense" in variable.path:  # the token heads do not use the pooler
            continue
        np.testing.assert_allclose(tf.convert_to_tensor(ours).numpy(), tf.convert_to_tensor(padded).numpy(),
                                   atol=1e-5, err_msg=variable.path)


def test_unavailable_keras_hub_runs_padded(backbone, monkeypatch):
    from kerasbert.compat import keras_hub as compat

    monkeypatch.setattr(compat, "CHECKED_KERAS_HUB", ("0.0.0",))
    model = MultitaskBert(backbone, tasks=("sst",))
    assert not model.unpadded
    x = {k: tf.constant(v) for k, v in batch().items()}
    np.testing.assert_allclose(model.embed(x, unpadded=True).numpy(), model.embed(x).numpy(), atol=1e-6)


@pytest.mark.parametrize("activation, pooling", [("gelu_approximate", "mean"), ("gelu", "cls")])
def test_one_row_embedding_equals_the_unpadded_one(backbone, activation, pooling):
    """A one-sentence request's few-node encoder (kerasbert/models/one_row.py) gives the unpadded
    encoder's embedding at every precision, for rows with padding or without tokens, and the
    padded backbone's for a row whose padding has holes."""
    from kerasbert.models.encoder import BertEncoder
    from kerasbert.models.one_row import one_row_embedding
    from kerasbert.quantize import serving_precision

    encoder = BertEncoder(vocabulary_size=20, num_layers=2, num_heads=2, hidden_dim=16, intermediate_dim=64,
                          activation=activation)
    encoder.set_weights(backbone.get_weights())
    def one_row(inputs, weights):
        return one_row_embedding(encoder, inputs, pooling, weights)

    rows = [{k: tf.constant(v[i:i + 1]) for k, v in batch().items()} for i in range(3)]
    empty = {**rows[1], "padding_mask": tf.zeros((1, 8), tf.int32)}
    for compute_dtype in (None, "bfloat16", "int8"):
        weights = serving_precision(encoder, compute_dtype)
        for x in [*rows, empty]:
            expected = sentence_embedding(encoder, x, pooling, compute_dtype=weights).numpy()
            np.testing.assert_allclose(one_row(x, weights).numpy(), expected, atol=1e-5,
                                       err_msg=f"{compute_dtype}, mask {x['padding_mask'].numpy()}")
    holes = {**rows[1], "padding_mask": tf.constant([[1, 1, 0, 1, 1, 1, 0, 1]])}
    padded = MultitaskBert(encoder, tasks=("sst",), pooling=pooling).embed(holes, unpadded=False).numpy()
    np.testing.assert_allclose(one_row(holes, None).numpy(), padded, atol=1e-5)
