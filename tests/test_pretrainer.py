"""The pretraining model: shapes, config round trip, .keras save/load, tied head, MLM loss."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasbert.config import ModelConfig, TrainConfig
from kerasbert.models.encoder import TOKEN_EMBEDDING_STDDEV, build_encoder, sinusoidal_positions
from kerasbert.models.pretrainer import BertPretrainer, pretraining_compile_args
from kerasbert.pretraining.run import set_mlm_bias, unigram_log_prior
from kerasbert.training.head_warmup import warm_up_heads
from kerasbert.training.optim import make_optimizer

VOCAB, SEQ, K = 15, 6, 3


@pytest.fixture
def model():
    keras.utils.set_random_seed(0)
    encoder = build_encoder(ModelConfig(preset="custom", num_layers=1, hidden_dim=8, num_heads=2,
                                        max_sequence_length=16), VOCAB)
    model = BertPretrainer(encoder, mask_selection_length=K)
    model.compile(**pretraining_compile_args(model, make_optimizer(TrainConfig())))
    return model


def inputs(batch=4):
    # Distinct values per field, so a mix-up of inputs changes the outputs.
    return {
        "token_ids": np.array([[2, 5, 6, 3, 7, 3]] * batch, "int32"),
        "segment_ids": np.array([[0, 0, 0, 0, 1, 1]] * batch, "int32"),
        "padding_mask": np.array([[1, 1, 1, 1, 1, 1]] * (batch - 1) + [[1, 1, 1, 1, 0, 0]], "int32"),
        "mask_positions": np.array([[1, 4, 0]] * batch, "int32"),
    }


def test_output_shapes(model):
    out = model.predict(inputs(), verbose=0)
    assert out["mlm"].shape == (4, K, VOCAB)
    assert out["nsp"].shape == (4, 2)
    assert out["mlm"].dtype == np.float32


def test_mlm_head_is_tied_to_token_embedding(model):
    assert model.mlm_head.token_embedding is model.backbone.token_embedding


def test_get_config_round_trip(model):
    clone = BertPretrainer.from_config(model.get_config())
    assert clone.get_config() == model.get_config()
    assert clone.count_params() == model.count_params()


def test_keras_save_load_gives_same_outputs_and_keeps_tie(model, tmp_path):
    path = str(tmp_path / "pretrainer.keras")
    model.save(path)
    loaded = keras.models.load_model(path)
    assert loaded.mlm_head.token_embedding is loaded.backbone.token_embedding
    expected, actual = model.predict(inputs(), verbose=0), loaded.predict(inputs(), verbose=0)
    for key in expected:
        np.testing.assert_allclose(actual[key], expected[key], atol=1e-6)


def test_mlm_loss_is_mean_over_masked_positions_only(model):
    x = inputs()
    logits = model.predict(x, verbose=0)["mlm"]
    labels = np.array([[5, 7, 0]] * 4, "int32")
    weights = np.array([[1, 1, 0]] * 4, "float32")
    y = {"mlm": labels, "nsp": np.array([1, 0, 1, 0], "int32")}
    w = {"mlm": weights, "nsp": np.ones(4, "float32")}
    loss = model.evaluate(x, y, sample_weight=w, return_dict=True, verbose=0)["mlm_loss"]
    log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    picked = -np.take_along_axis(log_probs, labels[..., None], -1)[..., 0]
    assert loss == pytest.approx((picked * weights).sum() / weights.sum(), rel=1e-5)
    # Changing the label of an unmasked (weight 0) slot changes nothing.
    y_other = {**y, "mlm": np.array([[5, 7, 9]] * 4, "int32")}
    other = model.evaluate(x, y_other, sample_weight=w, return_dict=True, verbose=0)["mlm_loss"]
    assert other == pytest.approx(loss, rel=1e-6)


def test_nsp_loss_weight_scales_nsp_in_the_training_loss_only(model):
    x = inputs()
    y = {"mlm": np.array([[5, 7, 0]] * 4, "int32"), "nsp": np.array([1, 0, 1, 0], "int32")}
    w = {"mlm": np.array([[1, 1, 0]] * 4, "float32"), "nsp": np.ones(4, "float32")}
    plain = model.evaluate(x, y, sample_weight=w, return_dict=True, verbose=0)
    model.compile(**pretraining_compile_args(model, make_optimizer(TrainConfig()), nsp_loss_weight=5.0))
    weighted = model.evaluate(x, y, sample_weight=w, return_dict=True, verbose=0)
    assert weighted["mlm_loss"] == pytest.approx(plain["mlm_loss"], rel=1e-6)
    assert weighted["nsp_loss"] == pytest.approx(plain["nsp_loss"], rel=1e-6)
    assert plain["loss"] == pytest.approx(plain["mlm_loss"] + plain["nsp_loss"], rel=1e-5)
    assert weighted["loss"] == pytest.approx(plain["mlm_loss"] + 5.0 * plain["nsp_loss"], rel=1e-5)


def test_sinusoidal_positions_make_position_similarity_depend_on_offset_only():
    config = dict(preset="custom", num_layers=1, hidden_dim=16, num_heads=2, max_sequence_length=16)
    encoder = build_encoder(ModelConfig(**config, position_init="sinusoidal"), VOCAB)
    table = keras.ops.convert_to_numpy(encoder.position_embedding.position_embeddings)
    np.testing.assert_allclose(table, sinusoidal_positions(*table.shape))
    assert np.sqrt(np.mean(table**2)) == pytest.approx(TOKEN_EMBEDDING_STDDEV, rel=1e-4)  # token scale
    similarity = table[:64] @ table[:64].T
    for offset in (0, 1, 5):  # Toeplitz: <p_i, p_i+offset> is the same for every i
        diagonal = np.diagonal(similarity, offset)
        np.testing.assert_allclose(diagonal, diagonal[0], atol=1e-7)
    random = build_encoder(ModelConfig(**config), VOCAB).position_embedding.position_embeddings
    assert not np.allclose(keras.ops.convert_to_numpy(random), table)


def test_unigram_prior_is_smoothed_log_frequency():
    prior = unigram_log_prior([[[5, 5, 5], [6]], [[5, 7]]], vocabulary_size=VOCAB)
    counts = np.ones(VOCAB)
    counts[[5, 6, 7]] += [4, 1, 1]
    np.testing.assert_allclose(prior, np.log(counts / counts.sum()), rtol=1e-6)


def test_mlm_bias_prior_lowers_the_starting_loss_on_text_with_that_distribution(model):
    rng = np.random.default_rng(0)
    frequencies = rng.dirichlet(np.full(VOCAB, 0.3))
    labels = rng.choice(VOCAB, size=(4, K), p=frequencies).astype("int32")
    y = {"mlm": labels, "nsp": np.array([1, 0, 1, 0], "int32")}

    def mlm_loss():
        return model.evaluate(inputs(), y, return_dict=True, verbose=0)["mlm_loss"]

    before = mlm_loss()
    set_mlm_bias(model, np.log(frequencies).astype("float32"))
    after = mlm_loss()
    entropy = -(frequencies * np.log(frequencies)).sum()
    assert after < before - 0.5 and after == pytest.approx(entropy, abs=1.0)


def test_head_warmup_trains_the_heads_and_leaves_the_encoder_alone(model):
    x = inputs()
    y = {"mlm": np.array([[5, 7, 0]] * 4, "int32"), "nsp": np.array([1, 0, 1, 0], "int32")}
    w = {"mlm": np.array([[1, 1, 0]] * 4, "float32"), "nsp": np.ones(4, "float32")}
    data = tf.data.Dataset.from_tensors((x, y, w)).repeat()
    encoder_before = [v.numpy().copy() for v in model.backbone.weights]
    encoder_paths = {v.path for v in model.backbone.weights}
    heads = [v for v in model.weights if v.path not in encoder_paths]
    heads_before = [v.numpy().copy() for v in heads]

    # Eager (here and below): which weights move, not the graph, which the pipelines' tests trace.
    warm_up_heads(model, data, steps=3, learning_rate=1e-2, verbose=0,
                  compile_model=lambda optimizer: model.compile(**pretraining_compile_args(model, optimizer),
                                                                run_eagerly=True))

    for before, variable in zip(encoder_before, model.backbone.weights):  # tied embedding included
        np.testing.assert_array_equal(variable.numpy(), before, err_msg=variable.path)
    assert len(heads) == 7  # MLM dense kernel, bias, LayerNorm gamma, beta, output bias; NSP kernel, bias
    for before, variable in zip(heads_before, heads):
        assert not np.array_equal(variable.numpy(), before), variable.path
    # Compiled again, the whole model trains.
    assert model.backbone.trainable
    model.compile(**pretraining_compile_args(model, make_optimizer(TrainConfig())), run_eagerly=True)
    model.fit(data, steps_per_epoch=3, epochs=1, verbose=0)  # the first step's lr is 0 (warm-up)
    changed = [not np.array_equal(v.numpy(), b) for v, b in zip(model.backbone.weights, encoder_before)]
    assert all(changed)
