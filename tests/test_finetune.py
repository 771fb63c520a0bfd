"""Multitask fine-tuning: sampling schedule, heads and losses, and the pipelines end to end."""

import collections
import functools
import json
import os

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import DATA_DIR, run_module
from kerasbert.config import ModelConfig
from kerasbert.data.task_files import Example
from kerasbert.finetuning import evaluation
from kerasbert.finetuning.data import TaskPreprocessor, interleave_tasks, task_dataset, task_weights
from kerasbert.families.regression import cosine
from kerasbert.finetuning.model import MultitaskBert
from kerasbert.models.encoder import build_encoder
from kerasbert.tasks import declare_tasks
from kerasbert.tokenization import make_tokenizer
from kerasbert.training.head_warmup import warm_up_heads
from kerasbert.training.optim import build_optimizer

from conftest import TINY_VOCAB


def tagged(task_id):
    return tf.data.Dataset.from_tensors(task_id).repeat()


@pytest.mark.parametrize("sampling, temperature", [("proportional", 1.0), ("temperature", 2.0), ("shares", 1.0)])
def test_sampling_visits_tasks_in_configured_proportions(sampling, temperature):
    sizes = {"sst": 8000, "para": 16000, "sts": 2000}
    shares = {"sst": 3.0, "para": 1.0, "sts": 0.0}
    weights = task_weights(sizes, sampling, temperature, shares)
    stream = interleave_tasks({t: tagged(i) for i, t in enumerate(sizes)}, sizes, sampling, temperature, seed=1,
                        shares=shares)
    counts = collections.Counter(int(v) for v in stream.take(6000).as_numpy_iterator())
    for i, task in enumerate(sizes):
        assert counts[i] / 6000 == pytest.approx(weights[task], abs=0.02)
    if sampling == "temperature":  # flatter than proportional
        assert weights["sts"] > 2000 / 26000
    if sampling == "shares":  # the given shares, whatever the sizes; a zero share is never drawn
        assert weights == {"sst": 0.75, "para": 0.25, "sts": 0.0} and counts[2] == 0


def test_round_robin_rotates_strictly():
    sizes = {"sst": 10, "para": 99, "sts": 5}
    stream = interleave_tasks({t: tagged(i) for i, t in enumerate(sizes)}, sizes, "round_robin", 1.0)
    assert [int(v) for v in stream.take(9).as_numpy_iterator()] == [0, 1, 2] * 3


@pytest.mark.parametrize("task", ["sst", "para"])
def test_grouping_by_length_cuts_padding_and_keeps_every_example(task):
    rng = np.random.default_rng(0)
    words = ["the", "cat", "dog", "sat", "ran", "on", "mat", "fast"]
    examples = [Example(" ".join(rng.choice(words, rng.integers(1, 30))), "mat ." if task == "para" else "",
                        float(i % 2)) for i in range(256)]
    pre = TaskPreprocessor(make_tokenizer(TINY_VOCAB), 48, "cross")

    def ten_epochs(group_by_length):  # 320 batches of 8: fill = real tokens / tokens computed
        rows, real, computed = collections.Counter(), 0, 0
        data = task_dataset(task, examples, pre, 8, training=True, seed=3, group_by_length=group_by_length)
        for x, _ in data.take(320).as_numpy_iterator():
            real, computed = real + x["padding_mask"].sum(), computed + x["padding_mask"].size
            rows.update(tuple(r[r > 0]) for r in x["token_ids"])
        return rows, real / computed

    (_, plain_fill), (grouped_rows, grouped_fill) = ten_epochs(0), ten_epochs(8)
    assert plain_fill < 0.7 and grouped_fill > 0.9
    once = collections.Counter()
    for x, _ in task_dataset(task, examples, pre, 256, training=False).as_numpy_iterator():
        once.update(tuple(r[r > 0]) for r in x["token_ids"])
    assert all(9 <= grouped_rows[r] / once[r] <= 11 for r in once)  # every example about 10 times


@pytest.mark.parametrize("task", ["sst", "para"])
def test_swap_pairs_shows_each_pair_in_both_orders_with_its_label(task):
    # Pair i is ("cat" * i, "dog"): the count of cat tokens names the pair in either order.
    examples = [Example(" ".join(["cat"] * i), "dog", float(i % 2)) for i in range(1, 9)]
    pre = TaskPreprocessor(make_tokenizer(TINY_VOCAB), 12, "bi")
    cat, dog = TINY_VOCAB.index("cat"), TINY_VOCAB.index("dog")
    orders = collections.Counter()
    data = task_dataset(task, examples, pre, 8, training=True, seed=5, swap_pairs=True)
    for x, y in data.take(50).as_numpy_iterator():
        for a, b, label in zip(x["token_ids"], x["token_ids_b"], y):
            swapped = (a == dog).any()
            pair = (b if swapped else a) == cat
            assert label == pair.sum() % 2  # the label travels with its pair
            orders[swapped] += 1
    if task == "para":
        assert 0.4 < orders[True] / 400 < 0.6
    else:  # single sentences are never swapped
        assert orders[True] == 0


def tiny_model(pair_encoder, **kwargs):
    keras.utils.set_random_seed(0)
    encoder = build_encoder(ModelConfig(preset="custom", num_layers=1, hidden_dim=8, num_heads=2,
                                        max_sequence_length=16), len(TINY_VOCAB))
    return MultitaskBert(encoder, pair_encoder=pair_encoder, **kwargs)


def mixed_tasks(sts_encoder="", **settings):
    """The default tasks, the similarity task with its own encoder and the others' `settings`
    ({task: {key: value}})."""
    declared = {name: dict(settings.get(name, {})) for name in ("sst", "para", "sts")}
    declared["sts"].update({"encoder": sts_encoder} if sts_encoder else {})
    return declare_tasks(declared)


def batch(task, pair_encoder, sts_encoder="", trim=True):
    pre = TaskPreprocessor(make_tokenizer(TINY_VOCAB), 12, pair_encoder, trim=trim, tasks=mixed_tasks(sts_encoder))
    a = tf.constant(["the cat sat on the mat .", "dogs ran fast", "the dog sat", "cats ran"])
    b = tf.constant(["the cat sat .", "a dog ran", "mat", "the cats ran fast ."])
    labels = {"sst": [0.0, 4.0, 2.0, 3.0], "para": [1.0, 0.0, 1.0, 0.0], "sts": [4.5, 1.0, 0.0, 3.2]}
    return pre(task, a, b), tf.constant(labels[task])


@pytest.mark.parametrize("pair_encoder", ["cross", "bi"])
def test_head_shapes_and_ranges(pair_encoder):
    model = tiny_model(pair_encoder)
    assert model.head_output("sst", batch("sst", pair_encoder)[0]).shape == (4, 5)
    assert model.head_output("para", batch("para", pair_encoder)[0]).shape == (4,)
    score = model.head_output("sts", batch("sts", pair_encoder)[0]).numpy()
    assert score.shape == (4,) and np.all((score >= 0) & (score <= 5))
    assert model.embed(batch("sst", pair_encoder)[0]).shape == (4, 8)


@pytest.mark.parametrize("pair_encoder", ["cross", "bi"])
def test_trimmed_batches_give_the_same_outputs_as_fully_padded_ones(pair_encoder):
    model = tiny_model(pair_encoder)
    a = tf.constant(["the cat sat on the mat .", "dogs ran"])
    b = tf.constant(["the cat sat .", "the cats ran fast ."])
    padded = TaskPreprocessor(make_tokenizer(TINY_VOCAB), 16, pair_encoder, trim=False)
    trimmed = TaskPreprocessor(make_tokenizer(TINY_VOCAB), 16, pair_encoder)
    x = trimmed("sts", a, b)
    assert x["token_ids"].shape[1] < 16 and x["padding_mask"].numpy().max(axis=0).min() == 1
    for task in ("sst", "para", "sts"):
        np.testing.assert_allclose(model.head_output(task, x), model.head_output(task, padded("sts", a, b)),
                                   atol=1e-5, err_msg=task)


def test_predictions_are_batched_by_length_and_returned_in_the_given_order(monkeypatch):
    rng = np.random.default_rng(0)
    words = ["the", "cat", "dog", "sat", "ran", "on", "mat", "fast"]
    examples = [Example(" ".join(rng.choice(words, rng.integers(1, 14))), "", float(i % 5)) for i in range(40)]
    model, pre = tiny_model("cross"), TaskPreprocessor(make_tokenizer(TINY_VOCAB), 16, "cross")
    widths, predict_task = [], evaluation.predict_task

    def recording_widths(model, task, dataset):
        widths.extend(x["token_ids"].shape[1] for x, _ in dataset)
        return predict_task(model, task, dataset)

    monkeypatch.setattr(evaluation, "predict_task", recording_widths)
    predictions = evaluation.predict_examples(model, pre, "sst", examples, batch_size=8)
    one_by_one = predict_task(model, "sst", task_dataset("sst", examples, pre, 1, training=False))
    np.testing.assert_allclose(predictions, one_by_one, atol=1e-5)
    assert len(widths) == 5 and widths == sorted(widths) and widths[0] < widths[-1]


def test_scoring_every_task_warns_of_no_retracing(caplog):
    """Each task's prediction function traces for its first shapes only; seen before: "6 out of
    the last 10 calls ... triggered tf.function retracing" in every fine-tuning console, because
    TensorFlow counted the three tasks' first traces as one function's (one lambda's code)."""
    rng = np.random.default_rng(1)
    words = ["the", "cat", "dog", "sat", "ran", "on", "mat", "fast"]
    examples = [Example(" ".join(rng.choice(words, rng.integers(1, 14))), " ".join(rng.choice(words, 3)),
                        float(i % 2)) for i in range(40)]
    model, pre = tiny_model("cross"), TaskPreprocessor(make_tokenizer(TINY_VOCAB), 16, "cross")
    for _ in range(2):  # two evaluations, as after two blocks
        for task in ("sst", "para", "sts"):
            evaluation.predict_examples(model, pre, task, examples, batch_size=8)
    assert not [r for r in caplog.records if "retracing" in r.getMessage()]


def test_bi_encoder_inputs_differ_between_sentences():
    x, _ = batch("sts", "bi")
    assert not np.array_equal(x["token_ids"].numpy(), x["token_ids_b"].numpy())
    assert x["segment_ids"].numpy().max() == 0  # single sentences, no segment 1


def test_mixed_heads_pack_paraphrase_as_one_sequence_and_similarity_as_two():
    model = tiny_model("cross", tasks=tuple(mixed_tasks("bi").values()))
    para, _ = batch("para", "cross", sts_encoder="bi")
    sts, _ = batch("sts", "cross", sts_encoder="bi")
    assert para["segment_ids"].numpy().max() == 1 and para["token_ids_b"].numpy().max() == 0
    assert sts["segment_ids"].numpy().max() == 0 and sts["token_ids_b"].numpy().max() > 0
    assert model.head_output("para", para).shape == (4,)
    u, v = model.embed(sts), model.embed({k[:-2]: sts[k] for k in sts if k.endswith("_b")})
    np.testing.assert_allclose(model.head_output("sts", sts), 2.5 * (cosine(u, v) + 1.0), atol=1e-5)


@pytest.mark.parametrize("unpadded", [True, False])
def test_bi_encoder_embeds_both_sentences_in_one_encoder_call_as_each_alone(monkeypatch, unpadded):
    model = tiny_model("bi", unpadded=unpadded)
    x, _ = batch("sts", "bi")
    second = {k[:-2]: x[k] for k in x if k.endswith("_b")}
    assert x["token_ids"].shape[1] != second["token_ids"].shape[1]  # each side trimmed to its own width
    alone = model.embed(x), model.embed(second)
    calls, embed = [], model.embed
    monkeypatch.setattr(model, "embed", lambda *args, **kwargs: calls.append(1) or embed(*args, **kwargs))
    for together, each in zip(model.task_embeddings("sts", x), alone):
        np.testing.assert_allclose(together, each, atol=1e-5)
    assert len(calls) == 1


@pytest.mark.parametrize("pair_encoder, sts_encoder, settings, kwargs", [
    ("cross", "", {}, {}),
    ("bi", "", {"sts": {"loss": "cosine"}, "para": {"mnrl_weight": 0.5}}, {"layerwise_lr_decay": 0.5}),
    ("cross", "bi", {"sts": {"loss": "cosine"}}, {})])
def test_each_task_step_lowers_that_task_loss(pair_encoder, sts_encoder, settings, kwargs):
    # Eager: the arithmetic of a step, not its graph (the pipelines' tests trace it), in
    # seconds instead of a trace per parametrization.
    tasks = tuple(mixed_tasks(sts_encoder, **settings).values())
    model = tiny_model(pair_encoder, dropout=0.0, tasks=tasks, **kwargs)
    model.compile(optimizer=keras.optimizers.Adam(1e-2), run_eagerly=True)
    model(batch("sts", pair_encoder)[0])
    build_optimizer(model)  # as the pipelines do
    for task in ("sst", "para", "sts"):
        loss_fn = functools.partial(model.task_loss, task)
        x, y = batch(task, pair_encoder, sts_encoder, trim=False)
        before = float(loss_fn(x, y))
        data = tf.data.Dataset.from_tensors((x, y)).repeat()
        logs = model.fit(data, steps_per_epoch=5, epochs=1, verbose=0).history
        assert np.isfinite(before) and float(loss_fn(x, y)) < before, task
        assert f"{task}_loss" in logs


def test_head_warmup_trains_the_task_heads_and_leaves_the_encoder_alone():
    model = tiny_model("cross")
    tasks = [tf.data.Dataset.from_tensors(batch(task, "cross", trim=False)) for task in ("sst", "para", "sts")]
    data = tasks[0].concatenate(tasks[1]).concatenate(tasks[2]).repeat()
    model(batch("sst", "cross")[0])
    encoder_before = [v.numpy().copy() for v in model.backbone.weights]
    heads = [model.head(task) for task in ("sst", "para", "sts")]
    heads_before = [[w.copy() for w in head.get_weights()] for head in heads]

    warm_up_heads(model, data, steps=6, learning_rate=1e-2, verbose=0,  # eager: what moves, not the graph
                  compile_model=lambda optimizer: model.compile(optimizer=optimizer, run_eagerly=True))

    for before, variable in zip(encoder_before, model.backbone.weights):
        np.testing.assert_array_equal(variable.numpy(), before, err_msg=variable.path)
    for head, before in zip(heads, heads_before):  # every task's batches reached its head
        for old, new in zip(before, head.get_weights()):
            assert not np.array_equal(old, new), head.name
    assert model.backbone.trainable and len(model.trainable_weights) > 6


@pytest.mark.parametrize("hold", [False, True])
def test_hold_idle_heads_keeps_other_tasks_heads_still(hold):
    # One sst step, then para steps: without hold, AdamW's momentum and weight decay keep
    # moving the sentiment head on batches that give it no gradient.
    model = tiny_model("cross", hold_idle_heads=hold)
    model.compile(optimizer=keras.optimizers.AdamW(1e-2, weight_decay=0.1), run_eagerly=True)  # no trace needed
    model(batch("sst", "cross", trim=False)[0])
    build_optimizer(model)
    one_batch = lambda task: tf.data.Dataset.from_tensors(batch(task, "cross", trim=False))
    model.fit(one_batch("sst"), epochs=1, verbose=0)
    sentiment = [w.copy() for w in model.sentiment_head.get_weights()]
    paraphrase = [w.copy() for w in model.paraphrase_head.get_weights()]
    model.fit(one_batch("para").repeat(), steps_per_epoch=3, epochs=1, verbose=0)

    held = all(np.array_equal(a, b) for a, b in zip(sentiment, model.sentiment_head.get_weights()))
    assert held == hold
    for old, new in zip(paraphrase, model.paraphrase_head.get_weights()):  # the used head learns
        assert not np.array_equal(old, new)


def test_train_step_is_traced_once_when_the_optimizer_is_built_first_and_holds_the_encoder_once(monkeypatch):
    # Keras otherwise builds the optimizer inside the first trace, and the new variables make
    # TensorFlow trace the step again: the pipelines call build_optimizer to avoid that.
    # The three cross-encoder tasks read one sentence embedding: the step traces the encoder
    # once, before its switch on the task, not once in each task's branch.
    traces, embeds = [], []
    original, embed = MultitaskBert.train_step, MultitaskBert.embed
    monkeypatch.setattr(MultitaskBert, "train_step",
                        lambda self, data: traces.append(1) or original(self, data))
    model = tiny_model("cross")
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    x, y = batch("sst", "cross")
    model(x)
    build_optimizer(model)
    monkeypatch.setattr(MultitaskBert, "embed", lambda self, *args, **kwargs: embeds.append(1) or embed(self, *args, **kwargs))
    model.fit(tf.data.Dataset.from_tensors((x, y)).repeat(), steps_per_epoch=2, epochs=1, verbose=0)
    assert len(traces) == 1 and model.embeds_once and len(embeds) == 1
    assert not tiny_model("bi").embeds_once  # sentiment embeds its text; the pairs their two sentences


def test_save_load_round_trip(tmp_path):
    model = tiny_model("bi", pooling="cls")
    x, _ = batch("para", "bi")
    expected = model(x)
    model.save(str(tmp_path / "m.keras"))
    loaded = keras.models.load_model(str(tmp_path / "m.keras"), compile=False)
    assert loaded.get_config() == model.get_config()
    for key, value in loaded(x).items():
        np.testing.assert_allclose(value, expected[key], atol=1e-6)


@pytest.mark.skipif(not os.path.isdir(DATA_DIR), reason="shared data not present")
def test_finetune_then_evaluate_reproduces_metrics(tmp_path, demo_run):
    # The demo's fine-tuning (tests/conftest.py): the first rows of the task files, two blocks, and
    # a weight average on, so the model saved must be the average that was scored.
    folder, demo = demo_run
    files, output = json.loads((folder / "files.json").read_text()), folder / "run" / "finetune"
    finetuning = demo.stdout[demo.stdout.index("] fine-tune (elapsed"):demo.stdout.index("] evaluate (elapsed")]
    assert "dev: sst_accuracy=" in finetuning and "skipped" not in finetuning
    assert json.loads((output / "config.json").read_text())["train"]["ema_momentum"] == 0.9
    metrics = json.loads((output / "metrics.json").read_text())
    assert {"sst_accuracy", "para_accuracy", "para_f1", "sts_pearson", "sts_spearman", "overall"} <= set(metrics)
    assert metrics["overall"] == pytest.approx(
        (metrics["sst_accuracy"] + metrics["para_accuracy"] + (metrics["sts_pearson"] + 1) / 2) / 3)
    for name in ("curves.png", "sst_confusion.png", "predictions/sst-dev.tsv", "predictions/sts-dev.tsv"):
        assert (output / name).exists(), name
    from pipelines import evaluate

    for task, keys in (("sst", ["sst_accuracy"]), ("para", ["para_accuracy", "para_f1"]),
                       ("sts", ["sts_pearson", "sts_spearman"])):
        scored = tmp_path / f"{task}.json"
        args = ["--model_dir", str(output), "--task", task, "--data_file", files[f"{task}_dev"],
                "--output", str(scored)]
        if task == "sst":  # the command as a user runs it, in a fresh process
            run_module(["pipelines.evaluate"] + args)
        else:  # the same entry point in this process: saves a TensorFlow start per task
            assert evaluate.main(args) == 0
        evaluated = json.loads(scored.read_text())
        for key in keys:
            assert evaluated[key] == pytest.approx(metrics[key], abs=1e-6), key


@pytest.mark.parametrize("trained_tasks, kept_sst", [(("sst", "para", "sts"), 0.45), (("sst",), 0.49)])
def test_best_block_is_judged_on_the_tasks_the_run_trains(tmp_path, monkeypatch, trained_tasks, kept_sst):
    from kerasbert.finetuning import run

    # SST-5 alone: the untrained pair heads happen to score better after the first block.
    blocks = iter([{"sst_accuracy": 0.45, "para_accuracy": 0.61, "sts_pearson": 0.65},
                   {"sst_accuracy": 0.49, "para_accuracy": 0.55, "sts_pearson": 0.59}])

    def scored(model, preprocessor, dev):
        metrics = next(blocks)
        return dict(metrics, overall=evaluation.overall_score(metrics)), {}

    class Weights:
        weights = []

        def save_weights(self, path):
            open(path, "w").close()

    monkeypatch.setattr(run, "evaluate_all", scored)
    callback = run.DevEvaluation(None, {}, str(tmp_path / "best.weights.h5"), trained_tasks)
    callback.set_model(Weights())
    for block in range(2):
        callback.on_epoch_end(block, {})
    assert callback.best_result[0]["sst_accuracy"] == kept_sst
