"""The demo's whole path (vocabulary -> ... -> REST answers -> report) on a tiny configuration."""

import json
import os
import re
import socket

import pytest

from conftest import DATA_DIR, run_main


@pytest.mark.skipif(not os.path.isdir(DATA_DIR), reason="shared data not present")
@pytest.mark.end_to_end
def test_demo_runs_the_whole_path_and_stops_its_server(demo_run):
    folder, result = demo_run  # tests/conftest.py runs the demo once for every test that reads it
    run, exports = folder / "run", folder / "exports"
    assert result.returncode == 0, f"{result.stdout[-3000:]}\n{result.stderr[-3000:]}"
    # The budget is the steps, not the clock.
    for stage, steps in (("pretrain", 10), ("finetune", 20)):
        assert json.loads((run / stage / "metrics.json").read_text())["train_steps"] == steps, stage
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
