"""Real tf.distribute strategies: mirrored over 2 logical CPUs, multi-worker over loopback."""

import json
import os
import subprocess
import sys

import pytest

from conftest import ROOT
from helpers import free_ports, tiny_run_config


@pytest.mark.end_to_end
def test_mirrored_step_matches_default_strategy():
    """The multitask model with SGD, the pretrainer with FusedAdamW (whose first step, at this
    epsilon, still scales with the gradient: a replica's loss scaled wrongly moves the weights
    differently): one fresh process (2 logical CPUs) for the two."""
    cases = ["multitask:sgd", "pretrainer:fused_adamw"]
    result = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "mirrored_step.py"), *cases],
                            cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT, "TF_CPP_MIN_LOG_LEVEL": "2"},
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    outs = json.loads(result.stdout.strip().splitlines()[-1])
    assert [out["case"] for out in outs] == cases
    for out in outs:
        assert out["replicas"] == 2, out
        assert out["loss_mirrored"] == pytest.approx(out["loss_default"], rel=1e-5), out
        assert out["max_update"] > 1e-3, out  # the step really changed the weights...
        assert out["max_weight_difference"] < 1e-5, out  # ...identically under both strategies


def start_workers(config, output, ports):
    cluster = {"worker": [f"localhost:{p}" for p in ports]}
    workers = []
    for index in range(2):
        env = {**os.environ, "PYTHONPATH": ROOT,
               "TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})}
        workers.append(subprocess.Popen(
            [sys.executable, "-m", "pipelines.pretrain", "--config", config, "--strategy", "multi_worker",
             "--output_dir", str(output)], cwd=ROOT, env=env, stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT, text=True))
    return workers


def finish(workers):
    """Each worker's output, once all have exited 0."""
    outputs = []
    for worker in workers:
        try:
            outputs.append(worker.communicate(timeout=400)[0])
        finally:
            worker.kill()
    for worker, out in zip(workers, outputs):
        assert worker.returncode == 0, out[-3000:]
    return outputs


def fingerprints(outputs):
    return [next(line for line in out.splitlines() if "weights_fingerprint=" in line)
            .split("weights_fingerprint=")[1].split()[0] for out in outputs]


@pytest.mark.end_to_end
def test_multi_worker_run_killed_and_restarted_resumes_in_sync_and_only_chief_writes(tmp_path):
    import signal
    import time

    config = tiny_run_config(tmp_path, steps=60, block=10)
    output = tmp_path / "out"
    workers = start_workers(config, output, free_ports(2))
    deadline = time.time() + 300
    try:
        while time.time() < deadline and not list((output / "backup").glob("block-0002.weights.h5")):
            assert all(w.poll() is None for w in workers), "a worker ended before the kill"
            time.sleep(0.05)
        workers[1].send_signal(signal.SIGKILL)  # a preempted worker...
        time.sleep(2)
        workers[0].send_signal(signal.SIGKILL)  # ...and the chief, stuck waiting for it, restarted too
    finally:
        for worker in workers:
            worker.kill()
            worker.communicate()
    assert not (output / "metrics.json").exists()

    outputs = finish(start_workers(config, output, free_ports(2)))
    resumed = [next(line for line in out.splitlines() if "resuming at step" in line)
               .split("resuming at step ")[1].split(" [")[0] for out in outputs]  # without the elapsed time
    steps = [int(line.split()[0]) for line in resumed]
    assert steps[0] == steps[1] >= 20  # the same block, both
    assert "/backup/block-" in resumed[0] and "/backup/" in resumed[1]
    assert len(set(fingerprints(outputs))) == 1  # still in sync
    assert "2 replica(s)" in outputs[0]
    metrics = json.loads((output / "metrics.json").read_text())
    assert metrics["train_steps"] == 60 and metrics["replicas"] == 2
    # Only the chief wrote: one set of outputs, no worker-specific files, no backups left.
    assert sorted(os.listdir(output)) == sorted(
        ["checkpoints", "config.json", "curves.png", "encoder", "history.csv", "logs",
         "metrics.json", "pretrainer.keras", "steps.csv", "vocab.txt"])
