"""The examples/ scripts run end to end, as a user runs them, each in a fresh process and
each on the previous one's output: pretrain (own text) -> fine-tune (a GLUE SST-2 file) ->
load the export in plain TensorFlow -> query it behind `python -m serving`."""

import os
import subprocess
import sys

import pytest

from conftest import DATA_DIR, ROOT

EXAMPLES = sorted(name for name in os.listdir(os.path.join(ROOT, "examples")) if name.endswith(".py"))


def run_example(name, *args, timeout=300, python_options=()):
    """Runs examples/<name> as a user does; returns the finished process (exit code 0 checked)."""
    env = {**os.environ, "PYTHONPATH": ROOT}
    result = subprocess.run([sys.executable, *python_options, os.path.join(ROOT, "examples", name), *args],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{name} exited {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_is_short_and_explains_its_flags(name):
    assert sum(1 for _ in open(os.path.join(ROOT, "examples", name))) <= 65
    result = run_example(name, "--help", timeout=60, python_options=("-X", "importtime"))
    assert f"python examples/{name}" in result.stdout and "--" in result.stdout
    assert "| tensorflow\n" not in result.stderr  # the flags answer before TensorFlow loads


def sst2_file(path, rows):
    """A GLUE SST-2 file (sentence, label; binary) made from the shared SST-5 rows."""
    with open(os.path.join(DATA_DIR, "cs224n", "sst-train.tsv"), encoding="utf-8") as f:
        lines = [next(f) for _ in range(rows + 1)][1:]
    with open(path, "w", encoding="utf-8") as f:
        f.write("sentence\tlabel\n")
        for line in lines:
            _, _, sentence, label = line.rstrip("\n").split("\t")
            f.write(f"{sentence.strip()}\t{int(int(label) >= 3)}\n")
    return str(path)


def test_examples_chain_from_pretraining_to_a_served_model(tmp_path):
    from serving.process import LocalServer

    text = tmp_path / "corpus.txt"  # the user's own text: paragraphs of WikiText-2
    with open(os.path.join(DATA_DIR, "wikitext-2", "valid.txt"), encoding="utf-8") as f:
        text.write_text(f.read(60_000), encoding="utf-8")
    pretrained = tmp_path / "my-bert"
    out = run_example("pretrain_fit.py", "--text", str(text), "--heldout_text", str(text), "--output_dir",
                      str(pretrained), "--vocab_size", "300", "--sequence_length", "32", "--batch_size", "8",
                      "--steps_per_epoch", "2", "--epochs", "2").stdout
    assert "Epoch 2/2" in out and "val_mlm_accuracy" in out
    assert (pretrained / "encoder" / "config.json").exists() and (pretrained / "pretrainer.keras").exists()

    export_base = tmp_path / "saved" / "sst2"
    train = sst2_file(tmp_path / "train.tsv", 48)
    out = run_example("finetune_fit.py", "--task", "sst", "--train", train, "--dev", train,
                      "--export_base", str(export_base), "--init_checkpoint", str(pretrained),
                      "--sequence_length", "32", "--batch_size", "8", "--steps_per_epoch", "2", "--epochs", "1").stdout
    assert "dev: {'sst_accuracy':" in out and f"exported {export_base}/1" in out

    out = run_example("load_saved_model.py", "--model", str(export_base / "1"), "--text", "A gripping film.",
                      "--text", "A dull film.").stdout
    assert "embed_tokens, sentiment, sentiment_classify, sentiment_tokens, serving_default" in out
    assert "paraphrase" not in out  # a one-task export carries that task's signatures only
    assert "embed: (2, 128)" in out and "serving_default probabilities: [[" in out

    with LocalServer("my-sst2", str(export_base), log_path=str(tmp_path / "server.log")) as server:
        server.wait_for_version(1)
        out = run_example("query_server.py", "--text", "A gripping film.", "--signature", "sentiment",
                          "--model_name", "my-sst2", "--rest_port", str(server.rest_port),
                          "--grpc_port", str(server.grpc_port)).stdout
    for line in ("serving.client rest: label (1,)", "serving.client grpc: label (1,)",
                 "PredictionServiceStub (version 1): label (1,)"):
        assert line in out, out
    assert out.count("probabilities (1, 5)") == 3


def test_readme_quick_start_runs(tmp_path):
    """README's Python quick start, with its paths pointed at a test folder and 2 steps a fit."""
    readme = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    code = readme.split("```python\n", 1)[1].split("```", 1)[0]
    for old, new in (("steps_per_epoch=100, epochs=3", "steps_per_epoch=2"),
                     ("steps_per_epoch=100", "steps_per_epoch=2"), ("../shared/data", DATA_DIR),
                     ('"saved_models/sts"', repr(str(tmp_path / "sts")))):
        assert old in code, f"README's quick start no longer has {old!r}: update this test"
        code = code.replace(old, new)
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, timeout=300,
                            env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr[-3000:]
    assert (tmp_path / "sts" / "1" / "saved_model.pb").exists()
    assert "shuffle=True was passed" not in result.stderr
