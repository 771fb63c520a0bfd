"""pipelines.make_pretraining_data on Beam: with the same seed, two worker processes write
exactly the examples, document by document, that one process computes (`make_examples`)."""

import collections
import glob
import os

import tensorflow as tf

from conftest import TINY_VOCAB, run_main, run_module, write_corpus
from helpers import tiny_run_config


def shard_examples(folder):
    spec = {"segment_a": tf.io.RaggedFeature(tf.int64), "segment_b": tf.io.RaggedFeature(tf.int64),
            "nsp_label": tf.io.FixedLenFeature([], tf.int64), "nsp_weight": tf.io.FixedLenFeature([], tf.float32),
            "document": tf.io.FixedLenFeature([], tf.string)}
    by_document = collections.defaultdict(list)
    for path in sorted(glob.glob(os.path.join(folder, "*.tfrecord"))):
        for record in tf.data.TFRecordDataset(path).as_numpy_iterator():
            e = tf.io.parse_single_example(record, spec)
            by_document[e["document"].numpy().decode()].append(
                (tuple(e["segment_a"].numpy()), tuple(e["segment_b"].numpy()), int(e["nsp_label"]),
                 float(e["nsp_weight"])))
    return {key: sorted(values) for key, values in by_document.items()}


def test_two_workers_write_the_examples_one_process_cuts(tmp_path, capsys):
    from kerasbert.config import PretrainConfig, load_config
    from kerasbert.data.corpus import load_corpus
    from kerasbert.pretraining.document_pairs import make_examples
    from kerasbert.pretraining.inputs import tokenize_documents
    from kerasbert.tokenization import make_tokenizer

    corpora = [write_corpus(str(tmp_path / "a.txt"), num_documents=30, seed=1),
               write_corpus(str(tmp_path / "b.txt"), num_documents=25, seed=2)]
    with open(corpora[1], "a") as f:
        f.write("A lone sentence.\n\nAnother lone one.\n\n")  # single-sentence documents: MLM-only examples
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(TINY_VOCAB) + "\n")
    config_path = tiny_run_config(tmp_path)
    overrides = [f"data.sources={','.join(corpora)}", "data.dupe_factor=2", "train.seed=7"]
    args = ["pipelines.make_pretraining_data", "--config", config_path, "--vocab_file", str(vocab),
            "--output_dir", str(tmp_path / "shards"), "--num_shards", "3", "--direct_num_workers", "2",
            "--direct_running_mode", "multi_processing", *[x for o in overrides for x in ("--set", o)]]
    out = run_module(args).stdout
    written = shard_examples(str(tmp_path / "shards"))
    assert len(glob.glob(str(tmp_path / "shards" / "examples-*-of-00003.tfrecord"))) == 3

    config = load_config(PretrainConfig, config_path, overrides)
    tokenizer = make_tokenizer(str(vocab))
    documents, sources = {}, {}
    for place, path in enumerate(corpora):
        for index, document in enumerate(tokenize_documents(tokenizer, load_corpus(path, str(tmp_path)))):
            documents[(place, index)], sources[(place, index)] = document, path
    expected = collections.defaultdict(list)
    for e in make_examples(documents, sources, seed=7, max_sequence_length=config.model.max_sequence_length,
                           short_seq_prob=config.data.short_seq_prob, dupe_factor=2):
        expected[e["document"]].append((tuple(e["segment_a"]), tuple(e["segment_b"]), e["nsp_label"],
                                        float(e["nsp_weight"])))
    assert written == {key: sorted(values) for key, values in expected.items()}
    pairs = sum(1 for values in written.values() for v in values if v[3] == 1.0)
    assert 50 < pairs and f"== wrote {pairs:,} NSP pairs and " in out
    labels = [v[2] for values in written.values() for v in values if v[3] == 1.0]
    assert 0.35 < sum(labels) / len(labels) < 0.65  # true and random next segments, about half each

    refused = run_main(args, capsys)  # refused before any work: no fresh process needed
    assert refused.returncode == 2 and "pass --overwrite" in refused.stderr
