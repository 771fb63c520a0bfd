"""`python -m benchmarks.peers --parts pretrain` on a tiny config: the equal-batch comparison with
transformers is only as good as its inputs (the same in every process), its weight copy
(tests/test_hf_pretrainer_weights.py), its scoring (Keras' own metrics) and its resumption.
With the peer's environment present (`make bench-peers` makes .venv-peer), the real
BertForPreTraining must start from the same losses and stay with kerasbert for a block."""

import json
import os
import shutil

import numpy as np
import pytest

from conftest import ROOT, built_once, run_main, write_corpus

PEER_PYTHON = os.environ.get("KERASBERT_PEER_PYTHON", os.path.join(ROOT, ".venv-peer", "bin", "python"))
HAS_PEER = os.path.exists(PEER_PYTHON)


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


def flags(config: str, output_dir, *more: str) -> list[str]:
    return ["--parts", "pretrain", "--config", config, "--output_dir", str(output_dir), "--seeds", "3",
            "--peer_python", PEER_PYTHON, *more]


def bench(config: str, output_dir, *more: str) -> dict:
    """The pretrain part on the tiny config from seed 3; its results.json's entry. The part's
    own work (inputs, reports) runs in this process, where TensorFlow is loaded: its runs are
    processes it starts, as `make bench-peers` starts them."""
    from benchmarks.peers import main

    assert main(flags(config, output_dir, *more)) == 0
    return json.loads((output_dir / "results.json").read_text())["pretrain"]


@pytest.fixture(scope="session")
def tiny_bench(tmp_path_factory):
    """(config, output folder, runs): kerasbert's run (and the peer's, where its environment is)
    from seed 3, one after the other; made once for both test workers."""
    with built_once(tmp_path_factory, "peers") as folder:
        if not (folder / "bench" / "results.json").exists():
            shutil.rmtree(folder, ignore_errors=True)  # what a failed build left
            folder.mkdir()
            bench(write_tiny_config(folder), folder / "bench", "--jobs", "1",
                  "--implementations", "kerasbert", *(["transformers"] if HAS_PEER else []))
    part = json.loads((folder / "bench" / "results.json").read_text())["pretrain"]
    return str(folder / "config.json"), folder / "bench", part["runs"]


def test_the_batches_on_disk_are_the_steps(tiny_bench):
    _, folder, runs = tiny_bench
    with np.load(folder / "inputs" / "train.npz") as rows:
        assert rows["token_ids"].shape == (12 * 8, 32) and rows["mask_positions"].shape == (12 * 8, 6)
        assert set(np.unique(rows["mask_weights"])) <= {0.0, 1.0} and rows["mask_weights"].sum() > 0
    assert runs["kerasbert/3"]["complete"] and [b["step"] for b in runs["kerasbert/3"]["blocks"]] == [0, 6, 12]


@pytest.mark.skipif(not HAS_PEER, reason="no peer environment (make bench-peers makes .venv-peer)")
def test_the_peer_starts_where_kerasbert_starts_and_keeps_up(tiny_bench):
    _, _, runs = tiny_bench
    ours, theirs = runs["kerasbert/3"]["blocks"], runs["transformers/3"]["blocks"]
    assert [b["step"] for b in theirs] == [0, 6, 12]
    assert theirs[0]["mlm_loss"] == pytest.approx(ours[0]["mlm_loss"], abs=1e-5)
    assert theirs[0]["nsp_loss"] == pytest.approx(ours[0]["nsp_loss"], abs=1e-5)
    for a, b in zip(ours[1:], theirs[1:]):  # the same updates, up to float arithmetic
        assert b["mlm_loss"] == pytest.approx(a["mlm_loss"], abs=2e-3)


def keras_metrics(config_path: str, inputs, backup_dir) -> dict:
    """Keras' own held-out metrics of the newest backup under `backup_dir` on inputs/heldout.npz."""
    import tensorflow as tf

    from kerasbert.config import PretrainConfig, load_config
    from kerasbert.models.pretrainer import pretraining_compile_args
    from kerasbert.pretraining.run import build_model
    from kerasbert.tokenization import make_tokenizer
    from kerasbert.training.backup import find_backup, restore
    from kerasbert.training.optim import make_optimizer

    config = load_config(PretrainConfig, config_path)
    model = build_model(config, make_tokenizer(str(inputs / "vocab.txt")).vocabulary_size(), None)
    model.compile(**pretraining_compile_args(model, make_optimizer(config.train)))  # the run's optimizer state
    restore(model, find_backup(str(backup_dir)))
    with np.load(inputs / "heldout.npz") as rows:
        x = {name: rows[name] for name in ("token_ids", "segment_ids", "padding_mask", "mask_positions")}
        y = {"mlm": rows["mask_ids"], "nsp": rows["nsp_labels"]}
        weights = {"mlm": rows["mask_weights"], "nsp": rows["nsp_weights"]}
    data = tf.data.Dataset.from_tensor_slices((x, y, weights)).batch(8, drop_remainder=True)
    return model.evaluate(data, return_dict=True, verbose=0)


def test_a_run_stopped_after_a_block_goes_on_from_it_and_scored_it_as_keras_does(tiny_bench, tmp_path, capsys,
                                                                                 monkeypatch):
    """The pretrain part's runs take hours: one stopped midway must not start again from
    step 0, and must end where an uninterrupted run ends. The held-out scores it recorded
    (both sides score with one function) are Keras' metrics of the weights it backed up.
    The run (`--run`, what the part starts a process for) is stopped and resumed in this
    process: tiny_bench's run is the one in a process of its own."""
    from benchmarks.peers import main
    from kerasbert.training.backup import BlockWeights

    config, folder, runs = tiny_bench
    shutil.copytree(folder / "inputs", tmp_path / "inputs")  # the same batches
    run = flags(config, tmp_path, "--run", "kerasbert/3")
    write_backup = BlockWeights.on_epoch_end

    def stop_after_first_block(self, epoch, logs=None):
        write_backup(self, epoch, logs)
        raise KeyboardInterrupt("stopped after block 1")  # as Ctrl-C would, once the block's backup is written

    with monkeypatch.context() as patched, pytest.raises(KeyboardInterrupt, match="stopped after block 1"):
        patched.setattr(BlockWeights, "on_epoch_end", stop_after_first_block)
        main(run)
    state = tmp_path / "pretrain" / "kerasbert-3.state"
    blocks = json.loads((state / "blocks.json").read_text())
    assert [b["step"] for b in blocks] == [0, 6]
    keras = keras_metrics(config, tmp_path / "inputs", state / "backup")
    for name in ("mlm_accuracy", "nsp_accuracy"):  # Keras sums hits and weights over all batches
        assert blocks[1][name] == pytest.approx(keras[name], abs=1e-6), name
    for name in ("mlm_loss", "nsp_loss"):  # Keras averages the batches' means; ours is one mean
        assert blocks[1][name] == pytest.approx(keras[name], rel=5e-3), name

    capsys.readouterr()
    assert main(run) == 0
    assert "kerasbert seed 3: resuming after step 6 from " in capsys.readouterr().out
    resumed = json.loads((tmp_path / "pretrain" / "kerasbert-3.json").read_text())
    assert resumed["complete"] and [b["step"] for b in resumed["blocks"]] == [0, 6, 12]
    for a, b in zip(runs["kerasbert/3"]["blocks"], resumed["blocks"]):  # the same updates on the same batches
        assert b["mlm_loss"] == pytest.approx(a["mlm_loss"], abs=1e-4)
        assert b["nsp_loss"] == pytest.approx(a["nsp_loss"], abs=1e-4)
    assert not (state / "backup").exists()  # removed once finished
    run_main(["benchmarks.peers", *run], capsys, check=True)  # a finished run is kept (in this process)
    assert json.loads((tmp_path / "pretrain" / "kerasbert-3.json").read_text())["blocks"] == resumed["blocks"]


def test_a_second_process_scores_the_same_masks_and_reports_runs_under_way(tiny_bench, tmp_path):
    """Runs compared across sessions (one seed on one machine, the next elsewhere) must score
    the same held-out masks; unseeded, they changed from one process to the next. A kerasbert
    run writes its results file only when it ends; until then (and after a kill) its blocks
    come from its state, so a stopped comparison still reports."""
    config, folder, _ = tiny_bench

    def block(step, accuracy):
        return {"step": step, "mlm_accuracy": accuracy, "mlm_loss": 7.0, "nsp_accuracy": 0.5, "nsp_loss": 0.69}

    state = tmp_path / "pretrain" / "kerasbert-3.state"
    state.mkdir(parents=True)
    (state / "blocks.json").write_text(json.dumps([block(0, 0.05), block(300, 0.11), block(600, 0.14),
                                                   block(900, 0.16)]))
    (tmp_path / "pretrain" / "transformers-3.json").write_text(json.dumps(
        {"blocks": [block(0, 0.05), block(300, 0.10), block(600, 0.15)], "complete": False}))
    part = bench(config, tmp_path, "--jobs", "0")  # its own inputs, then a report of the runs so far
    with np.load(folder / "inputs" / "heldout.npz") as first, np.load(tmp_path / "inputs" / "heldout.npz") as second:
        assert first.files == second.files
        for name in first.files:
            np.testing.assert_array_equal(first[name], second[name], err_msg=name)
    assert part["runs"]["kerasbert/3"]["complete"] is False
    mlm = next(verdict for verdict in part["verdicts"] if verdict["metric"] == "mlm_accuracy")
    assert mlm == pytest.approx({"seed": "3", "against": "transformers", "step": 600, "metric": "mlm_accuracy",
                                 "kerasbert": 0.14, "other": 0.15, "difference": -0.01, "blocks_at_least": 1,
                                 "blocks": 2})
