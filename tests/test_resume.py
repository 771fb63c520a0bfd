"""Kill a pretraining run with SIGKILL mid-block; the same command resumes and finishes."""

import csv
import json
import os
import signal
import subprocess
import sys
import time

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
