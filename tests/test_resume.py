"""Runs that stop and start again: killed with SIGKILL mid-block, resumed from a damaged
backup, started twice, started where nothing can be written."""

import csv
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, run_main, run_module
from kerasbert.training.backup import damage
from helpers import tiny_run_config


def newest_backup_block(backup_dir):
    blocks = [int(p.name[6:10]) for p in backup_dir.glob("block-*.weights.h5") if len(p.name) == 21]  # not .partial
    return max(blocks, default=0)


def kill_after_backup(process, backup_dir, blocks):
    """Waits for the backup of block `blocks`, then SIGKILLs the run mid-way through the next;
    returns its exit code."""
    deadline = time.time() + 300
    try:
        while time.time() < deadline and newest_backup_block(backup_dir) < blocks:
            assert process.poll() is None, "run ended before it could be killed"
            time.sleep(0.05)
        time.sleep(0.3)
        process.kill()
        process.wait(timeout=300)  # a hang guard: a loaded machine takes its time
    finally:
        process.kill()
    return process.returncode


def sigterm_after_backup(command, backups, blocks, capsys):
    """Runs `command`'s main() in this process and sends this process SIGTERM (a scheduler's
    stop) as soon as the backup of block `blocks` is written; returns what `run_main` returns.
    main_guard's handler turns the signal into the KeyboardInterrupt a second process would see;
    one that arrives after the run ended fails the test, not the session."""
    running = threading.Event()
    running.set()

    def send():
        deadline = time.time() + 300
        while running.is_set() and time.time() < deadline:
            if newest_backup_block(backups) >= blocks:
                if signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, signal.SIG_IGN, None):  # else it ends pytest
                    os.kill(os.getpid(), signal.SIGTERM)
                return
            time.sleep(0.02)

    sender = threading.Thread(target=send)
    sender.start()
    try:
        try:
            return run_main(command, capsys)
        finally:
            running.clear()
            sender.join()
    except KeyboardInterrupt:
        pytest.fail("the run ended before SIGTERM reached it")


def assert_interrupted_cleanly(stderr: str, backups) -> None:
    """What Ctrl-C or SIGTERM leaves: one line naming where the same command resumes (seen
    before: ~58 lines of TensorFlow traceback, no word on resuming), and an intact backup."""
    last = stderr.strip().splitlines()[-1]
    newest = newest_backup_block(backups)
    assert re.fullmatch(rf"interrupted at step \d+; the same command resumes from step {newest * 10}", last), stderr
    assert "Traceback" not in stderr
    assert damage(str(backups / f"block-{newest:04d}.weights.h5")) is None  # the backup intact


@pytest.mark.end_to_end
def test_sigkill_or_sigterm_then_rerun_resumes_from_the_newest_backup_that_reads_whole(tmp_path, capsys):
    """One run's life: SIGKILLed (its own process, which prints none of TensorFlow's start-up
    lines), resumed and stopped by SIGTERM, resumed past a damaged backup to its end, then run
    again (nothing to do), with another config (refused) and with --overwrite (a fresh run).
    Only the first run needs a process of its own: the others run in this one."""
    config = tiny_run_config(tmp_path, steps=70, block=10, batch=8)
    output, backups = tmp_path / "out", tmp_path / "out" / "backup"
    command = ["pipelines.pretrain", "--config", config, "--output_dir", str(output)]
    # Unbuffered: what a run printed before its SIGKILL reaches the log. No TF_CPP_MIN_LOG_LEVEL: as a user runs it.
    env = {key: value for key, value in os.environ.items() if key not in ("TF_CPP_MIN_LOG_LEVEL", "KERASBERT_VERBOSE")}
    env.update(PYTHONPATH=ROOT, PYTHONUNBUFFERED="1")

    # Killed mid-block, then run again: it goes on from the newest backup.
    with open(tmp_path / "first.log", "w") as out, open(tmp_path / "first.log.err", "w") as err:
        first = subprocess.Popen([sys.executable, "-m", *command], cwd=ROOT, env=env, stdout=out, stderr=err)
    assert kill_after_backup(first, backups, blocks=2) == -signal.SIGKILL
    assert "step 10/70 (block 1/7)" in (tmp_path / "first.log").read_text()  # it trained...
    assert (tmp_path / "first.log.err").read_text() == ""  # ...and TensorFlow's start-up lines were hidden
    assert not (output / "metrics.json").exists()
    newest = newest_backup_block(backups)
    assert 2 <= newest <= 4  # and so the second run has blocks left after newest + 2
    # SIGTERM (a scheduler's stop) mid-block: exit 130 and one line saying where it resumes.
    second = sigterm_after_backup(command, backups, newest + 2, capsys)
    assert second.returncode == 130, second.stderr[-2000:]
    assert_interrupted_cleanly(second.stderr, backups)
    assert f"resuming at step {newest * 10} from {backups / f'block-{newest:04d}.weights.h5'}" in second.stdout

    # Stopped again, and the newest backup is damaged: it goes on from the one before.
    newest = newest_backup_block(backups)
    damaged = backups / f"block-{newest:04d}.weights.h5"
    damaged.write_bytes(damaged.read_bytes()[: damaged.stat().st_size // 2])  # truncated
    # A write cut short by the kill leaves only a temporary file, which is never read.
    (backups / f"block-{newest + 1:04d}.weights.h5.partial.weights.h5").write_bytes(b"\0" * 100)
    result = run_main(command, capsys, check=True)
    assert f"{damaged} (after block {newest}) is damaged" in result.stdout
    # The weights and the data resume from the same block: the one before the damaged one.
    previous = backups / f"block-{newest - 1:04d}.weights.h5"
    assert f"resuming at step {(newest - 1) * 10} from {previous}" in result.stdout

    metrics = json.loads((output / "metrics.json").read_text())
    # Optimizer state came back: exactly the planned steps, none repeated past the backup.
    assert metrics["train_steps"] == 70
    with open(output / "history.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    blocks = [int(row["epoch"]) for row in rows]  # every block logged; the rerun's from where it resumed
    assert sorted(set(blocks)) == list(range(7)) and blocks[-(8 - newest):] == list(range(newest - 1, 7))
    # One column per logged key, filled in every row: no empty val_* columns.
    assert all("NA" not in row.values() for row in rows) and "mlm_accuracy" in rows[0]
    assert not backups.exists()  # removed after a finished run

    # The finished run is kept: the same command trains nothing, another config is refused.
    history = (output / "history.csv").read_text()
    metrics = (output / "metrics.json").read_text()
    again = run_main(command, capsys)
    assert again.returncode == 0
    assert "holds a finished run (metrics.json, 70 steps)" in again.stdout
    assert "Epoch" not in again.stdout and "--overwrite" in again.stdout
    assert (output / "history.csv").read_text() == history  # not a second history
    assert (output / "metrics.json").read_text() == metrics

    changed = run_main(command + ["--set", "train.total_steps=40"], capsys)  # seen before: trained nothing, exit 0
    assert changed.returncode == 2 and "Traceback" not in changed.stderr
    assert "holds a finished run with another config (train.total_steps: 70 -> 40)" in changed.stderr
    assert "--overwrite" in changed.stderr and (output / "metrics.json").read_text() == metrics

    fresh = run_main(command + ["--overwrite", "--set", "train.total_steps=10"], capsys, check=True)
    assert "removed the previous run's" in fresh.stdout and "10/10" in fresh.stdout
    assert "resuming" not in fresh.stdout
    with open(output / "history.csv", newline="") as f:
        assert [row["epoch"] for row in csv.DictReader(f)] == ["0"]  # the new run's block only
    assert json.loads((output / "metrics.json").read_text())["train_steps"] == 10


def test_ctrl_c_unwinds_a_pipeline_as_sigterm_does(capsys):
    """Ctrl-C is Python's own SIGINT handler raising KeyboardInterrupt where main_guard's SIGTERM
    handler raises it in the SIGKILL test's second run (which sees the one line naming where the
    same command resumes): the same unwinding, exit 130 and no traceback. In this process, as a
    second training run would only repeat that one."""
    from pipelines.common import main_guard

    def run():
        signal.raise_signal(signal.SIGINT)
        raise AssertionError("Ctrl-C did not stop the run")

    # A suite started in the background (`make test &`) has SIGINT ignored: Python's default here.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        assert main_guard(run) == 130
    finally:
        signal.signal(signal.SIGINT, previous)
    assert capsys.readouterr().err == "\ninterrupted\n"


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
def test_tensorflow_start_up_lines_are_shown_with_verbose(tmp_path):
    """Hidden without it: the SIGKILL test's first run (a process of its own) prints nothing to stderr."""
    (tmp_path / "metrics.json").write_text(json.dumps({"train_steps": 1}))
    verbose = run_module(["pipelines.pretrain", "--config", "pipelines/configs/pretrain_tiny.json",
                          "--output_dir", str(tmp_path), "--verbose"])
    assert "holds a finished run" in verbose.stdout  # it ran, and TensorFlow was imported
    assert "oneDNN" in verbose.stderr or "cuda" in verbose.stderr.lower()


def test_no_readable_backup_is_an_error_that_names_the_file(tmp_path, capsys):
    config = tiny_run_config(tmp_path, steps=20, block=10, batch=8)
    output = tmp_path / "out"
    (output / "backup").mkdir(parents=True)
    for block in (1, 2):
        (output / "backup" / f"block-{block:04d}.weights.h5").write_bytes(b"not an HDF5 file")
    result = run_main(["pipelines.pretrain", "--config", config, "--output_dir", str(output)], capsys)
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"error: {output / 'backup' / 'block-0002.weights.h5'}: no backup" in result.stderr
    assert "--overwrite" in result.stderr and not (output / "history.csv").exists()


def test_an_output_dir_that_cannot_be_written_is_an_error_before_training(tmp_path, capsys):
    config = tiny_run_config(tmp_path, steps=20, block=10, batch=8)
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    for output_dir in (blocker / "out", "/proc/kerasbert-test"):  # not a folder; a read-only file system
        result = run_main(["pipelines.pretrain", "--config", config, "--output_dir", str(output_dir)], capsys)
        assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
        assert result.stderr.startswith("error: ") and str(output_dir) in result.stderr
        assert "Epoch" not in result.stdout


@pytest.fixture
def small_disk(tmp_path):
    """A 300 kB file system of its own (tmpfs), or a skip where mounting is not allowed."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(mount)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_a_disk_too_small_for_the_backups_is_an_error_before_training(tmp_path, small_disk, capsys):
    config = tiny_run_config(tmp_path, steps=20, block=10, batch=8)
    result = run_main(["pipelines.pretrain", "--config", config, "--output_dir", str(small_disk / "out")], capsys)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert "MB free, but this run's backups need about" in result.stderr and "Epoch" not in result.stdout
    with open(small_disk / "filler", "wb", buffering=0) as filler:  # and a disk already full
        with pytest.raises(OSError, match="No space left"):
            while True:
                filler.write(b"\0" * 4096)
    result = run_main(["pipelines.pretrain", "--config", config, "--output_dir", str(small_disk / "out2")], capsys)
    assert result.returncode == 2 and "No space left on device" in result.stderr, result.stderr[-2000:]


def test_a_finished_run_of_an_earlier_version_is_the_same_config_where_only_its_writing_differs(tmp_path, capsys):
    # Earlier versions wrote every family's settings into every task (`doc_stride` on SST-5):
    # the same config read by this version, not "another config".
    import dataclasses

    from kerasbert.config import FinetuneConfig, load_config, to_dict
    from kerasbert.errors import ConfigError
    from kerasbert.training.run_folder import check_output_dir, mark_finished

    config = load_config(FinetuneConfig, None, ["tasks=sst,squad"])
    written = to_dict(config)
    for task in written["tasks"].values():
        task.update({"sequence_length": 0, "doc_stride": 128, "max_query_length": 64, "max_answer_length": 30,
                     "max_windows": 16, "words": "spaces", **task})
    (tmp_path / "config.json").write_text(json.dumps(written))
    mark_finished(str(tmp_path), {"train_steps": 60})
    assert check_output_dir(str(tmp_path), ("metrics.json",), False, config=config) == {"train_steps": 60}
    steps = config.train.total_steps
    longer = dataclasses.replace(config, train=dataclasses.replace(config.train, total_steps=2 * steps))
    with pytest.raises(ConfigError, match=rf"another config \(train\.total_steps: {steps} -> {2 * steps}\)\. "):
        check_output_dir(str(tmp_path), ("metrics.json",), False, config=longer)
