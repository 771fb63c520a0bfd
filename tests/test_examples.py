"""The examples/ scripts run end to end, as a user runs them, each in a fresh process and
each on the previous one's output: pretrain (own text) -> fine-tune (a GLUE SST-2 file, as the
binary task sst2) -> load the export in plain TensorFlow -> query it behind `python -m serving`.
None of them prints TensorFlow's C++ start-up lines."""

import json
import os
import subprocess
import sys
import urllib.request

import pytest

from conftest import DATA_DIR, ROOT, without_tensorflow

# TensorFlow's C++ start-up lines (kerasbert.quiet).
CPP_START_UP_LINES = ("cudart_stub.cc", "cuInit", "oneDNN custom operations", "cpu_feature_guard")
EXAMPLES = sorted(name for name in os.listdir(os.path.join(ROOT, "examples")) if name.endswith(".py"))


def run_example(name, *args, timeout=300, env=None):
    """Runs examples/<name> as a user does; returns the finished process (exit code 0 checked)."""
    env = {**os.environ, "PYTHONPATH": ROOT, **(env or {})}
    result = subprocess.run([sys.executable, os.path.join(ROOT, "examples", name), *args],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"{name} exited {result.returncode}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    for line in CPP_START_UP_LINES:  # hidden: they say nothing on a machine without an NVIDIA GPU
        assert line not in result.stderr, result.stderr[-3000:]
    return result


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_is_short_and_explains_its_flags(name, tmp_path):
    assert sum(1 for _ in open(os.path.join(ROOT, "examples", name))) <= 65
    # The flags answer before TensorFlow loads.
    result = run_example(name, "--help", timeout=60, env=without_tensorflow(tmp_path))
    assert f"python examples/{name}" in result.stdout and "--" in result.stdout


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


@pytest.mark.end_to_end
def test_examples_chain_from_pretraining_to_a_served_model(tmp_path):
    from serving.process import LocalServer

    text = tmp_path / "corpus.txt"  # the user's own text: paragraphs of WikiText-2
    with open(os.path.join(DATA_DIR, "wikitext-2", "valid.txt"), encoding="utf-8") as f:
        text.write_text(f.read(20_000), encoding="utf-8")
    pretrained = tmp_path / "my-bert"
    out = run_example("pretrain_fit.py", "--text", str(text), "--heldout_text", str(text), "--output_dir",
                      str(pretrained), "--vocab_size", "300", "--sequence_length", "32", "--batch_size", "8",
                      "--steps_per_epoch", "2", "--epochs", "2").stdout
    assert "Epoch 2/2" in out and "val_mlm_accuracy" in out
    assert (pretrained / "encoder" / "config.json").exists() and (pretrained / "pretrainer.keras").exists()

    export_base = tmp_path / "saved" / "sst2"
    train = sst2_file(tmp_path / "train.tsv", 48)
    args = ["--train", train, "--dev", train, "--export_base", str(export_base), "--init_checkpoint", str(pretrained),
            "--sequence_length", "32", "--batch_size", "8", "--steps_per_epoch", "2", "--epochs", "1"]
    refused = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "finetune_fit.py"), "--task", "sst",
                              *args], cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True,
                             text=True, timeout=300)
    # SST-5's 5-class head never trains on SST-2's binary labels; one line says which task reads the file.
    assert refused.returncode == 1 and refused.stderr.startswith(f"error: {train}:1: a glue-layout header; it is "
                                                                 "task 'sst2''s layout (SST-2)"), refused.stderr
    assert "Traceback" not in refused.stderr and len(refused.stderr.splitlines()) == 1
    out = run_example("finetune_fit.py", "--task", "sst2", *args).stdout
    assert "dev: {'sst2_accuracy':" in out and f"exported {export_base}/1" in out

    out = run_example("load_saved_model.py", "--model", str(export_base / "1"), "--text", "A gripping film.",
                      "--text", "A dull film.").stdout
    assert ("binary_sentiment, binary_sentiment_classify, binary_sentiment_tokens, embed, embed_tokens, "
            "serving_default") in out
    assert "sentiment," not in out.replace("binary_sentiment,", "")  # one task's signatures only
    assert "embed: (2, 128)" in out and "serving_default probabilities: [[" in out

    with LocalServer("my-sst2", str(export_base), log_path=str(tmp_path / "server.log")) as server:
        server.wait_for_version(1)
        out = run_example("query_server.py", "--text", "A gripping film.", "--signature", "binary_sentiment",
                          "--model_name", "my-sst2", "--rest_port", str(server.rest_port),
                          "--grpc_port", str(server.grpc_port)).stdout
        classify = json.loads(urllib.request.urlopen(urllib.request.Request(
            f"http://127.0.0.1:{server.rest_port}/v1/models/my-sst2:classify",
            json.dumps({"signature_name": "binary_sentiment_classify",
                        "examples": [{"text": "A gripping film."}, {"text": "A dull film."}]}).encode()),
            timeout=30).read())
    for line in ("serving.client rest: class_name (1,)", "serving.client grpc: class_name (1,)",
                 "PredictionServiceStub (version 1): class_name (1,)"):
        assert line in out, out
    assert out.count("probabilities (1, 2)") == 3
    # SST-2's classes, with their names, as TF Serving's :classify gives them: [name, score] per class.
    assert [[name for name, _ in row] for row in classify["results"]] == [["negative", "positive"]] * 2
    assert all(abs(sum(score for _, score in row) - 1) < 1e-5 for row in classify["results"])


@pytest.mark.end_to_end
def test_own_data_example_trains_on_a_csv_and_the_server_names_its_classes(tmp_path, tiny_checkpoint):
    bad = subprocess.run([sys.executable, os.path.join(ROOT, "examples", "finetune_own_data.py"), "--label", "category",
                          "--output_dir", str(tmp_path / "bad")], cwd=ROOT,  # checked before TensorFlow loads
                         env={**os.environ, **without_tensorflow(tmp_path / "no-tf")}, capture_output=True, text=True,
                         timeout=300)
    assert bad.returncode == 1 and len(bad.stderr.splitlines()) == 1, bad.stderr
    assert bad.stderr.startswith("error: ") and "tickets.csv:1: header lacks column(s) ['category']" in bad.stderr

    # 2 steps of a tiny encoder: the test checks the path (CSV -> task -> run -> export -> server's
    # class names), not accuracy.
    out = run_example("finetune_own_data.py", "--output_dir", str(tmp_path / "own"), "--steps", "2",
                      "--init_checkpoint", tiny_checkpoint, timeout=900).stdout
    assert "dev accuracy" in out and f"exported {tmp_path}/own/export/1" in out
    answers = [line for line in out.splitlines() if line.startswith(("'refund", "'it crashes"))]
    assert len(answers) == 2 and all(line.split(": ")[1].split(" ")[0] in ("account", "billing", "bug")
                                     for line in answers), out


@pytest.mark.end_to_end
def test_fit_on_own_tf_data_example_trains_and_exports(tmp_path, tiny_checkpoint):
    """docs/training.md's Keras `fit` on your own tf.data: a CSV read by tf.data, the preprocessor's
    contract, labels as class indices, the classes from read_training_file; 2 steps of a tiny encoder."""
    export_base = tmp_path / "saved" / "tickets"
    out = run_example("fit_own_dataset.py", "--export_base", str(export_base), "--steps", "2",
                      "--init_checkpoint", tiny_checkpoint, timeout=900).stdout
    assert "classes ['account', 'billing', 'bug']; 'refund the double charge': " in out, out
    assert out.strip().endswith(f"exported {export_base}/1") and (export_base / "1" / "saved_model.pb").exists()
