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

from conftest import run_main, run_module

BEAM_WORKERS = ["--direct_num_workers", "2", "--direct_running_mode", "multi_processing"]
WORDS = ["the", "cat", "dog", "sat", "ran", "on", "mat", "fast", "cats", "dogs"]


@pytest.fixture
def export(tiny_export):
    return tiny_export[1]


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


def test_results_match_the_saved_model_and_refused_rows_are_counted(export, tmp_path, capsys):
    write_inputs(tmp_path / "in")
    prefix = str(tmp_path / "out" / "embed")
    args = ["pipelines.batch_predict", "--model_dir", export, "--signature", "embed", "--input",
            str(tmp_path / "in" / "*"), "--output", prefix, "--max_batch_size", "16", *BEAM_WORKERS]
    result = run_module(args)
    assert result.stdout.strip().splitlines()[-1].startswith("== rows read 344, scored 340, refused 4, empty 0")
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
    assert json.load(open(prefix + ".counts.json")) == {"read": 344, "scored": 340, "refused": 4, "empty": 0}

    # The embeddings indexed and searched: a sentence finds itself first, as exact search does.
    # (In this process: the fresh processes of the run above and of test_pipeline_help are enough.)
    out = run_main(["pipelines.build_index", "--embeddings", prefix, "--output", str(tmp_path / "index")], capsys,
                   check=True).stdout
    assert "== indexed 340 vectors of 8 dimensions with scann" in out
    query = sentences(150, 1)[2]
    found = json.loads(run_main(["pipelines.search", "--index", str(tmp_path / "index"), "--model_dir", export,
                                 "--query", query, "--top_k", "3"], capsys, check=True).stdout)
    assert found[0]["query"] == query and [hit["rank"] for hit in found[0]["results"]] == [1, 2, 3]
    best = found[0]["results"][0]
    assert best["cosine"] > 0.9999 and texts.count(best["text"]) and \
        np.allclose(expected[texts.index(best["text"])], expected[texts.index(query)], atol=1e-5)

    again = run_main(args, capsys)
    assert again.returncode == 2 and "results of an earlier run are there" in again.stderr
    assert "--overwrite" in again.stderr


def test_pair_signature_as_tfrecord_output(export, tmp_path, capsys):
    """A pair signature reads `text_a<TAB>text_b` lines; --output_format tfrecord writes tf.Examples."""
    pairs = list(zip(sentences(20, 5), sentences(20, 6)))
    (tmp_path / "pairs.txt").write_text("".join(f"{a}\t{b}\n" for a, b in pairs) + "only one field\n")
    prefix = str(tmp_path / "out" / "similarity")
    run_main(["pipelines.batch_predict", "--model_dir", export, "--signature", "similarity", "--input",
              str(tmp_path / "pairs.txt"), "--output", prefix, "--output_format", "tfrecord"], capsys, check=True)
    examples = [tf.train.Example.FromString(record) for path in glob.glob(prefix + "-*-of-*.tfrecord")
                for record in tf.data.TFRecordDataset(path).as_numpy_iterator()]
    scores = {e.features.feature["id"].bytes_list.value[0].decode(): e.features.feature["score"].float_list.value[0]
              for e in examples}
    loaded = tf.saved_model.load(export).signatures["similarity"]
    expected = loaded(text_a=tf.constant([a for a, _ in pairs]), text_b=tf.constant([b for _, b in pairs]))["score"]
    got = [scores[f"{tmp_path / 'pairs.txt'}:{line}"] for line in range(1, 21)]
    np.testing.assert_allclose(got, expected.numpy(), atol=1e-5)
    assert "1 tab-separated fields; the signature takes 2" in open(prefix + ".dead-letter.jsonl").read()


def test_a_token_or_example_signature_is_refused_before_any_work(export, tmp_path, capsys):
    (tmp_path / "x").write_text("the cat sat\n")
    for signature, message in (("embed_tokens", "takes token ids"), ("sentiment_classify", "serialized tf.Examples"),
                               ("nope", "has no signature 'nope'")):
        result = run_main(["pipelines.batch_predict", "--model_dir", export, "--signature", signature,
                           "--input", str(tmp_path / "x"), "--output", str(tmp_path / "o")], capsys)
        assert result.returncode == 2 and message in result.stderr, result.stderr[-1500:]


# --- What the tool reads and removes (issue 53) ------------------------------------------------


def test_lines_are_counted_whatever_their_ending_and_overwrite_removes_only_its_own_files(export, tmp_path, capsys):
    """Was: 100,000 empty lines read 0 and counted nowhere; a UTF-16 file scored as
    NUL-interleaved text; `\r`-only endings read as one line; and with --overwrite the
    prefix was a glob, so `out/*` deleted another run's results and left beam-temp folders.
    Now: empty lines are read and counted `empty`; NULs go to the dead letters; `\r` ends a
    line; `out/*` is refused; --overwrite removes this prefix's files and temp folders only."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "cr.txt").write_bytes(b"the cat sat\rthe dog ran\r\r  \rcats on the mat\r")
    (tmp_path / "in" / "blank.txt").write_bytes(b"\n" * 500 + b"the mat\n")
    (tmp_path / "in" / "utf16.txt").write_bytes("the cat sat\nthe dog ran\n".encode("utf-16"))
    out = tmp_path / "out"
    out.mkdir()
    others = ["other-00000-of-00001.jsonl", "other.counts.json", "other.dead-letter.jsonl",
              "embed-2-00000-of-00001.jsonl", "embed.counts.json.bak"]
    for name in others:
        (out / name).write_text("another run's\n")
    (out / f"beam-temp-other-{'a' * 32}").mkdir()
    (out / f"beam-temp-embed-{'b' * 32}").mkdir()  # this prefix's, left by a crashed run
    (out / "embed-00000-of-00003.jsonl").write_text("an earlier run of this prefix\n")
    args = ["pipelines.batch_predict", "--model_dir", export, "--signature", "embed",
            "--input", str(tmp_path / "in" / "*"), "--overwrite"]

    refused = run_main([*args, "--output", str(out / "*")], capsys)
    assert refused.returncode == 2 and "--output is a prefix, not a glob" in refused.stderr
    assert sorted(os.listdir(out)) == sorted(others + [f"beam-temp-other-{'a' * 32}", f"beam-temp-embed-{'b' * 32}",
                                                       "embed-00000-of-00003.jsonl"])

    run_main([*args, "--output", str(out / "embed")], capsys, check=True)
    assert json.load(open(out / "embed.counts.json")) == {"read": 509, "scored": 4, "refused": 3, "empty": 502}
    rows = [json.loads(line) for path in glob_paths(out / "embed-[0-9][0-9][0-9][0-9][0-9]-of-*.jsonl") for line in open(path)]
    assert sorted(row["inputs"]["text"] for row in rows) == ["cats on the mat", "the cat sat", "the dog ran", "the mat"]
    dead = sorted(row["id"].rsplit("/", 1)[-1] for row in map(json.loads, open(out / "embed.dead-letter.jsonl")))
    assert dead == ["utf16.txt:1", "utf16.txt:2", "utf16.txt:3"]  # the BOM's line, then NULs
    left = set(os.listdir(out))
    assert set(others) | {f"beam-temp-other-{'a' * 32}"} <= left
    assert f"beam-temp-embed-{'b' * 32}" not in left and "embed-00000-of-00003.jsonl" not in left
    assert all((out / name).read_text() == "another run's\n" for name in others)


def glob_paths(pattern):
    return sorted(glob.glob(str(pattern)))


PATH_CASES = ["a folder as input", "an output under a file", "an output under /proc", "a FIFO as input",
              "a link to /dev/zero as input", "an output inside the input folder"]


@pytest.mark.parametrize("case", PATH_CASES)
def test_a_path_that_cannot_be_used_is_one_line_exit_2(export, tmp_path, capsys, case):
    """Was: a Python traceback, exit 1. Issue 70: a FIFO waited for ever, a link to /dev/zero was
    read past 12 GiB, and a second run with --output inside its input folder scored the first
    run's results; each is refused before any work."""
    (tmp_path / "in").mkdir()
    (tmp_path / "in" / "a.txt").write_text("the cat sat\n")
    (tmp_path / "file").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    os.symlink("/dev/zero", tmp_path / "zero.txt")
    source, prefix = {"a folder as input": (tmp_path / "in", tmp_path / "out" / "embed"),
                      "an output under a file": (tmp_path / "in" / "a.txt", tmp_path / "file" / "embed"),
                      "an output under /proc": (tmp_path / "in" / "a.txt", "/proc/embed/out"),
                      "a FIFO as input": (tmp_path / "fifo", tmp_path / "out" / "embed"),
                      "a link to /dev/zero as input": (tmp_path / "zero.txt", tmp_path / "out" / "embed"),
                      "an output inside the input folder": (tmp_path / "in" / "*", tmp_path / "in" / "embed")}[case]
    result = run_main(["pipelines.batch_predict", "--model_dir", export, "--signature", "embed",
                       "--input", str(source), "--output", str(prefix)], capsys)
    lines = result.stderr.strip().splitlines()
    assert result.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    assert {"a FIFO as input": "is a FIFO, not a regular file", "a link to /dev/zero as input": "is a character device",
            "an output inside the input folder": "--output is inside the input folder"}.get(case, "") in lines[0]
