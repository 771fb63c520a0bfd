"""FusedAdamW is keras' AdamW with a fused kernel: the same weights after the same steps,
for dense and for sparse (embedding) gradients, with weight decay, its exclusions,
clipping and a schedule, where epsilon is too small to matter; and it saves and loads as
keras' does. Where a batch repeats a token, clipping and the Adam moments see the token's
summed gradient, and epsilon is added to the bias-corrected sqrt(v), as PyTorch does
(keras' own clips the norm of the repeats' separate rows, sums their squares, and adds
epsilon before the bias correction)."""

import keras
import numpy as np
import pytest
import tensorflow as tf

from kerasbert.config import TrainConfig
from kerasbert.training.optim import FusedAdamW, make_optimizer, make_schedule


def tiny_model():
    keras.utils.set_random_seed(3)
    ids = keras.Input((6,), dtype="int32")
    x = keras.layers.Embedding(50, 8, name="embedding")(ids)  # a sparse (IndexedSlices) gradient
    x = keras.layers.LayerNormalization(name="norm")(keras.layers.Dense(8, activation="gelu")(x))
    return keras.Model(ids, keras.layers.Dense(3)(keras.layers.GlobalAveragePooling1D()(x)))


def distinct_ids(rng, batches):
    """Batches of 4 rows x 6 ids with no id twice in a batch: keras' AdamW is Adam there."""
    return np.concatenate([rng.choice(30, 24, replace=False).reshape(4, 6) for _ in range(batches)])


def trained(optimizer_class, steps=12):
    config = TrainConfig(learning_rate=3e-2, total_steps=steps, steps_per_block=steps, warmup_fraction=0.25, weight_decay=0.1, clipnorm=0.5)
    # epsilon too small to matter: the two classes add it at different places
    optimizer = optimizer_class(learning_rate=make_schedule(config), weight_decay=config.weight_decay,
                                clipnorm=config.clipnorm, epsilon=1e-12)
    optimizer.exclude_from_weight_decay(var_names=["bias", "gamma", "beta"])
    model = tiny_model()
    model.compile(optimizer=optimizer, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    rng = np.random.default_rng(0)
    ids, labels = distinct_ids(rng, steps), rng.integers(0, 3, steps * 4)  # rows 30-49 unused
    start = [w.copy() for w in model.get_weights()]
    model.fit(ids, labels, batch_size=4, epochs=1, shuffle=False, verbose=0)
    return model, start


def test_the_same_weights_as_keras_adamw_after_the_same_steps_where_epsilon_does_not_matter():
    ours, start = trained(FusedAdamW)
    theirs, _ = trained(keras.optimizers.AdamW)
    for variable, a, b, s in zip(ours.weights, ours.get_weights(), theirs.get_weights(), start):
        assert np.abs(a - s).max() > 1e-3 or "embedding" in variable.path, variable.path  # it trained
        np.testing.assert_allclose(a, b, atol=2e-6, err_msg=variable.path)
    unused = slice(30, 50)  # embedding rows without gradients still decay and move with their moments
    assert np.abs(ours.get_weights()[0][unused] - start[0][unused]).max() > 1e-4
    for a, b in zip(ours.optimizer.variables, theirs.optimizer.variables):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=2e-6, err_msg=a.path)


def test_make_optimizer_gives_it_and_a_saved_model_loads_it(tmp_path):
    assert isinstance(make_optimizer(TrainConfig()), FusedAdamW)
    model, _ = trained(FusedAdamW, steps=4)
    model.save(tmp_path / "m.keras")
    loaded = keras.saving.load_model(tmp_path / "m.keras")
    assert isinstance(loaded.optimizer, FusedAdamW)
    assert loaded.optimizer.weight_decay == pytest.approx(0.1)
    for a, b in zip(model.optimizer.variables, loaded.optimizer.variables):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_repeated_token_takes_the_adam_step_of_its_summed_gradient():
    model = tiny_model()
    model.compile(optimizer=FusedAdamW(learning_rate=1e-2, weight_decay=0.0),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ids, labels = np.array([[3, 3, 3, 4, 5, 6]] * 2 + [[3, 7, 8, 9, 10, 11]] * 2), np.array([0, 1, 2, 0])
    with tf.GradientTape() as tape:
        loss = model.compute_loss(y=labels, y_pred=model(ids))
    gradient = tf.convert_to_tensor(tape.gradient(loss, model.weights[0])).numpy()  # (vocab, 8), repeats summed
    model.train_on_batch(ids, labels)
    velocity = np.asarray(model.optimizer._velocities[0])  # the embedding's, the first weight
    np.testing.assert_allclose(velocity, (1 - 0.999) * gradient ** 2, rtol=1e-4, atol=1e-12)


def test_clipnorm_clips_a_repeated_tokens_summed_gradient():
    model = tiny_model()
    clipnorm = 1e-3
    model.compile(optimizer=FusedAdamW(learning_rate=1e-2, weight_decay=0.0, clipnorm=clipnorm),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    ids, labels = np.array([[3, 3, 3, 3, 3, 3]] * 4), np.array([0, 1, 2, 0])
    with tf.GradientTape() as tape:
        loss = model.compute_loss(y=labels, y_pred=model(ids))
    gradient = tf.convert_to_tensor(tape.gradient(loss, model.weights[0])).numpy()  # one row, 24 repeats summed
    norm = np.linalg.norm(gradient)
    assert norm > clipnorm  # clipped, so the norm that clips decides the step
    model.train_on_batch(ids, labels)
    velocity = np.asarray(model.optimizer._velocities[0])
    np.testing.assert_allclose(velocity, (1 - 0.999) * (gradient * clipnorm / norm) ** 2, rtol=1e-4, atol=1e-14)


def test_epsilon_is_added_to_the_bias_corrected_root_of_v_as_in_pytorch():
    # One step on a gradient of eps: PyTorch's AdamW moves a weight by lr g / (|g| + eps) =
    # lr / 2; keras' AdamW, with eps on the uncorrected sqrt(v), by about lr / 33.
    learning_rate, eps = 0.1, 1e-6
    weight = keras.Variable(np.zeros(3, np.float32))
    optimizer = FusedAdamW(learning_rate=learning_rate, weight_decay=0.0, epsilon=eps)
    optimizer.apply_gradients([(tf.fill([3], eps), weight)])
    np.testing.assert_allclose(np.asarray(weight), -learning_rate / 2, rtol=1e-4)


@pytest.mark.parametrize("scope", ["each", "global"])
def test_clip_scope_bounds_each_gradient_or_all_of_them_together(scope):
    # Two weights with gradients of norm 3 and 4 (5 together), clipnorm 1: "each" takes
    # each to norm 1, "global" scales both by 1/5 (BERT's and PyTorch's clip_grad_norm_).
    config = TrainConfig(learning_rate=1e-3, weight_decay=0.0, warmup_fraction=0.0, clipnorm=1.0, clip_scope=scope)
    optimizer = make_optimizer(config)
    weights = [keras.Variable(np.zeros(2, np.float32)), keras.Variable(np.zeros(2, np.float32))]
    gradients = [tf.constant([3.0, 0.0]), tf.constant([0.0, 4.0])]
    optimizer.apply_gradients(zip(gradients, weights))
    first_moments = [np.asarray(m) / (1 - 0.9) for m in optimizer._momentums]  # the clipped gradients
    scales = [1 / 3, 1 / 4] if scope == "each" else [1 / 5, 1 / 5]
    for moment, gradient, scale in zip(first_moments, gradients, scales):
        np.testing.assert_allclose(moment, gradient.numpy() * scale, rtol=1e-5)


def test_a_clip_scope_that_does_not_exist_is_refused():
    from kerasbert.errors import ConfigError

    with pytest.raises(ConfigError, match="train.clip_scope must be each or global. Received: 'all'"):
        TrainConfig(clip_scope="all")
