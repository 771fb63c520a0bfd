"""Hostile transformers checkpoints (issue 87): each is refused by `load_transformers` with one
DataError line naming its file and the key, tensor or token, before keras-hub's BertBackbone is
built (the fixture `nothing_built` makes building fail the test: a refusal after building would
have allocated what config.json asks for, e.g. 6 GB for vocab_size 120000000). Tiny checkpoints
written with NumPy, no TensorFlow model built except in the two that must import."""

import json
import os
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from conftest import TINY_VOCAB
from kerasbert.errors import DataError
from tests.hf_checkpoints import write_checkpoint

WORDS = len(TINY_VOCAB)


@pytest.fixture(scope="module")
def originals(tmp_path_factory):
    root = tmp_path_factory.mktemp("hostile-hf")
    write_checkpoint(str(root / "classifier"), "BertForSequenceClassification", ["negative", "neutral", "positive"])
    write_checkpoint(str(root / "sharded"), "BertForQuestionAnswering", shards=3, pooler=False)
    return root


@pytest.fixture
def nothing_built(monkeypatch):
    import keras_hub

    def refuse(*args, **kwargs):
        raise AssertionError("a BertBackbone was built from a checkpoint the importer should have refused")

    monkeypatch.setattr(keras_hub.models, "BertBackbone", refuse)


def edit_config(folder, **changes):
    """config.json with `changes` (None removes the key)."""
    with open(f"{folder}/config.json") as f:
        config = json.load(f)
    config.update(changes)
    with open(f"{folder}/config.json", "w") as f:
        json.dump({key: value for key, value in config.items() if value is not None}, f)


def write_text(path, text):
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)


def edit_weights(folder, change, file="model.safetensors"):
    """Rewrites `file` with `change(weights)` applied (weights under their stored names)."""
    weights = load_file(f"{folder}/{file}")
    change(weights)
    save_file(weights, f"{folder}/{file}")


def set_value(name, value, dtype=np.float32):
    def change(weights):
        weights[name] = weights[name].astype(dtype)
        weights[name].flat[5] = value
    return change


def tokenizer_json(folder, vocab):
    """A BertTokenizerFast folder: tokenizer.json's WordPiece `vocab` instead of vocab.txt."""
    os.remove(f"{folder}/vocab.txt")
    write_text(f"{folder}/tokenizer.json", json.dumps({"model": {"type": "WordPiece", "vocab": vocab}}))


def with_token(index, token):
    return {**{t: i for i, t in enumerate(TINY_VOCAB) if i != index}, token: index}


def header_claiming(folder, name, shape):
    """model.safetensors whose header gives tensor `name` `shape`, its bytes left as they are."""
    with open(f"{folder}/model.safetensors", "rb") as f:
        size = int.from_bytes(f.read(8), "little")
        header, data = json.loads(f.read(size)), f.read()
    header[name]["shape"] = shape
    encoded = json.dumps(header).encode()
    with open(f"{folder}/model.safetensors", "wb") as f:
        f.write(len(encoded).to_bytes(8, "little") + encoded + data)


def edit_index(folder, change):
    path = f"{folder}/model.safetensors.index.json"
    with open(path) as f:
        index = json.load(f)
    change(index["weight_map"])
    write_text(path, json.dumps(index))


def first_shard_tensor(folder):
    with open(f"{folder}/model.safetensors.index.json") as f:
        return next(name for name, file in json.load(f)["weight_map"].items() if file.startswith("model-00001"))


def shard_outside(folder, name):
    """../../x.safetensors holding the first shard's tensors, named for `name` in the index."""
    shutil.copy(f"{folder}/model-00001-of-00003.safetensors", os.path.join(folder, "..", "..", "x.safetensors"))
    edit_index(folder, lambda weight_map: weight_map.update({name: "../../x.safetensors"}))


# name: (the checkpoint it changes, change(folder), the error's pattern)
HOSTILE = {
    # config.json's sizes: what the files hold, positive integers
    "vocab_size 120000000": ("classifier", lambda f: edit_config(f, vocab_size=120000000),
                             rf"config.json: vocab_size is 120000000, but weight embeddings.word_embeddings.weight "
                             rf"has shape \({WORDS}, 16\) in model.safetensors"),
    "100000 layers": ("classifier", lambda f: edit_config(f, num_hidden_layers=100000),
                      r"config.json: num_hidden_layers is 100000, but the weights hold 2 layers \(encoder.layer.0-1\)"),
    "-1 layers": ("classifier", lambda f: edit_config(f, num_hidden_layers=-1),
                  r"config.json: num_hidden_layers is -1, not a positive integer"),
    "1 layer of 2": ("classifier", lambda f: edit_config(f, num_hidden_layers=1),
                     r"config.json: num_hidden_layers is 1, but the weights hold 2 layers"),
    "true layers": ("classifier", lambda f: edit_config(f, num_hidden_layers=True),
                    r"config.json: num_hidden_layers is True, not a positive integer"),
    "intermediate 1e9": ("classifier", lambda f: edit_config(f, intermediate_size=1000000000),
                         r"intermediate_size is 1000000000, but weight encoder.layer.0.intermediate.dense.weight has "
                         r"shape \(32, 16\)"),
    "positions 1e9": ("classifier", lambda f: edit_config(f, max_position_embeddings=1000000000),
                      r"max_position_embeddings is 1000000000, but weight embeddings.position_embeddings.weight has "
                      r"shape \(128, 16\)"),
    "positions 1e9 as a float": ("classifier", lambda f: edit_config(f, max_position_embeddings=1e9),
                                 r"max_position_embeddings is 1000000000.0, not a positive integer"),
    "0 heads": ("classifier", lambda f: edit_config(f, num_attention_heads=0),
                r"config.json: num_attention_heads is 0, not a positive integer"),
    "heads not dividing hidden": ("classifier", lambda f: edit_config(f, num_attention_heads=3),
                                  r"config.json: hidden_size 16 is not a multiple of num_attention_heads 3"),
    "no hidden_size": ("classifier", lambda f: edit_config(f, hidden_size=None), r"config.json: no hidden_size"),
    "dropout 5": ("classifier", lambda f: edit_config(f, hidden_dropout_prob=5),
                  r"config.json: hidden_dropout_prob is 5, not a rate in \[0, 1\)"),
    # labels
    "id2label key not an integer": ("classifier", lambda f: edit_config(f, id2label={"zero": "a", "1": "b", "2": "c"}),
                                    r"config.json: id2label key 'zero' is not an integer id"),
    "id2label keys with a gap": ("classifier", lambda f: edit_config(f, id2label={"0": "a", "1": "b", "5": "c"}),
                                 r"config.json: id2label's keys are not the ids 0-2, each once \('5' is not\)"),
    "id2label a list": ("classifier", lambda f: edit_config(f, id2label=["a", "b", "c"]),
                        r"config.json: id2label is an array, not an object of id: label"),
    "num_labels 1e9 beside id2label": ("classifier", lambda f: edit_config(f, num_labels=1000000000),
                                       r"config.json: num_labels is 1000000000, but id2label has 3 labels"),
    "num_labels 1e9 alone": ("classifier", lambda f: edit_config(f, num_labels=1000000000, id2label=None,
                                                                 label2id=None),
                             r"classifier.weight has shape \(3, 16\) and classifier.bias \(3,\); the 1000000000 labels "
                             r"of id2label need \(1000000000, 16\)"),
    # config.json itself
    "config a list": ("classifier", lambda f: write_text(f"{f}/config.json", "[1, 2]"),
                      r"config.json: an array in JSON, not an object"),
    "config not JSON": ("classifier", lambda f: write_text(f"{f}/config.json", '{"vocab_size": '),
                        r"config.json: not valid JSON \(Expecting value: line 1 column 16"),
    "config nested 100000 deep": ("classifier", lambda f: write_text(f"{f}/config.json", "[" * 100000),
                                  r"config.json: not valid JSON \(nested too deeply\)"),
    "architectures an object": ("classifier", lambda f: edit_config(f, architectures={"a": 1}),
                                r"architecture \(none\); kerasbert imports BERT checkpoints"),
    # weights: finite floats
    "NaN weight": ("classifier", lambda f: edit_weights(f, set_value("bert.embeddings.word_embeddings.weight", np.nan)),
                   r"model.safetensors: weight embeddings.word_embeddings.weight holds NaN or infinite values"),
    "inf in a layer": ("classifier", lambda f: edit_weights(f, set_value("bert.encoder.layer.1.output.dense.weight",
                                                                         -np.inf)),
                       r"weight encoder.layer.1.output.dense.weight holds NaN or infinite values"),
    "float64 beyond float32": ("classifier", lambda f: edit_weights(f, set_value("classifier.weight", 1e300,
                                                                                 np.float64)),
                               r"weight classifier.weight holds NaN or infinite values \(as float32\)"),
    "int8 weights": ("classifier", lambda f: edit_weights(
                         f, set_value("bert.encoder.layer.0.attention.self.query.weight", 3, np.int8)),
                     r"model.safetensors: weight encoder.layer.0.attention.self.query.weight is I8; kerasbert reads "
                     r"float weights \(F16, BF16 and F64 converted to float32\), not quantized ones"),
    "a layer's tensor missing": ("classifier", lambda f: edit_weights(f, lambda w: w.pop(
                                     "bert.encoder.layer.1.output.dense.bias")),
                                 r"weight encoder.layer.1.output.dense.bias is missing from the checkpoint"),
    "header claiming more than the file holds": ("classifier", lambda f: (
        edit_config(f, vocab_size=120000000),
        header_claiming(f, "bert.embeddings.word_embeddings.weight", [120000000, 16])),
        r"model.safetensors: not a readable safetensors file \(.*invalid shape, data type, or offset"),
    "damaged safetensors": ("classifier", lambda f: os.truncate(f"{f}/model.safetensors", 1000),
                            r"model.safetensors: not a readable safetensors file"),
    # tokens that cannot be one line of the run's vocabulary file
    "newline in a token": ("classifier", lambda f: tokenizer_json(f, with_token(10, "ca\nt")),
                           r"tokenizer.json: token 'ca\\nt' \(id 10\) cannot be one line of the run's vocabulary"),
    "empty token": ("classifier", lambda f: write_text(f"{f}/vocab.txt", "\n".join(TINY_VOCAB[:10] + [""]
                                                                                      + TINY_VOCAB[11:]) + "\n"),
                    r"vocab.txt: token '' \(id 10\) cannot be one line"),
    "trailing space in a token": ("classifier", lambda f: tokenizer_json(f, with_token(10, "cat ")),
                                  r"tokenizer.json: token 'cat ' \(id 10\) cannot be one line"),
    "a token twice": ("classifier", lambda f: write_text(f"{f}/vocab.txt", "\n".join(
                          TINY_VOCAB[:7] + [TINY_VOCAB[6]] + TINY_VOCAB[8:]) + "\n"),
                      rf"vocab.txt: token {TINY_VOCAB[6]!r} is both id 6 and id 7; a WordPiece vocabulary holds each "
                      r"token once"),
    "tokenizer.json ids with a gap": ("classifier", lambda f: tokenizer_json(f, {**with_token(10, "x"), "x": 99}),
                                      rf"tokenizer.json: model.vocab's ids are not 0-{WORDS - 1}, each once "
                                      r"\(10 is missing\)"),
    "more tokens than embeddings": ("classifier", lambda f: write_text(f"{f}/vocab.txt",
                                                                       "\n".join(TINY_VOCAB + ["extra"]) + "\n"),
                                    rf"vocab.txt: {WORDS + 1} tokens, more than config.json's vocab_size {WORDS}"),
    # shards: files inside the folder, holding what the index says
    "shard /etc/passwd": ("sharded", lambda f: edit_index(f, lambda m: m.update(
                              {first_shard_tensor(f): "/etc/passwd"})),
                          r"model.safetensors.index.json: shard '/etc/passwd' is not a file inside the checkpoint "
                          r"folder"),
    "shard ../../x.safetensors": ("sharded", lambda f: shard_outside(f, first_shard_tensor(f)),
                                  r"model.safetensors.index.json: shard '../../x.safetensors' is not a file inside"),
    "index a list": ("sharded", lambda f: write_text(f"{f}/model.safetensors.index.json", "[]"),
                     r"model.safetensors.index.json: an array in JSON, not an object"),
    "weight_map a list": ("sharded", lambda f: write_text(f"{f}/model.safetensors.index.json",
                                                          '{"weight_map": ["model-00001-of-00003.safetensors"]}'),
                          r"model.safetensors.index.json: weight_map is an array, not an object of tensor: file"),
    "index naming the wrong shard": ("sharded", lambda f: edit_index(f, lambda m: m.update(
                                         {first_shard_tensor(f): "model-00002-of-00003.safetensors"})),
                                     r"model.safetensors.index.json: weight_map puts .* in "
                                     r"model-00002-of-00003.safetensors, which does not hold it"),
    "a tensor in two shards": ("sharded", lambda f: edit_weights(f, lambda w: w.update(
                                   {first_shard_tensor(f): np.zeros(2, np.float32)}),
                                   file="model-00002-of-00003.safetensors"),
                               r"model-00002-of-00003.safetensors: tensor .* is also in "
                               r"model-00001-of-00003.safetensors"),
}


@pytest.mark.parametrize("case", HOSTILE)
def test_hostile_checkpoint_is_one_error_line_and_nothing_built(case, originals, tmp_path, nothing_built):
    from kerasbert.hf.importing import load_transformers

    original, change, message = HOSTILE[case]
    folder = str(tmp_path / "a" / "bad")
    shutil.copytree(originals / original, folder)
    change(folder)
    with pytest.raises(DataError, match=message) as raised:
        load_transformers(folder)
    assert str(raised.value).startswith(folder) and "\n" not in str(raised.value)


def test_sequence_length_beyond_the_positions_is_refused(originals, nothing_built):
    """Packed longer than max_position_embeddings (128), every long input would fail at predict time."""
    from kerasbert.hf.importing import load_transformers

    folder = str(originals / "classifier")
    with pytest.raises(DataError, match=r"classifier: sequence_length 300 is more than the checkpoint's "
                                        r"max_position_embeddings 128"):
        load_transformers(folder, sequence_length=300)


def test_half_precision_weights_are_read_as_float32_and_unread_tensors_left(originals, tmp_path, nothing_built):
    """F16 and BF16 widen to float32 exactly; an old transformers' int64 buffer the importer does
    not read (embeddings.position_ids) is neither refused nor loaded."""
    import ml_dtypes

    from kerasbert.hf.checkpoint import read_checkpoint

    folder = str(tmp_path / "half")
    shutil.copytree(originals / "classifier", folder)
    stored = load_file(f"{folder}/model.safetensors")
    half = {name: value.astype(np.float16 if "encoder" in name else ml_dtypes.bfloat16)
            for name, value in stored.items()}
    half["bert.embeddings.position_ids"] = np.arange(128, dtype=np.int64)[None]
    save_file(half, f"{folder}/model.safetensors")
    weights = read_checkpoint(folder).weights
    assert "embeddings.position_ids" not in weights and len(weights) == len(stored)
    for name, value in half.items():
        if name != "bert.embeddings.position_ids":
            plain = name.removeprefix("bert.")
            assert weights[plain].dtype == np.float32
            np.testing.assert_array_equal(weights[plain], value.astype(np.float32))


def test_cli_says_one_error_line_with_exit_code_2(originals, tmp_path, capsys, nothing_built):
    from conftest import run_main

    folder = str(tmp_path / "huge")
    shutil.copytree(originals / "classifier", folder)
    edit_config(folder, vocab_size=120000000)
    result = run_main(["pipelines.import_transformers", "--checkpoint", folder, "--output_dir",
                       str(tmp_path / "run")], capsys)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        f"error: {folder}/config.json: vocab_size is 120000000, but weight embeddings.word_embeddings.weight has "
        f"shape ({WORDS}, 16) in model.safetensors"]
    assert not os.path.exists(tmp_path / "run")

