"""The embedding family (kind `embedding`, kerasbert/families/embedding/): scored pairs train with
CoSENT and report `<task>_spearman`, unlabelled pairs with multiple-negatives ranking and report
recall@1 and MRR@10; the task's `text -> embedding` signature serves unit vectors over REST, feeds
pipelines.batch_predict and pipelines.search by its name, and `--format transformers` writes a
sentence-transformers folder."""

import json
import os
import subprocess

import numpy as np
import pytest
import tensorflow as tf

from conftest import ROOT, run_main
from kerasbert.families.embedding.losses import cosent_loss, mnrl_loss
from kerasbert.tasks import Task, TaskError

TOPICS = {"refund": "billing", "charge": "billing", "invoice": "billing", "crash": "bug", "error": "bug",
          "freeze": "bug"}
REST = ["the", "page", "was", "slow", "today", "again", "card", "screen", "my", "after"]


def sentence(i: int) -> str:
    first = list(TOPICS)[i % len(TOPICS)]
    return " ".join([first, *(REST[(i * k + k) % len(REST)] for k in range(1, 3 + i % 4))])


def scored_pair(i: int) -> dict:
    """Two sentences, scored 0-5: 5 for one topic's words, 0 for another's, some in between."""
    a, b = sentence(i), sentence(i + 1 + i % 3)
    same = TOPICS[a.split()[0]] == TOPICS[b.split()[0]]
    return {"first": a, "second": b, "score": (4.0 if same else 1.0) + (i % 3) * 0.5}


def unit_rows(vectors) -> np.ndarray:
    return np.linalg.norm(np.asarray(vectors), axis=-1)


def test_cosent_and_mnrl_equal_their_formulas_in_numpy():
    rng = np.random.default_rng(0)
    u, v, scores = rng.normal(size=(5, 4)), rng.normal(size=(5, 4)), np.array([0.0, 2.5, 5.0, 1.0, 2.5])
    cos = np.sum(u * v, -1) / (np.linalg.norm(u, axis=-1) * np.linalg.norm(v, axis=-1))
    pairs = [(i, j) for i in range(5) for j in range(5) if scores[i] > scores[j]]
    cosent = np.log1p(sum(np.exp(20 * (cos[j] - cos[i])) for i, j in pairs))
    logits = 20 * (u / np.linalg.norm(u, axis=-1, keepdims=True)) @ (v / np.linalg.norm(v, axis=-1, keepdims=True)).T
    mnrl = np.mean([np.log(np.sum(np.exp(row))) - row[i] for i, row in enumerate(logits)])
    as_tf = [tf.constant(x, tf.float32) for x in (u, v, scores)]
    np.testing.assert_allclose(float(cosent_loss(*as_tf, 20.0)), cosent, rtol=1e-4)
    np.testing.assert_allclose(float(mnrl_loss(*as_tf[:2], 20.0)), mnrl, rtol=1e-4)


def test_a_declaration_takes_two_text_columns_and_only_its_own_keys():
    with pytest.raises(TaskError, match="text_a and text_b"):
        Task("sim", "embedding", text="body")
    with pytest.raises(TaskError, match="min_score is a score or pair_score task's setting"):
        Task("sim", "embedding", text_a="a", text_b="b", min_score=0)
    with pytest.raises(TaskError, match="label names the label column"):
        Task("para", "pair_classes", text_a="a", text_b="b", label="")  # another family needs its label
    assert Task("sim", "embedding", text_a="a", text_b="b", label="score").metric_names == ("sim_spearman",)


@pytest.fixture(scope="module")
def embedding_run(tmp_path_factory, tiny_checkpoint):
    """One run of two embedding tasks on a tiny random encoder: `sim` (scored pairs, CSV) and
    `pairs` (unlabelled (anchor, positive) pairs, JSON Lines); its folder, exports and data."""
    from pipelines import export, finetune

    root = tmp_path_factory.mktemp("embedding")
    data = root / "data"
    data.mkdir()
    for split, count in (("train", 48), ("dev", 24)):
        rows = [scored_pair(i + (0 if split == "train" else 100)) for i in range(count)]
        (data / f"sim-{split}.csv").write_text("first,second,score\n" + "".join(
            f"{r['first']},{r['second']},{r['score']}\n" for r in rows))
        (data / f"pairs-{split}.jsonl").write_text("".join(
            json.dumps({"question": sentence(i), "answer": sentence(i + len(TOPICS))}) + "\n"
            for i in range(count)))
    config = {"tasks": {"sim": {"kind": "embedding", "train_file": "sim-train.csv", "dev_file": "sim-dev.csv",
                                "text_a": "first", "text_b": "second", "label": "score"},
                        "pairs": {"kind": "embedding", "train_file": "pairs-train.jsonl",
                                  "dev_file": "pairs-dev.jsonl", "text_a": "question", "text_b": "answer"}},
              "data": {"max_sequence_length": 16},
              "train": {"batch_size": 8, "total_steps": 4, "steps_per_block": 2, "learning_rate": 1e-3}}
    (root / "config.json").write_text(json.dumps(config))
    run, exports = root / "run", root / "export" / "sim"
    assert finetune.main(["--config", str(root / "config.json"), "--data_dir", str(data), "--init_checkpoint",
                          tiny_checkpoint, "--output_dir", str(run)]) == 0
    assert export.main(["--model_dir", str(run), "--export_base", str(exports)]) == 0
    return run, exports / "1", data


def test_scored_and_unlabelled_pairs_report_their_metrics(embedding_run):
    run, _, _ = embedding_run
    metrics = json.loads((run / "metrics.json").read_text())
    assert -1 <= metrics["sim_spearman"] <= 1 and not np.isnan(metrics["sim_spearman"])
    assert 0 <= metrics["pairs_recall_at_1"] <= metrics["pairs_mrr_at_10"] <= 1
    assert not any(key.startswith("sim_recall") or key.startswith("pairs_spearman") for key in metrics)
    rows = (run / "predictions" / "sim-dev.tsv").read_text().splitlines()
    assert len(rows) == 25 and -1 <= float(rows[1].split("\t")[2]) <= 1


def test_the_task_signature_serves_unit_embeddings_over_rest(embedding_run):
    from serving_helpers import Server

    _, version, _ = embedding_run
    texts = [sentence(i) for i in range(5)]
    signatures = tf.saved_model.load(str(version)).signatures
    served = signatures["sim"](text=tf.constant(texts))["embedding"].numpy()
    np.testing.assert_allclose(unit_rows(served), 1.0, rtol=1e-5)
    embed = signatures["embed"](text=tf.constant(texts))["embedding"].numpy()  # the run's pooling, unscaled
    np.testing.assert_allclose(served, embed / unit_rows(embed)[:, None], rtol=1e-5, atol=1e-6)
    server = Server(model_name="sim", model_base_path=str(version.parent))
    try:
        code, body, _ = server.request("/v1/models/sim:predict", {"signature_name": "sim",
                                                                 "instances": [{"text": t} for t in texts]})
    finally:
        server.close()
    assert code == 200, body
    np.testing.assert_allclose(body["predictions"], served, rtol=1e-5, atol=1e-6)




def test_batch_predict_build_index_and_search_find_the_signature_by_name(embedding_run, tmp_path, capsys):
    _, version, _ = embedding_run
    texts = [sentence(i) for i in range(48)]  # ScaNN trains 16 clusters a block
    (tmp_path / "corpus.txt").write_text("\n".join(texts) + "\n")
    prefix = str(tmp_path / "vectors" / "sim")
    run_main(["pipelines.batch_predict", "--model_dir", str(version), "--signature", "sim", "--input",
              str(tmp_path / "corpus.txt"), "--output", prefix], capsys, check=True)
    rows = [json.loads(line) for path in (tmp_path / "vectors").glob("sim-*-of-*.jsonl") for line in open(path)]
    np.testing.assert_allclose(unit_rows([row["outputs"]["embedding"] for row in rows]), 1.0, rtol=1e-5)
    run_main(["pipelines.build_index", "--embeddings", prefix, "--output", str(tmp_path / "index")], capsys, check=True)
    for source in (["--index", str(tmp_path / "index")], ["--corpus", str(tmp_path / "corpus.txt"), "--cache_dir", ""]):
        found = json.loads(run_main(["pipelines.search", *source, "--model_dir", str(version), "--signature", "sim",
                                     "--query", texts[3], "--top_k", "2"], capsys, check=True).stdout)
        assert found[0]["results"][0]["text"] == texts[3] and found[0]["results"][0]["cosine"] > 0.9999
    wrong = run_main(["pipelines.search", "--corpus", str(tmp_path / "corpus.txt"), "--model_dir", str(version),
                      "--signature", "similarity", "--query", "x"], capsys)
    assert wrong.returncode == 2 and "no signature 'similarity' with an `embedding` output" in wrong.stderr


@pytest.mark.parametrize("where, content, message", [
    ("sim-train.csv", "first,second,score\nthe cat,a cat,4\nthe dog,a dog,high\n",
     "sim-train.csv:3: column 'score': label 'high' is not a number"),
    ("pairs-train.jsonl", '{"question": "a cat"}\n', "pairs-train.jsonl:1: no key 'answer' for task 'pairs'"),
])
def test_a_bad_file_is_one_error_line_naming_file_and_line(embedding_run, tmp_path, capsys, tiny_checkpoint,
                                                           where, content, message):
    run, _, data = embedding_run
    for path in data.iterdir():
        (tmp_path / path.name).write_text(path.read_text())
    (tmp_path / where).write_text(content)
    result = run_main(["pipelines.finetune", "--config", str(run.parent / "config.json"), "--data_dir", str(tmp_path),
                       "--init_checkpoint", tiny_checkpoint, "--output_dir", str(tmp_path / "out")], capsys)
    errors = [line for line in result.stderr.splitlines() if line.startswith("error:")]
    assert result.returncode == 2 and len(errors) == 1 and message in errors[0], result.stderr


PEER_PYTHON = os.environ.get("KERASBERT_PEER_PYTHON", os.path.join(ROOT, ".venv-peer", "bin", "python"))
# SentenceTransformer(folder).encode(texts), in the peer environment (torch, sentence-transformers).
ENCODE = """
import json, sys
from sentence_transformers import SentenceTransformer
print(json.dumps(SentenceTransformer(sys.argv[1], device="cpu").encode(json.loads(sys.argv[2])).tolist()))
"""


def test_format_transformers_writes_a_sentence_transformers_folder_that_embeds_as_served(embedding_run, tmp_path,
                                                                                          capsys):
    run, version, _ = embedding_run
    run_main(["pipelines.export", "--model_dir", str(run), "--export_base", str(tmp_path / "hf"), "--format",
              "transformers"], capsys, check=True)
    folder = tmp_path / "hf" / "sim"
    modules = json.loads((folder / "modules.json").read_text())
    assert [module["path"] for module in modules] == ["", "1_Pooling", "2_Normalize"]
    assert json.loads((folder / "1_Pooling" / "config.json").read_text())["pooling_mode_mean_tokens"]
    assert json.loads((folder / "sentence_bert_config.json").read_text())["max_seq_length"] == 16
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["BertModel"]
    if not os.path.exists(PEER_PYTHON) or subprocess.run([PEER_PYTHON, "-c", "import sentence_transformers"],
                                                         capture_output=True).returncode:
        pytest.skip(f"{PEER_PYTHON} has no sentence_transformers (make bench-embedding installs it)")
    # Longer than the packed length (16: both sides cut there), accents, punctuation.
    texts = [sentence(1), "Crash after my card screen, again!", "an unusually long sentence " * 8, "Héllo wörld"]
    peer = subprocess.run([PEER_PYTHON, "-c", ENCODE, str(folder), json.dumps(texts)], capture_output=True,
                          text=True, timeout=600)
    assert peer.returncode == 0, peer.stderr[-3000:]
    served = tf.saved_model.load(str(version)).signatures["sim"](text=tf.constant(texts))["embedding"].numpy()
    np.testing.assert_allclose(json.loads(peer.stdout.splitlines()[-1]), served, atol=1e-4)
