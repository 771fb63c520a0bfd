"""pipelines.batch_predict on Beam's direct runner in multi-process mode (2 workers): its
results equal the SavedModel's own outputs, every input id comes out once, damaged rows go
to the dead-letter output and are counted, and a second run into the same output is refused."""

import glob
import json
import os
import random

import numpy as np
import pytest
import tensorflow as tf

from conftest import run_module
from helpers import tiny_model_dir

BEAM_WORKERS = ["--direct_num_workers", "2", "--direct_running_mode", "multi_processing"]
WORDS = ["the", "cat", "dog", "sat", "ran", "on", "mat", "fast", "cats", "dogs"]


@pytest.fixture(scope="module")
def export(tmp_path_factory):
    from kerasbert.export import export_saved_model

    folder = tmp_path_factory.mktemp("batch")
    tiny_model_dir(str(folder / "run"), "cross")
    return export_saved_model(str(folder / "run"), str(folder / "exports"))


def sentences(count, seed):
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 12))) for _ in range(count)]


def write_inputs(folder):
    """Two text files, a CS224N task TSV and a TFRecord file, with a few damaged rows."""
    os.makedirs(folder)
    texts = {"a.txt": sentences(150, 1), "b.txt": sentences(120, 2)}
    for name, lines in texts.items():
        (folder / name).write_text("\n".join(lines) + "\n", encoding="utf-8")
    with open(folder / "b.txt", "ab") as f:
        f.write(b"the cat \xff\xfe sat\n" + b"x" * ((1 << 20) + 1) + b"\n")  # bad UTF-8; a 1 MiB line
    tsv = ["\tid\tsentence\tsentiment"] + [f"{i}\tid{i}\t{s}\t{i % 5}" for i, s in enumerate(sentences(40, 3))]
    tsv.append('40\tid40\t"never closed\t1')  # a quote left open: a damaged row
    (folder / "sst.tsv").write_text("\n".join(tsv) + "\n", encoding="utf-8")
    with tf.io.TFRecordWriter(str(folder / "c.tfrecord")) as writer:
        for text in sentences(30, 4):
            feature = {"text": tf.train.Feature(bytes_list=tf.train.BytesList(value=[text.encode()]))}
            writer.write(tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString())
        writer.write(tf.train.Example().SerializeToString())  # no `text` feature
    return texts


def test_results_match_the_saved_model_and_refused_rows_are_counted(export, tmp_path):
    write_inputs(tmp_path / "in")
    prefix = str(tmp_path / "out" / "embed")
    args = ["pipelines.batch_predict", "--model_dir", export, "--signature", "embed", "--input",
            str(tmp_path / "in" / "*"), "--output", prefix, "--max_batch_size", "16", *BEAM_WORKERS]
    result = run_module(args)
    assert result.stdout.strip().splitlines()[-1].startswith("== rows read 344, scored 340, refused 4")
    assert "apache_beam" not in result.stderr and "Logging handler" not in result.stderr, result.stderr[-2000:]

    rows = [json.loads(line) for path in sorted(glob.glob(prefix + "-*-of-*.jsonl")) for line in open(path)]
    ids = [row["id"] for row in rows]
    assert len(ids) == len(set(ids)) == 340  # every scored row exactly once
    assert {row_id.rsplit(":", 1)[0] for row_id in ids} == {str(tmp_path / "in" / n)
                                                             for n in ("a.txt", "b.txt", "sst.tsv", "c.tfrecord")}
    loaded = tf.saved_model.load(export).signatures["embed"]
    texts = [row["inputs"]["text"] for row in rows]
    expected = loaded(text=tf.constant(texts))["embedding"].numpy()
    np.testing.assert_allclose(np.array([row["outputs"]["embedding"] for row in rows]), expected, atol=1e-5)
    assert next(r for r in rows if r["id"].endswith("a.txt:3"))["inputs"]["text"] == sentences(150, 1)[2]

    dead = {row["id"].rsplit("/", 1)[-1]: row["reason"] for row in map(json.loads, open(prefix + ".dead-letter.jsonl"))}
    assert dead.keys() == {"b.txt:121", "b.txt:122", "sst.tsv:42", "c.tfrecord:31"}
    assert dead["b.txt:121"].startswith("not valid UTF-8") and "characters (the limit is" in dead["b.txt:122"]
    assert "quote" in dead["sst.tsv:42"] and dead["c.tfrecord:31"] == "no single bytes feature 'text'"
    assert json.load(open(prefix + ".counts.json")) == {"read": 344, "scored": 340, "refused": 4}

    # The embeddings indexed and searched: a sentence finds itself first, as exact search does.
    out = run_module(["pipelines.build_index", "--embeddings", prefix, "--output", str(tmp_path / "index")]).stdout
    assert "== indexed 340 vectors of 8 dimensions with scann" in out
    query = sentences(150, 1)[2]
    found = json.loads(run_module(["pipelines.search", "--index", str(tmp_path / "index"), "--model_dir", export,
                                   "--query", query, "--top_k", "3"]).stdout)
    assert found[0]["query"] == query and [hit["rank"] for hit in found[0]["results"]] == [1, 2, 3]
    best = found[0]["results"][0]
    assert best["cosine"] > 0.9999 and texts.count(best["text"]) and \
        np.allclose(expected[texts.index(best["text"])], expected[texts.index(query)], atol=1e-5)

    again = run_module(args, check=False)
    assert again.returncode == 2 and "results of an earlier run are there" in again.stderr
    assert "--overwrite" in again.stderr


def test_pair_signature_as_tfrecord_output(export, tmp_path):
    """A pair signature reads `text_a<TAB>text_b` lines; --output_format tfrecord writes tf.Examples."""
    pairs = list(zip(sentences(20, 5), sentences(20, 6)))
    (tmp_path / "pairs.txt").write_text("".join(f"{a}\t{b}\n" for a, b in pairs) + "only one field\n")
    prefix = str(tmp_path / "out" / "similarity")
    run_module(["pipelines.batch_predict", "--model_dir", export, "--signature", "similarity", "--input",
                str(tmp_path / "pairs.txt"), "--output", prefix, "--output_format", "tfrecord"])
    examples = [tf.train.Example.FromString(record) for path in glob.glob(prefix + "-*-of-*.tfrecord")
                for record in tf.data.TFRecordDataset(path).as_numpy_iterator()]
    scores = {e.features.feature["id"].bytes_list.value[0].decode(): e.features.feature["score"].float_list.value[0]
              for e in examples}
    loaded = tf.saved_model.load(export).signatures["similarity"]
    expected = loaded(text_a=tf.constant([a for a, _ in pairs]), text_b=tf.constant([b for _, b in pairs]))["score"]
    got = [scores[f"{tmp_path / 'pairs.txt'}:{line}"] for line in range(1, 21)]
    np.testing.assert_allclose(got, expected.numpy(), atol=1e-5)
    assert "1 tab-separated fields; the signature takes 2" in open(prefix + ".dead-letter.jsonl").read()


def test_a_token_or_example_signature_is_refused_before_any_work(export, tmp_path):
    for signature, message in (("embed_tokens", "takes token ids"), ("sentiment_classify", "serialized tf.Examples"),
                               ("nope", "has no signature 'nope'")):
        result = run_module(["pipelines.batch_predict", "--model_dir", export, "--signature", signature,
                             "--input", "x", "--output", str(tmp_path / "o")], check=False)
        assert result.returncode == 2 and message in result.stderr, result.stderr[-1500:]
