"""benchmarks.peers: the equal-batch comparison with transformers is only as good as its
weight copy and its scoring. The copy is checked against a NumPy forward pass written to
Hugging Face's BERT (Linear weights (out, in), tanh GELU in the encoder, the MLM head's
exact GELU and 1e-5 LayerNorm as keras-hub's); the scoring against Keras' own metrics.
With the peer's environment present (`make bench-peers` makes .venv-peer), the real
BertForPreTraining must start from the same losses and stay with kerasbert for a block."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from scipy.special import erf

from conftest import ROOT, write_corpus

PEER_PYTHON = os.environ.get("KERASBERT_PEER_PYTHON", os.path.join(ROOT, ".venv-peer", "bin", "python"))

# The parameter names of transformers' BertForPreTraining with one layer (5.24.0).
HF_ONE_LAYER = {
    "bert.embeddings.word_embeddings.weight", "bert.embeddings.position_embeddings.weight",
    "bert.embeddings.token_type_embeddings.weight", "bert.embeddings.LayerNorm.weight", "bert.embeddings.LayerNorm.bias",
    *(f"bert.encoder.layer.0.{name}.{kind}" for name in (
        "attention.self.query", "attention.self.key", "attention.self.value", "attention.output.dense",
        "attention.output.LayerNorm", "intermediate.dense", "output.dense", "output.LayerNorm")
      for kind in ("weight", "bias")),
    "bert.pooler.dense.weight", "bert.pooler.dense.bias", "cls.predictions.bias",
    "cls.predictions.transform.dense.weight", "cls.predictions.transform.dense.bias",
    "cls.predictions.transform.LayerNorm.weight", "cls.predictions.transform.LayerNorm.bias",
    "cls.predictions.decoder.weight", "cls.predictions.decoder.bias", "cls.seq_relationship.weight",
    "cls.seq_relationship.bias",
}


def hugging_face_forward(w, token_ids, segment_ids, padding_mask, positions, num_layers, num_heads):
    """BertForPreTraining's forward pass in NumPy: MLM logits at `positions`, NSP logits."""
    def linear(x, name):
        return x @ w[f"{name}.weight"].T + w[f"{name}.bias"]

    def norm(x, name, eps=1e-12):
        return (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + eps) * w[f"{name}.weight"] \
            + w[f"{name}.bias"]

    def softmax(x):
        e = np.exp(x - x.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    batch, length = token_ids.shape
    h = (w["bert.embeddings.word_embeddings.weight"][token_ids] + w["bert.embeddings.position_embeddings.weight"][:length]
         + w["bert.embeddings.token_type_embeddings.weight"][segment_ids])
    h = norm(h, "bert.embeddings.LayerNorm")  # (batch, seq, hidden)
    masked = (1.0 - padding_mask)[:, None, None, :] * -1e9  # (batch, 1, 1, seq)
    for i in range(num_layers):
        layer = f"bert.encoder.layer.{i}"
        q, k, v = (linear(h, f"{layer}.attention.self.{n}").reshape(batch, length, num_heads, -1).transpose(0, 2, 1, 3)
                   for n in ("query", "key", "value"))  # (batch, heads, seq, head_dim)
        attended = softmax(q @ k.transpose(0, 1, 3, 2) / np.sqrt(q.shape[-1]) + masked) @ v
        attended = attended.transpose(0, 2, 1, 3).reshape(batch, length, -1)  # (batch, seq, hidden)
        h = norm(h + linear(attended, f"{layer}.attention.output.dense"), f"{layer}.attention.output.LayerNorm")
        inner = linear(h, f"{layer}.intermediate.dense")
        inner = 0.5 * inner * (1 + np.tanh(np.sqrt(2 / np.pi) * (inner + 0.044715 * inner ** 3)))  # gelu_new
        h = norm(h + linear(inner, f"{layer}.output.dense"), f"{layer}.output.LayerNorm")
    nsp = linear(np.tanh(linear(h[:, 0], "bert.pooler.dense")), "cls.seq_relationship")
    gathered = h[np.arange(batch)[:, None], positions]  # (batch, K, hidden)
    transformed = linear(gathered, "cls.predictions.transform.dense")
    transformed = norm(0.5 * transformed * (1 + erf(transformed / np.sqrt(2))),
                       "cls.predictions.transform.LayerNorm", eps=1e-5)
    mlm = transformed @ w["cls.predictions.decoder.weight"].T + w["cls.predictions.decoder.bias"]
    return mlm, nsp


def test_hugging_face_weights_compute_what_the_pretrainer_computes():
    from benchmarks.peers import hugging_face_weights
    from kerasbert.config import ModelConfig
    from kerasbert.models.encoder import build_encoder
    from kerasbert.models.pretrainer import BertPretrainer

    model = BertPretrainer(build_encoder(ModelConfig(preset="custom", num_layers=1, hidden_dim=16, num_heads=2,
                                                     dropout=0.0), 50), mask_selection_length=3)
    for variable in model.weights:  # every weight distinct and away from its initial value
        variable.assign(np.random.default_rng(len(variable.path)).normal(0, 0.3, variable.shape))
    weights = hugging_face_weights(model)
    assert set(weights) == HF_ONE_LAYER
    rng = np.random.default_rng(0)
    x = {"token_ids": rng.integers(5, 50, (2, 7)).astype("int32"),
         "segment_ids": np.array([[0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 0, 0]], "int32"),
         "padding_mask": np.array([[1] * 7, [1, 1, 1, 1, 1, 0, 0]], "int32"),
         "mask_positions": np.array([[1, 4, 6], [2, 3, 0]], "int32")}
    expected = model(x)
    mlm, nsp = hugging_face_forward(weights, x["token_ids"], x["segment_ids"], x["padding_mask"],
                                    x["mask_positions"], num_layers=1, num_heads=2)
    np.testing.assert_allclose(mlm, expected["mlm"].numpy(), atol=2e-4)
    np.testing.assert_allclose(nsp, expected["nsp"].numpy(), atol=2e-4)


def write_tiny_config(folder) -> str:
    """A tiny pretraining config on a made-up corpus in `folder`; returns its path."""
    corpus = write_corpus(str(folder / "corpus.txt"), num_documents=30)
    config_path = folder / "config.json"
    config_path.write_text(json.dumps({
        "model": {"preset": "custom", "num_layers": 1, "hidden_dim": 32, "num_heads": 2, "max_sequence_length": 32,
                  "dropout": 0.0, "position_init": "sinusoidal"},
        "data": {"sources": [corpus], "heldout_source": corpus, "vocab_size": 200, "heldout_examples": 32,
                 "mask_selection_length": 6, "mlm_bias_prior": True},
        "train": {"batch_size": 8, "total_steps": 12, "steps_per_block": 6, "learning_rate": 1e-3,
                  "warmup_fraction": 0.2}}))
    return str(config_path)


@pytest.fixture(scope="module")
def tiny_inputs(tmp_path_factory):
    """A tiny pretraining config on a made-up corpus, and its inputs written by the bench."""
    from benchmarks.peers import prepare_pretraining, pretraining_config

    folder = tmp_path_factory.mktemp("peers")
    config = pretraining_config(write_tiny_config(folder), None)
    inputs = str(folder / "inputs")
    side = prepare_pretraining(config, str(folder), inputs)
    return config, side, inputs


def test_two_processes_write_the_same_held_out_examples(tmp_path):
    """Runs compared across sessions (one seed on one machine, the next elsewhere) must score
    the same held-out masks; unseeded, they changed from one process to the next."""
    from benchmarks.peers import prepare_pretraining, pretraining_config

    config_path = write_tiny_config(tmp_path)
    # One in this process, after whatever other tests ran in it; one in a fresh process.
    prepare_pretraining(pretraining_config(config_path, None), str(tmp_path), str(tmp_path / "first"))
    script = ("import sys; from benchmarks.peers import prepare_pretraining, pretraining_config; "
              "prepare_pretraining(pretraining_config(sys.argv[1], None), sys.argv[2], sys.argv[3])")
    subprocess.run([sys.executable, "-c", script, config_path, str(tmp_path), str(tmp_path / "second")],
                   check=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True)
    with np.load(tmp_path / "first" / "heldout.npz") as first, np.load(tmp_path / "second" / "heldout.npz") as second:
        assert first.files == second.files
        for name in first.files:
            np.testing.assert_array_equal(first[name], second[name], err_msg=name)


def test_batches_on_disk_are_the_steps_and_the_scores_are_keras_metrics(tiny_inputs):
    from benchmarks.peer_protocol import load_rows
    from benchmarks.peers import initial_pretrainer, keras_batches, kerasbert_heldout, train_kerasbert
    from kerasbert.models.pretrainer import pretraining_compile_args

    config, side, inputs = tiny_inputs
    rows = load_rows(os.path.join(inputs, "train.npz"))
    assert rows["token_ids"].shape == (12 * 8, 32) and rows["mask_positions"].shape == (12 * 8, 6)
    assert set(np.unique(rows["mask_weights"])) <= {0.0, 1.0} and rows["mask_weights"].sum() > 0
    heldout = load_rows(os.path.join(inputs, "heldout.npz"))
    model = initial_pretrainer(config, side, seed=3)
    model.compile(**pretraining_compile_args(model, "adam"))
    keras_metrics = model.evaluate(keras_batches(heldout, 8), return_dict=True, verbose=0)
    ours = kerasbert_heldout(model, heldout, 8)
    for name in ("mlm_accuracy", "nsp_accuracy"):  # Keras sums hits and weights over all batches
        assert ours[name] == pytest.approx(keras_metrics[name], abs=1e-6), name
    for name in ("mlm_loss", "nsp_loss"):  # Keras averages the batches' means; ours is one mean
        assert ours[name] == pytest.approx(keras_metrics[name], rel=5e-3), name
    run = train_kerasbert(config, side, inputs, seed=3)
    assert [block["step"] for block in run["blocks"]] == [0, 6, 12]
    assert run["blocks"][0]["mlm_loss"] == pytest.approx(ours["mlm_loss"], abs=1e-6)  # the same start


@pytest.mark.skipif(not os.path.exists(PEER_PYTHON), reason="no peer environment (make bench-peers makes .venv-peer)")
def test_the_peer_starts_where_kerasbert_starts_and_keeps_up(tiny_inputs, tmp_path):
    from benchmarks.peers import hugging_face_weights, initial_pretrainer, run_peer, train_kerasbert

    config, side, inputs = tiny_inputs
    init = str(tmp_path / "init.npz")
    np.savez(init, **hugging_face_weights(initial_pretrainer(config, side, seed=5)))
    ours = train_kerasbert(config, side, inputs, seed=5)["blocks"]
    theirs = run_peer(PEER_PYTHON, "pretrain", ["--inputs", inputs, "--init", init, "--seed", "5"],
                      str(tmp_path / "peer.json"))["blocks"]
    assert theirs[0]["mlm_loss"] == pytest.approx(ours[0]["mlm_loss"], abs=1e-5)
    assert theirs[0]["nsp_loss"] == pytest.approx(ours[0]["nsp_loss"], abs=1e-5)
    for a, b in zip(ours[1:], theirs[1:]):  # the same updates, up to float arithmetic
        assert b["mlm_loss"] == pytest.approx(a["mlm_loss"], abs=2e-3)


def test_a_kerasbert_run_stopped_after_a_block_goes_on_from_it(tiny_inputs, tmp_path, monkeypatch):
    """The pretrain part's runs take hours: one stopped midway must not start again from
    step 0, and must end where an uninterrupted run ends."""
    from benchmarks.peers import train_kerasbert
    from kerasbert.training.backup import BlockWeights

    config, side, inputs = tiny_inputs
    whole = train_kerasbert(config, side, inputs, seed=7)["blocks"]
    write_backup = BlockWeights.on_epoch_end

    def stop_after_first_block(self, epoch, logs=None):
        write_backup(self, epoch, logs)
        raise KeyboardInterrupt("stopped after block 1")

    monkeypatch.setattr(BlockWeights, "on_epoch_end", stop_after_first_block)
    state = str(tmp_path / "state")
    with pytest.raises(KeyboardInterrupt):
        train_kerasbert(config, side, inputs, seed=7, state_dir=state)
    monkeypatch.undo()
    with open(os.path.join(state, "blocks.json")) as f:
        assert [b["step"] for b in json.load(f)] == [0, 6]
    resumed = train_kerasbert(config, side, inputs, seed=7, state_dir=state)
    assert resumed["complete"] and [b["step"] for b in resumed["blocks"]] == [0, 6, 12]
    for a, b in zip(whole, resumed["blocks"]):  # the same updates on the same batches
        assert b["mlm_loss"] == pytest.approx(a["mlm_loss"], abs=1e-4)
        assert b["nsp_loss"] == pytest.approx(a["nsp_loss"], abs=1e-4)
    assert not os.path.exists(os.path.join(state, "backup"))  # removed once finished
    again = train_kerasbert(config, side, inputs, seed=7, state_dir=state)  # a finished run is kept
    assert again["blocks"] == resumed["blocks"]


def test_the_report_takes_runs_under_way_at_the_last_step_both_reached(tmp_path):
    """A kerasbert run writes its results file only when it ends; until then (and after a
    kill) its blocks come from its state, so a stopped comparison still reports."""
    import argparse

    from benchmarks.peers import collect_runs, pretrain_verdicts, run_paths

    args = argparse.Namespace(output_dir=str(tmp_path), seeds=[3], implementations=["kerasbert", "transformers"])

    def block(step, accuracy):
        return {"step": step, "mlm_accuracy": accuracy, "mlm_loss": 7.0, "nsp_accuracy": 0.5, "nsp_loss": 0.69}

    _, state = run_paths(args, "kerasbert/3")
    os.makedirs(state)
    with open(os.path.join(state, "blocks.json"), "w") as f:
        json.dump([block(0, 0.05), block(300, 0.11), block(600, 0.14), block(900, 0.16)], f)
    peer_output, _ = run_paths(args, "transformers/3")
    with open(peer_output, "w") as f:
        json.dump({"blocks": [block(0, 0.05), block(300, 0.10), block(600, 0.15)], "complete": False}, f)
    part = {"steps": 4200, "runs": {}}
    collect_runs(args, part)
    assert part["runs"]["kerasbert/3"]["complete"] is False
    mlm = next(verdict for verdict in pretrain_verdicts(part) if verdict["metric"] == "mlm_accuracy")
    assert mlm == pytest.approx({"seed": "3", "against": "transformers", "step": 600, "metric": "mlm_accuracy",
                                 "kerasbert": 0.14, "other": 0.15, "difference": -0.01, "blocks_at_least": 1,
                                 "blocks": 2})

