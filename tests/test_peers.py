"""benchmarks.peers: the equal-batch comparison with transformers is only as good as its
weight copy (tests/test_hf_pretrainer_weights.py) and its scoring, checked against Keras' own metrics.
With the peer's environment present (`make bench-peers` makes .venv-peer), the real
BertForPreTraining must start from the same losses and stay with kerasbert for a block."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import ROOT, write_corpus

PEER_PYTHON = os.environ.get("KERASBERT_PEER_PYTHON", os.path.join(ROOT, ".venv-peer", "bin", "python"))

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
    from benchmarks.peers import initial_pretrainer, run_peer, train_kerasbert
    from kerasbert.hf.exporting import pretrainer_weights

    config, side, inputs = tiny_inputs
    init = str(tmp_path / "init.npz")
    np.savez(init, **pretrainer_weights(initial_pretrainer(config, side, seed=5)))
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

