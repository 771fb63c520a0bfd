"""A run whose loss becomes NaN or infinite stops and keeps nothing non-finite; skipping
such batches is a choice; exports and metrics refuse non-finite values."""

import json
import os

import h5py
import numpy as np
import pytest

from conftest import run_main
from helpers import batches, start_run, tiny_run_config
from kerasbert.durable import write_json
from kerasbert.training.backup import damage
from kerasbert.training.finite import NonFiniteError


def test_a_nan_loss_stops_the_run_and_the_next_start_resumes_from_the_last_finite_block(tmp_path):
    run, model, data = start_run(tmp_path, batches(poisoned_step=7))
    with pytest.raises(NonFiniteError, match=r"loss became (NaN|infinite) at step 7 \(block 3\); the last finite "
                                             r"backup is block 2, which the same command resumes from \(step 6\)"):
        run.fit(model, data)
    backup = tmp_path / "run" / "backup"
    assert sorted(os.listdir(backup)) == ["block-0001.weights.h5", "block-0002.weights.h5"]
    assert damage(str(backup / "block-0002.weights.h5")) is None

    run, model, data = start_run(tmp_path, batches())  # the data fixed: resumes at block 2
    assert run.start_step == 6 and run.backup.path.endswith("block-0002.weights.h5")
    run.fit(model, data)
    assert all(np.isfinite(w).all() for w in model.get_weights())


def test_skipping_nonfinite_batches_leaves_the_weights_finite_and_counts_them(tmp_path):
    run, model, data = start_run(tmp_path, batches(poisoned_step=7), skip=True)
    fit = run.fit(model, data)
    assert fit.skipped_nonfinite_batches == 1
    assert int(model.optimizer.iterations.numpy()) == 8  # 9 batches, one skipped
    assert all(np.isfinite(w).all() for w in model.get_weights())


def test_a_backup_with_nonfinite_weights_is_never_written_and_counts_as_damaged(tmp_path):
    run, model, data = start_run(tmp_path, batches(), skip=True)  # the loss does not stop it: the weights do
    model.layers[0].kernel.assign(np.full((3, 1), np.nan, "float32"))
    with pytest.raises(NonFiniteError, match=r"dense(_\d+)?/kernel\); refused writing the backup of block 1"):
        run.fit(model, data)
    assert not os.path.exists(tmp_path / "run" / "backup" / "block-0001.weights.h5")

    path = str(tmp_path / "old.weights.h5")
    with h5py.File(path, "w") as f:  # as a version without this check could have left it
        f["layers/dense/vars/0"] = np.array([[np.nan]], "float32")
    assert "holds NaN or infinite values" in damage(path)


def test_export_refuses_nonfinite_weights(tmp_path):
    from kerasbert.export import export_model
    from helpers import tiny_model_dir

    model, preprocessor = tiny_model_dir(str(tmp_path / "run"), "cross")
    model.weights[0].assign(np.full(model.weights[0].shape, np.inf, "float32"))
    with pytest.raises(NonFiniteError, match="refused exporting it"):
        export_model(model, preprocessor, str(tmp_path / "exports"))
    assert not (tmp_path / "exports").exists()


def test_metrics_are_never_written_with_nan(tmp_path):
    with pytest.raises(ValueError, match="mlm_loss not finite"):
        write_json(str(tmp_path / "metrics.json"), {"mlm_accuracy": 0.5, "mlm_loss": float("nan")})
    assert not os.path.exists(tmp_path / "metrics.json")
    write_json(str(tmp_path / "metrics.json"), {"mlm_accuracy": 0.5})
    assert json.load(open(tmp_path / "metrics.json")) == {"mlm_accuracy": 0.5}


def test_pretrain_with_a_diverging_learning_rate_is_an_error_not_a_finished_run(tmp_path, capsys):
    """Seen before: "Invalid loss, terminating training", then "== done: ... weights_fingerprint=nan",
    exit 0, and a metrics.json holding NaN."""
    config = tiny_run_config(tmp_path)
    output = tmp_path / "out"
    result = run_main(["pipelines.pretrain", "--config", config, "--output_dir", str(output),
                       "--set", "train.learning_rate=1e12"], capsys)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "error: loss became" in result.stderr and "Traceback" not in result.stderr
    assert not (output / "metrics.json").exists()


def test_a_worker_restarted_mid_run_resumes_from_its_own_stable_folder(tmp_path, monkeypatch):
    """Non-chief workers kept their backup in a new temporary folder each start (orphaned)."""
    monkeypatch.setenv("TF_CONFIG", json.dumps({"cluster": {"worker": ["localhost:1", "localhost:2"]},
                                                "task": {"type": "worker", "index": 1}}))
    run, model, data = start_run(tmp_path, batches(poisoned_step=7))
    assert not run.is_chief
    with pytest.raises(NonFiniteError):  # stops it in block 3, as a kill would
        run.fit(model, data)
    own = tmp_path / "run" / "backup" / "worker-1"
    assert sorted(os.listdir(own)) == ["block-0001.weights.h5", "block-0002.weights.h5"]
    run, model, data = start_run(tmp_path, batches())
    assert run.start_step == 6 and run.backup.path == str(own / "block-0002.weights.h5")
