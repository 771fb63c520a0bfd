"""Kill a pretraining run with SIGKILL mid-block; the same command resumes and finishes."""

import csv
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, run_module
from test_distribution import tiny_run_config


def test_sigkill_then_rerun_resumes_from_last_backup(tmp_path):
    config = tiny_run_config(tmp_path, steps=120, block=10, batch=8)
    output = tmp_path / "out"
    command = ["pipelines.pretrain", "--config", config, "--output_dir", str(output)]
    env = {**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"}
    process = subprocess.Popen([sys.executable, "-m", *command], cwd=ROOT, env=env,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    metadata = output / "backup" / "training_metadata.json"
    deadline = time.time() + 300
    try:
        while time.time() < deadline:  # wait for the 3rd backup, then kill mid-block
            if metadata.exists():
                try:
                    if json.loads(metadata.read_text())["epoch"] >= 3:
                        break
                except (ValueError, KeyError):
                    pass  # being written
            assert process.poll() is None, "run ended before it could be killed"
            time.sleep(0.05)
        time.sleep(0.3)
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        process.kill()
    assert process.returncode == -signal.SIGKILL
    assert not (output / "metrics.json").exists()
    blocks_done = json.loads(metadata.read_text())["epoch"]
    assert 3 <= blocks_done < 12

    result = run_module(command)
    assert f"resuming at step {blocks_done * 10}" in result.stdout
    metrics = json.loads((output / "metrics.json").read_text())
    # Optimizer state came back: exactly the planned steps, none repeated past the backup.
    assert metrics["train_steps"] == 120
    with open(output / "history.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    assert sorted({int(row["epoch"]) for row in rows}) == list(range(12))
    # One column per logged key, filled in every row: no empty val_* columns.
    assert all("NA" not in row.values() for row in rows) and "mlm_accuracy" in rows[0]
    assert not (output / "backup").exists()  # removed after a finished run


def test_a_finished_run_is_kept_unless_overwrite(tmp_path):
    config = tiny_run_config(tmp_path, steps=20, block=10, batch=8)
    output = tmp_path / "out"
    command = ["pipelines.pretrain", "--config", config, "--output_dir", str(output)]
    run_module(command)
    history = (output / "history.csv").read_text()
    metrics = (output / "metrics.json").read_text()

    again = run_module(command)  # the same command: nothing to train
    assert "holds a finished run (metrics.json, 20 steps)" in again.stdout
    assert "Epoch" not in again.stdout and "--overwrite" in again.stdout
    assert (output / "history.csv").read_text() == history  # not a second history
    assert (output / "metrics.json").read_text() == metrics

    fresh = run_module(command + ["--overwrite", "--set", "train.total_steps=10"])
    assert "removed the previous run's" in fresh.stdout and "10/10" in fresh.stdout
    assert "resuming" not in fresh.stdout
    with open(output / "history.csv", newline="") as f:
        assert [row["epoch"] for row in csv.DictReader(f)] == ["0"]  # the new run's block only
    assert json.loads((output / "metrics.json").read_text())["train_steps"] == 10


def test_finetuning_keeps_a_finished_run(tmp_path):
    from kerasbert.config import FinetuneConfig
    from kerasbert.finetuning.run import run_finetuning

    (tmp_path / "metrics.json").write_text(json.dumps({"overall": 0.7, "train_steps": 600}))
    # No data, no checkpoint: a finished run is recognised before either is read.
    metrics = run_finetuning(FinetuneConfig(), "/nonexistent", str(tmp_path), "/nonexistent")
    assert metrics == {"overall": 0.7, "train_steps": 600}
    with pytest.raises(Exception, match="nonexistent"):  # overwrite: it really starts again
        run_finetuning(FinetuneConfig(), "/nonexistent", str(tmp_path), "/nonexistent", overwrite=True)
    assert not (tmp_path / "metrics.json").exists()


@pytest.mark.skipif(os.path.exists("/dev/nvidiactl"), reason="on a GPU machine the lines are shown")
def test_tensorflow_start_up_lines_are_hidden_unless_verbose(tmp_path):
    (tmp_path / "metrics.json").write_text(json.dumps({"train_steps": 1}))
    command = ["pipelines.pretrain", "--config", "pipelines/configs/pretrain_tiny.json",
               "--output_dir", str(tmp_path)]
    quiet = run_module(command)
    assert "holds a finished run" in quiet.stdout  # it ran, and TensorFlow was imported
    assert quiet.stderr.strip() == "", quiet.stderr
    verbose = run_module(command + ["--verbose"])
    assert "oneDNN" in verbose.stderr or "cuda" in verbose.stderr.lower()
