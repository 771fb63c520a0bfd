"""The pretraining pipelines end to end, as a user runs them: each `main()` with a command's
arguments, in the test's process (tests/test_pipeline_help.py starts each as `python -m`)."""

import json
import os

import pytest

from conftest import ROOT, run_main, write_corpus
from helpers import tiny_run_config

METRIC_KEYS = {"mlm_accuracy", "nsp_accuracy", "mlm_loss", "nsp_loss", "train_steps",
               "examples_per_second"}


@pytest.mark.end_to_end
def test_vocab_shards_and_pretrain_from_tfrecords(tmp_path, capsys):
    corpus = write_corpus(str(tmp_path / "corpus.txt"))
    vocab = str(tmp_path / "vocab.txt")
    run_main(["pipelines.vocab", "--corpus", corpus, "--vocab_size", "60", "--output", vocab], capsys, check=True)
    tokens = open(vocab).read().split("\n")
    assert tokens[:5] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] and "cat" in tokens
    again = run_main(["pipelines.vocab", "--corpus", corpus, "--vocab_size", "40", "--output", vocab], capsys)
    assert again.returncode == 2 and "pass --overwrite" in again.stderr and open(vocab).read().split("\n") == tokens

    config = tiny_run_config(tmp_path)
    shards = str(tmp_path / "shards")
    run_main(["pipelines.make_pretraining_data", "--config", config, "--vocab_file", vocab,
              "--output_dir", shards, "--num_shards", "3"], capsys, check=True)
    assert len(os.listdir(shards)) == 3

    output = tmp_path / "out"
    run_args = ["pipelines.pretrain", "--config", config,
                "--set", f"data.vocab_file={vocab}", "--set", f"data.tfrecord_dir={shards}",
                "--set", "data.masking=whole_word", "--set", "data.mlm_bias_prior=true",
                "--set", "model.position_init=sinusoidal"]
    result = run_main(run_args + ["--output_dir", str(output)], capsys, check=True)
    assert "step 20/20 (block 2/2)" in result.stdout  # progress shown, as plain lines off a terminal
    metrics = json.loads((output / "metrics.json").read_text())
    assert METRIC_KEYS <= set(metrics) and metrics["train_steps"] == 20
    assert 0.0 <= metrics["mlm_accuracy"] <= 1.0 and metrics["examples_per_second"] > 0
    saved = json.loads((output / "config.json").read_text())
    assert saved["data"]["masking"] == "whole_word"  # the resolved config travels with the run
    assert saved["data"]["mlm_bias_prior"] and saved["model"]["position_init"] == "sinusoidal"
    assert (output / "curves.png").stat().st_size > 1000
    # The held-out set is scored after every block; the last block's score is metrics.json's.
    history = (output / "history.csv").read_text().splitlines()
    header, last = history[0].split(","), history[-1].split(",")
    assert len(history) == 3 and "val_mlm_accuracy" in header
    assert float(last[header.index("val_mlm_loss")]) == pytest.approx(metrics["mlm_loss"], rel=1e-4)

    # The encoder folder is a keras-hub preset: what fine-tuning and from_preset load.
    import keras_hub
    encoder = keras_hub.models.BertBackbone.from_preset(str(output / "encoder"))
    tokenizer = keras_hub.models.BertTokenizer.from_preset(str(output / "encoder"))
    assert encoder.hidden_dim == 16 and tokenizer.vocabulary_size() == len(open(vocab).read().split())

    # Continuing from this run restores encoder and heads: with a learning rate of ~0 the
    # same held-out examples score as they did at the end of the first run, with the same
    # masks although training now masks twice as many tokens.
    again = tmp_path / "continued"
    result = run_main(run_args + ["--output_dir", str(again), "--init_checkpoint", str(output),
                                  "--set", "train.total_steps=2", "--set", "train.steps_per_block=2",
                                  "--set", "train.learning_rate=1e-12",
                                  "--set", "data.mask_selection_rate=0.3"], capsys, check=True)
    assert "initialised fresh" not in result.stdout
    continued = json.loads((again / "metrics.json").read_text())
    assert continued["train_steps"] == 2
    for key in ("mlm_loss", "nsp_loss"):
        assert continued[key] == pytest.approx(metrics[key], rel=1e-4), key


@pytest.mark.end_to_end
def test_continue_from_minilm_checkpoint(tmp_path, capsys):
    from kerasbert.models.encoder import minilm_checkpoint

    config = tiny_run_config(tmp_path, steps=2, block=2, batch=4)  # one block: one held-out score, one backup of 22M weights
    output = tmp_path / "minilm-continued"
    result = run_main(["pipelines.pretrain", "--config", config, "--output_dir", str(output),
                       "--init_checkpoint", minilm_checkpoint(), "--set", "data.nsp=false",
                       "--set", "data.vocab_file="], capsys, check=True)
    assert "6 layers, hidden 384" in result.stdout and "initialised fresh" in result.stdout
    metrics = json.loads((output / "metrics.json").read_text())
    assert metrics["nsp_accuracy"] is None and metrics["train_steps"] == 2
    # MiniLM's own 30522-token vocabulary is the run's vocabulary.
    assert len(open(output / "vocab.txt").read().split("\n")) >= 30522


@pytest.mark.parametrize("override, message", [
    ("data.sources=/nonexistent/corpus.txt", "/nonexistent/corpus.txt: file not found"),
    ("train.batch_size=4096", "fewer than one batch"),
    ("train.head_warmup_steps=2", "needs --init_checkpoint"),
])
def test_bad_input_gives_one_clear_error(tmp_path, capsys, override, message):
    config = tiny_run_config(tmp_path)
    result = run_main(["pipelines.pretrain", "--config", config, "--output_dir",
                       str(tmp_path / "out"), "--set", override], capsys)
    assert result.returncode == 2
    assert message in result.stderr and "Traceback" not in result.stderr


def test_missing_data_dir_names_the_file(tmp_path, capsys):
    result = run_main(["pipelines.pretrain", "--config", os.path.join(ROOT, "pipelines/configs/pretrain_tiny.json"),
                       "--output_dir", str(tmp_path / "out"), "--data_dir", str(tmp_path)], capsys)
    assert result.returncode == 2
    assert os.path.join(str(tmp_path), "wikitext-2", "valid.txt") in result.stderr
