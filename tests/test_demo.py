"""The demo's whole path (vocabulary -> ... -> REST answers -> report) on a tiny configuration."""

import json
import os
import re
import signal
import socket

import pytest

from conftest import DATA_DIR, run_main

TINY = ["--init_checkpoint", "pretrained", "--eval_examples", "64",
        "--set", "pretrain.data.vocab_size=1000", "--set", "pretrain.data.heldout_examples=32",
        "--set", "pretrain.train.total_steps=10", "--set", "pretrain.train.steps_per_block=10",
        "--set", "finetune.data.max_train_examples=64", "--set", "finetune.data.max_dev_examples=32",
        "--set", "finetune.train.batch_size=8", "--set", "finetune.train.total_steps=10",
        "--set", "finetune.train.steps_per_block=10"]


def wikitext_paragraphs(path, count=150):
    """The first paragraphs of WikiText-2 as a small plain-text corpus (real text, quick to learn a
    vocabulary from: the whole file takes half a minute)."""
    with open(os.path.join(DATA_DIR, "wikitext-2", "valid.txt"), encoding="utf-8") as f:
        paragraphs = [line.strip() for line in f if len(line.strip()) > 80][:count]
    path.write_text("\n\n".join(paragraphs) + "\n", encoding="utf-8")
    return str(path)


@pytest.mark.skipif(not os.path.isdir(DATA_DIR), reason="shared data not present")
@pytest.mark.end_to_end
def test_demo_runs_the_whole_path_and_stops_its_server(tmp_path, capsys):
    run, exports = tmp_path / "run", tmp_path / "exports"
    corpus = wikitext_paragraphs(tmp_path / "corpus.txt")
    # In this process (its TensorFlow already loaded): what the test checks is the path and the
    # child server the demo starts and stops, not the demo's own process. The demo makes SIGTERM
    # unwind like Ctrl-C; the test process gets its own handler back.
    handler = signal.getsignal(signal.SIGTERM)
    try:
        result = run_main(["pipelines.demo", "--data_dir", DATA_DIR, "--output_dir", str(run),
                           "--export_base", str(exports), "--set", f"pretrain.data.sources={corpus}",
                           # held out from the same paragraphs: tokenizing all of WikiText-2's test set takes seconds
                           "--set", f"pretrain.data.heldout_source={corpus}"] + TINY, capsys, check=True)
    finally:
        signal.signal(signal.SIGTERM, handler)
    # The budget is the steps, not the clock.
    for stage in ("pretrain", "finetune"):
        assert json.loads((run / stage / "metrics.json").read_text())["train_steps"] == 10, stage
    out = result.stdout
    titles = ["vocabulary", "pretrain", "fine-tune", "evaluate", "export", "serve", "report"]
    positions = [out.index(f"== [{n}/7] {title} (elapsed") for n, title in enumerate(titles, start=1)]
    assert positions == sorted(positions)
    assert "== kerasbert demo: summary" in out and str(run / "report.md") in out

    report = (run / "report.md").read_text()
    links = re.findall(r"\]\(([^)]+)\)", report)
    assert {"pretrain/curves.png", "finetune/curves.png", "finetune/sst_confusion.png"} <= set(links)
    for link in links:
        assert (run / link).exists(), link
    results = json.loads((run / "results.json").read_text())
    rest = results["rest"]
    assert len(rest["sentiment"]["label"]) == 3 and len(rest["paraphrase"]["probability"]) == 4
    assert all(abs(sum(p) - 1) < 1e-4 for p in rest["sentiment"]["probabilities"])
    assert all(0 <= s <= 5 for s in rest["similarity"]["score"])
    assert rest["max_difference_from_keras"] < 1e-4  # the server answers with the fine-tuned model
    assert set(results["dev"]) >= {"sst_accuracy", "para_accuracy", "sts_pearson", "overall"}
    assert (exports / "1" / "saved_model.pb").exists()

    port = int(re.search(r"REST :(\d+)", out).group(1))
    with pytest.raises(OSError):  # the server the demo started is gone
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_demo_rejects_an_override_without_a_stage(capsys):
    result = run_main(["pipelines.demo", "--set", "train.total_steps=10"], capsys)
    assert result.returncode == 2 and "pretrain.<key>=<value> or finetune.<key>=<value>" in result.stderr


def test_the_help_examples_shorter_run_needs_no_second_key():
    from kerasbert.config import FinetuneConfig, PretrainConfig, load_config

    for cls, config in ((PretrainConfig, "pretrain_tiny.json"), (FinetuneConfig, "finetune_demo.json")):
        train = load_config(cls, os.path.join("pipelines", "configs", config), ["train.total_steps=20"]).train
        assert (train.total_steps, train.steps_per_block) == (20, 20)


def test_demo_checks_every_stage_config_before_stage_one(tmp_path, capsys, monkeypatch):
    from pipelines.demo_stages import Demo

    def stage_one(self):
        raise AssertionError("stage 1 ran with a stage-3 config that cannot load")

    monkeypatch.setattr(Demo, "vocabulary", stage_one)
    result = run_main(["pipelines.demo", "--output_dir", str(tmp_path / "demo"),
                       "--set", "finetune.train.total_steps=200"], capsys)  # finetune_demo's blocks are 150 steps
    assert result.returncode == 2 and "train.total_steps must be a multiple of train.steps_per_block" in result.stderr
    assert "[1/7]" not in result.stdout
