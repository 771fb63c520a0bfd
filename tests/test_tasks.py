"""The task declarations: each declared task is read, trained, scored and exported from its
declaration alone; CFIMDB, declared after the three of the reference study, is the proof."""

import json
import os

import numpy as np
import pytest
import tensorflow as tf

from conftest import DATA_DIR, run_main, small_task_files, task_files_config
from kerasbert.config import ModelConfig
from kerasbert.data.tasks import read_task_file
from kerasbert.export import METHODS
from kerasbert.models.encoder import build_encoder
from kerasbert.tasks import TASK_IDS, TASKS, Columns, Task, clean_review


def test_declarations_are_consistent():
    names = [name for task in TASKS.values() for name in task.signature_names]
    assert len(names) == len(set(names)), "two tasks would export a signature of the same name"
    assert len({task.head for task in TASKS.values()}) == len(TASKS)
    assert sorted(TASK_IDS.values()) == list(range(len(TASKS)))
    assert METHODS["review_sentiment_classify"] == "tensorflow/serving/classify"
    assert METHODS["similarity_regress"] == "tensorflow/serving/regress"
    with pytest.raises(ValueError, match="kind must be one of"):
        Task("x", "x", "ranking", "X", "a", "b", {"glue": Columns("a", None, "label")})
    with pytest.raises(ValueError, match="2 class names for 3 classes"):
        Task("x", "x", "classes", "X", "a", "b", {}, num_classes=3, class_names=("a", "b"))


def test_review_text_is_unescaped():
    raw = ' """ Slow and "" "" reality TV "" "" , the soap .<br /><br />It \'s bad . """'
    assert clean_review(raw) == 'Slow and " reality TV " , the soap . It \'s bad .'
    assert clean_review(" A plain review . ") == "A plain review ."


@pytest.mark.skipif(not os.path.isdir(DATA_DIR), reason="shared data not present")
def test_every_declared_task_reads_its_shared_files():
    # GLUE's SST-2 is not in the shared data: test_readers and test_examples write their own.
    for task in (task for task in TASKS.values() if task.name != "sst2"):
        for path in (task.train_file, task.dev_file):
            result = read_task_file(task.name, os.path.join(DATA_DIR, path))
            assert len(result.examples) > 200 and result.skipped < 0.01 * len(result.examples), path
            labels = np.array([e.label for e in result.examples])
            if task.kind == "pair_score":
                assert labels.min() >= 0 and labels.max() <= task.max_score
            else:
                assert set(labels.astype(int)) == set(range(task.num_classes)), path
    reviews = read_task_file("cfimdb", os.path.join(DATA_DIR, "cs224n", "cfimdb-dev.tsv")).examples
    assert len(reviews) == 245 and sum(e.label for e in reviews) == 122  # as the data README counts
    assert not any("<br />" in e.text_a or e.text_a.startswith('"""') or e.text_b for e in reviews)


@pytest.mark.skipif(not os.path.isdir(DATA_DIR), reason="shared data not present")
def test_a_fourth_task_trains_scores_and_exports_from_its_declaration(tmp_path, capsys):
    from kerasbert.models.encoder import minilm_checkpoint
    from kerasbert.tokenization import load_tokenizer

    checkpoint = tmp_path / "tiny-encoder"  # a tiny random encoder with MiniLM's vocabulary
    build_encoder(ModelConfig(preset="custom", num_layers=1, hidden_dim=16, num_heads=2), 30522) \
        .save_to_preset(str(checkpoint))
    load_tokenizer(minilm_checkpoint()).save_to_preset(str(checkpoint))
    files = small_task_files(tmp_path, train_rows=32, dev_rows=24, tasks=("sts", "cfimdb"))
    config = {"tasks": ["cfimdb", "sts"], "data": {**task_files_config(files), "max_sequence_length": 32},
              "train": {"batch_size": 8, "total_steps": 10, "steps_per_block": 5, "learning_rate": 1e-3}}
    (tmp_path / "config.json").write_text(json.dumps(config))
    output, export_base = tmp_path / "out", tmp_path / "export"
    run_main(["pipelines.finetune", "--config", str(tmp_path / "config.json"),
              "--init_checkpoint", str(checkpoint), "--output_dir", str(output)], capsys, check=True)
    metrics = json.loads((output / "metrics.json").read_text())
    assert {"cfimdb_accuracy", "sts_pearson", "sts_spearman"} <= set(metrics)
    assert not {"sst_accuracy", "para_accuracy"} & set(metrics)  # only the run's tasks
    assert metrics["overall"] == pytest.approx((metrics["cfimdb_accuracy"] + (metrics["sts_pearson"] + 1) / 2) / 2)
    assert (output / "cfimdb_confusion.png").exists() and (output / "predictions" / "cfimdb-dev.tsv").exists()

    run_main(["pipelines.export", "--model_dir", str(output), "--export_base", str(export_base)], capsys, check=True)
    loaded = tf.saved_model.load(str(export_base / "1"))
    assert set(loaded.signatures) == {"review_sentiment", "review_sentiment_tokens", "review_sentiment_classify",
                                      "similarity", "similarity_tokens", "similarity_regress",
                                      "embed", "embed_tokens", "serving_default"}
    answer = loaded.signatures["review_sentiment"](text=tf.constant(["A fine film .", "Dull ."]))
    probabilities = answer["probabilities"].numpy()
    assert probabilities.shape == (2, 2) and np.allclose(probabilities.sum(-1), 1.0, atol=1e-5)
    default = loaded.signatures["serving_default"](text=tf.constant(["A fine film ."]))
    np.testing.assert_allclose(default["probabilities"].numpy(), probabilities[:1], atol=1e-5)
