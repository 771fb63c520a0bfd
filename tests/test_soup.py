"""A uniform model soup of fine-tuned runs: mean weights, one output folder, clear refusals."""

import dataclasses
import json
import os

import keras
import numpy as np
import pytest

from conftest import DATA_DIR, TINY_VOCAB, small_task_files, task_files_overrides
from kerasbert.config import FinetuneConfig, FinetuneDataConfig, HeadsConfig
from kerasbert.finetuning.soup import check_same_architecture
from pipelines import evaluate, soup
from helpers import tiny_model_dir

pytestmark = pytest.mark.skipif(not os.path.isdir(DATA_DIR), reason="shared data not present")


def write_member(path, files, seed):
    """A pipelines.finetune output folder holding a tiny random model whose dev files are `files`."""
    model, _ = tiny_model_dir(path, "cross", seed=seed, overrides=task_files_overrides(files))
    return model


def test_soup_is_the_mean_of_its_members_and_a_run_folder_others_read(tmp_path):
    files = small_task_files(tmp_path, train_rows=8, dev_rows=24)
    members = [write_member(str(tmp_path / f"seed{s}"), files, seed=s) for s in (1, 2)]
    output = tmp_path / "soup"
    assert soup.main(["--model_dirs"] + [str(tmp_path / f"seed{s}") for s in (1, 2)]
                     + ["--output_dir", str(output)]) == 0

    averaged = keras.models.load_model(str(output / "model.keras"), compile=False)
    member_weights = [m.get_weights() for m in members]
    for i, value in enumerate(averaged.get_weights()):
        np.testing.assert_allclose(value, np.mean([w[i] for w in member_weights], axis=0), atol=1e-6)

    metrics = json.loads((output / "metrics.json").read_text())
    assert [m["model_dir"] for m in metrics["members"]] == [str(tmp_path / f"seed{s}") for s in (1, 2)]
    assert metrics["overall"] == pytest.approx(
        (metrics["sst_accuracy"] + metrics["para_accuracy"] + (metrics["sts_pearson"] + 1) / 2) / 3)
    scored = tmp_path / "sts.json"
    assert evaluate.main(["--model_dir", str(output), "--task", "sts", "--data_file", files["sts_dev"],
                          "--output", str(scored)]) == 0
    assert json.loads(scored.read_text())["sts_pearson"] == pytest.approx(metrics["sts_pearson"], abs=1e-6)
    assert (output / "predictions" / "sst-dev.tsv").exists() and (output / "encoder").is_dir()
    # Started again into its finished folder: refused, the soup kept, unless --overwrite.
    again = ["--model_dirs", str(tmp_path / "seed1"), str(tmp_path / "seed2"), "--output_dir", str(output)]
    before = (output / "metrics.json").read_text()
    assert soup.main(again) == 2 and (output / "metrics.json").read_text() == before
    assert soup.main(again + ["--overwrite"]) == 0


@pytest.mark.parametrize("change, message", [
    ({"heads": HeadsConfig(pair_encoder="bi")}, "heads.pair_encoder differs"),
    ({"heads": HeadsConfig(pooling="cls")}, "heads.pooling differs"),
    ({"data": FinetuneDataConfig(max_sequence_length=32)}, "data.max_sequence_length differs"),
    ({"vocabulary": TINY_VOCAB + ["rug"]}, "its vocabulary differs"),
])
def test_soup_refuses_runs_of_another_architecture(change, message):
    config = FinetuneConfig(data=FinetuneDataConfig(max_sequence_length=16))
    vocabulary = change.pop("vocabulary", TINY_VOCAB)
    other = dataclasses.replace(config, **change)
    with pytest.raises(ValueError, match=message) as refused:
        check_same_architecture("runs/a", config, TINY_VOCAB, "runs/b", other, vocabulary)
    assert str(refused.value).startswith("runs/b: ")
    # Training settings may differ.
    check_same_architecture("runs/a", config, TINY_VOCAB, "runs/b", dataclasses.replace(
        config, heads=HeadsConfig(dropout=0.3)), TINY_VOCAB)


def test_soup_needs_two_runs(tmp_path, capsys):
    assert soup.main(["--model_dirs", str(tmp_path / "a"), "--output_dir", str(tmp_path / "soup")]) == 2
    assert "at least 2" in capsys.readouterr().err


def test_soup_will_not_overwrite_a_member(tmp_path, capsys):
    members = [str(tmp_path / "a"), str(tmp_path / "b")]
    assert soup.main(["--model_dirs", *members, "--output_dir", str(tmp_path / "b") + "/"]) == 2
    assert "would overwrite it" in capsys.readouterr().err
