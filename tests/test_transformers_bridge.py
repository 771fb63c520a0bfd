"""transformers BERT checkpoints in and out (kerasbert/hf/), with no transformers installed:
tiny checkpoints written here in transformers' layout (known weights, safetensors), imported and
checked against a BERT forward in NumPy; kerasbert -> transformers folder -> kerasbert equal;
each bad checkpoint's one-line error."""

import json
import math
import os
import shutil

import numpy as np
import pytest
from safetensors.numpy import save_file

from conftest import TINY_VOCAB
from kerasbert.errors import DataError, KerasbertError
from tests.hf_checkpoints import HEADS, HIDDEN, INTERMEDIATE, LAYERS, POSITIONS, TAGS, write_checkpoint


# --- BERT in NumPy, as transformers computes it ------------------------------------------------

def gelu_exact(x):  # transformers' "gelu"
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def gelu_tanh(x):  # transformers' "gelu_new", keras-hub's gelu_approximate
    return 0.5 * x * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))


def layer_norm(x, w, prefix):
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + 1e-12) * w[f"{prefix}.weight"] + w[f"{prefix}.bias"]


def linear(x, w, prefix):
    return x @ w[f"{prefix}.weight"].T + w[f"{prefix}.bias"]


def bert_forward(w, ids, segments, mask, gelu):
    """(sequence states (batch, seq, hidden), pooled (batch, hidden)) of BertModel."""
    batch, seq = ids.shape
    x = (w["embeddings.word_embeddings.weight"][ids] + w["embeddings.position_embeddings.weight"][np.arange(seq)]
         + w["embeddings.token_type_embeddings.weight"][segments])  # (batch, seq, hidden)
    x = layer_norm(x, w, "embeddings.LayerNorm")
    size = HIDDEN // HEADS
    for i in range(LAYERS):
        p = f"encoder.layer.{i}."

        def heads(t):  # (batch, heads, seq, size)
            return t.reshape(batch, seq, HEADS, size).transpose(0, 2, 1, 3)

        q, k, v = (heads(linear(x, w, f"{p}attention.self.{n}")) for n in ("query", "key", "value"))
        scores = q @ k.transpose(0, 1, 3, 2) / math.sqrt(size) + (1.0 - mask[:, None, None, :]) * -1e9
        scores = np.exp(scores - scores.max(-1, keepdims=True))
        context = (scores / scores.sum(-1, keepdims=True)) @ v  # (batch, heads, seq, size)
        context = context.transpose(0, 2, 1, 3).reshape(batch, seq, HIDDEN)
        x = layer_norm(linear(context, w, f"{p}attention.output.dense") + x, w, f"{p}attention.output.LayerNorm")
        inner = gelu(linear(x, w, f"{p}intermediate.dense"))
        x = layer_norm(linear(inner, w, f"{p}output.dense") + x, w, f"{p}output.LayerNorm")
    pooled = np.tanh(linear(x[:, 0], w, "pooler.dense")) if "pooler.dense.weight" in w else None
    return x, pooled


def softmax(z):
    z = np.exp(z - z.max(-1, keepdims=True))
    return z / z.sum(-1, keepdims=True)


WORDS = {token: index for index, token in enumerate(TINY_VOCAB)}


def pieces(text):
    """WordPiece over the tiny vocabulary: a word, or its stem and ##s."""
    ids = []
    for word in text.lower().split():
        ids += [WORDS[word]] if word in WORDS else [WORDS[word[:-1]], WORDS["##s"]]
    return ids


def packed(texts_a, texts_b=None):
    """[CLS] a [SEP] (b [SEP]) of words of the tiny vocabulary, padded: ids, segments, mask."""
    rows = []
    for i, a in enumerate(texts_a):
        ids = [WORDS["[CLS]"]] + pieces(a) + [WORDS["[SEP]"]]
        segments = [0] * len(ids)
        if texts_b:
            b = pieces(texts_b[i]) + [WORDS["[SEP]"]]
            ids, segments = ids + b, segments + [1] * len(b)
        rows.append((ids, segments))
    width = max(len(ids) for ids, _ in rows)
    ids = np.array([r[0] + [0] * (width - len(r[0])) for r in rows], np.int32)
    segments = np.array([r[1] + [0] * (width - len(r[1])) for r in rows], np.int32)
    return ids, segments, (ids != 0).astype(np.int32)


def model_inputs(ids, segments, mask):
    return {"token_ids": ids, "segment_ids": segments, "padding_mask": mask}


TEXTS = ["The cat sat on the mat .", "dog ran fast", "the cats ran on the mat"]
TEXTS_B = ["the dogs sat .", "the cat ran fast", "mat"]


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    """Three heads: a classifier (`bert.` prefix, gamma/beta), a tagger (no prefix, no pooler), a
    reader (sharded); a pair regression and a classifier of the tanh GELU (hidden_act gelu_pytorch_tanh,
    gelu_new; the others: gelu, the exact one). {name: (folder, plain weights)}."""
    root = tmp_path_factory.mktemp("hf")
    made = {
        "classifier": write_checkpoint(str(root / "cls"), "BertForSequenceClassification",
                                       ["negative", "neutral", "positive"], seed=1, norm="gamma"),
        "tagger": write_checkpoint(str(root / "tags"), "BertForTokenClassification", TAGS, seed=2, prefix="",
                                   pooler=False),
        "reader": write_checkpoint(str(root / "qa"), "BertForQuestionAnswering", seed=3, shards=3, pooler=False),
        "regression": write_checkpoint(str(root / "reg"), "BertForSequenceClassification", ["LABEL_0"], seed=4,
                                       problem_type="regression", hidden_act="gelu_pytorch_tanh"),
        "classifier_tanh": write_checkpoint(str(root / "cls_tanh"), "BertForSequenceClassification",
                                            ["negative", "neutral", "positive"], seed=5, hidden_act="gelu_new"),
    }
    folders = {"classifier": "cls", "tagger": "tags", "reader": "qa", "regression": "reg",
               "classifier_tanh": "cls_tanh"}
    return {name: (str(root / folders[name]), weights) for name, weights in made.items()}


GELU = {"gelu": gelu_exact, "gelu_new": gelu_tanh, "gelu_pytorch_tanh": gelu_tanh}  # transformers' ACT2FN


def declared_gelu(folder):
    """The GELU transformers computes for the checkpoint in `folder`: its config's hidden_act."""
    with open(os.path.join(folder, "config.json")) as f:
        return GELU[json.load(f)["hidden_act"]]


def _check_close(ours, theirs):
    """Equal to transformers' arithmetic with the GELU the checkpoint declares, to float32 rounding
    (these weights are 15x BERT's scale: logits up to 8; the other GELU is off by up to 5e-3)."""
    np.testing.assert_allclose(ours, theirs, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("name", ["classifier", "classifier_tanh"])
def test_sequence_classifier_equals_bert_in_numpy(name, checkpoints):
    """Exact GELU (hidden_act gelu) and tanh GELU (gelu_new) checkpoints alike: probabilities
    within 1e-5 of transformers' (a run's encoder computing the other GELU is off by up to 2e-3)."""
    from kerasbert.hf.importing import load_transformers
    from kerasbert.finetuning.text_predictor import TextPredictor

    folder, w = checkpoints[name]
    config, model, preprocessor = load_transformers(folder, sequence_length=32)
    assert list(config.tasks) == ["classifier"] and config.tasks["classifier"].kind == "classes"
    assert config.tasks["classifier"].settings.served_names == ("negative", "neutral", "positive")
    assert model.backbone.get_config()["activation"] == ("gelu" if name == "classifier" else "gelu_approximate")
    ids, segments, mask = packed(TEXTS)
    expected = softmax(linear(bert_forward(w, ids, segments, mask, declared_gelu(folder))[1], w, "classifier"))
    ours = model.task_prediction("classifier", model_inputs(ids, segments, mask)).numpy()
    np.testing.assert_allclose(ours, expected, atol=1e-5, rtol=0)
    served = TextPredictor(model, preprocessor).predict("classifier", TEXTS)  # lowercased in the graph
    np.testing.assert_allclose(served["probabilities"], expected, atol=1e-5, rtol=0)
    names = ("negative", "neutral", "positive")
    assert [name.decode() for name in served["class_name"]] == [names[i] for i in expected.argmax(-1)]


def test_pair_regression_is_linear_and_unclipped(checkpoints):
    from kerasbert.hf.importing import load_transformers

    folder, w = checkpoints["regression"]
    config, model, _ = load_transformers(folder, task="stars", pair=True, sequence_length=32)
    task = config.tasks["stars"]
    assert (task.kind, task.settings.score_output, task.settings.min_score, task.head) == ("pair_score", "linear", None, "stars")
    ids, segments, mask = packed(TEXTS, TEXTS_B)
    expected = linear(bert_forward(w, ids, segments, mask, declared_gelu(folder))[1], w, "classifier")[:, 0]
    _check_close(model.task_prediction("stars", model_inputs(ids, segments, mask)).numpy(), expected)


def test_token_classifier_equals_bert_in_numpy_with_o_first(checkpoints):
    from kerasbert.hf.importing import load_transformers

    folder, w = checkpoints["tagger"]
    config, model, _ = load_transformers(folder, sequence_length=32)
    task = config.tasks["ner"]
    assert (task.kind, task.head, task.settings.labels) == ("tags", "entities", ("O", "B-PER", "I-PER", "B-LOC", "I-LOC"))
    assert task.settings.words == "punctuation"  # served words as transformers' pipeline splits them
    ids, segments, mask = packed(TEXTS)
    order = [TAGS.index(tag) for tag in task.settings.labels]
    expected = linear(bert_forward(w, ids, segments, mask, declared_gelu(folder))[0], w, "classifier")[..., order]
    real = mask.astype(bool)  # the unpadded encoder leaves zeros at padding
    ours = model.head_output("ner", model_inputs(ids, segments, mask)).numpy()
    _check_close(ours[real], expected[real])


def test_question_answering_from_shards_equals_bert_in_numpy(checkpoints):
    from kerasbert.hf.importing import load_transformers

    folder, w = checkpoints["reader"]
    config, model, _ = load_transformers(folder)
    assert (config.tasks["squad"].kind, config.tasks["squad"].head, config.data.max_sequence_length) == \
        ("span", "answer", POSITIONS)
    ids, segments, mask = packed(TEXTS, TEXTS_B)
    expected = linear(bert_forward(w, ids, segments, mask, declared_gelu(folder))[0], w, "qa_outputs")
    real = mask.astype(bool)
    ours = model.head_output("squad", model_inputs(ids, segments, mask)).numpy()  # (batch, seq, 2): start, end
    _check_close(ours[real], expected[real])


def test_load_encoder_of_a_transformers_folder_computes_its_gelu(checkpoints):
    """pipelines.finetune's --init_checkpoint path (load_encoder), as for all-MiniLM-L6-v2 (hidden_act gelu)."""
    from kerasbert.models.encoder import load_encoder

    folder, w = checkpoints["classifier"]
    encoder = load_encoder(folder)
    assert encoder.get_config()["activation"] == "gelu"
    ids, segments, mask = packed(TEXTS)
    real = mask.astype(bool)
    _check_close(encoder(model_inputs(ids, segments, mask))["sequence_output"].numpy()[real],
                 bert_forward(w, ids, segments, mask, gelu_exact)[0][real])


# --- kerasbert -> transformers folder -> kerasbert ------------------------------------------------

def tiny_multitask(pooling="cls"):
    """A random model with one head of each kind transformers represents, and its preprocessor."""
    import keras_hub

    from kerasbert.finetuning.data import TaskPreprocessor
    from kerasbert.finetuning.model import MultitaskBert
    from kerasbert.tasks import Task
    from kerasbert.tokenization import make_tokenizer

    backbone = keras_hub.models.BertBackbone(vocabulary_size=len(TINY_VOCAB), num_layers=LAYERS, num_heads=HEADS,
                                             hidden_dim=HIDDEN, intermediate_dim=INTERMEDIATE,
                                             max_sequence_length=POSITIONS)
    tasks = (Task("mood", "classes", text="t", labels=("0", "1", "2"), class_names=("sad", "calm", "glad")),
             Task("same", "pair_binary", text_a="a", text_b="b", labels=("0", "1"), class_names=("no", "yes")),
             Task("stars", "score", text="t", min_score=1, max_score=5),
             Task("ner", "tags", head="entities", labels=("O", "B-PER", "I-PER")),
             Task("squad", "span", head="answer"))
    model = MultitaskBert(backbone, tasks=tasks, pooling=pooling)
    model.build()
    rng = np.random.default_rng(7)
    for variable in model.weights:  # distinct, larger than initial values: the heads matter
        variable.assign(rng.normal(0.0, 0.3, variable.shape).astype(np.float32) + (1.0 if "gamma" in variable.path
                                                                                      else 0.0))
    return model, TaskPreprocessor(make_tokenizer(TINY_VOCAB), 32)


def saved_weights(folder):
    from safetensors.numpy import load_file

    return load_file(os.path.join(folder, "model.safetensors"))


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    from kerasbert.hf.exporting import export_transformers

    model, preprocessor = tiny_multitask()
    base = str(tmp_path_factory.mktemp("out") / "hf")
    return model, preprocessor, export_transformers((model, preprocessor), base)


def test_export_writes_transformers_folders(exported, checkpoints):
    model, _, folders = exported
    assert {task: os.path.basename(folder) for task, folder in folders.items()} == \
        {task: task for task in ("mood", "same", "stars", "ner", "squad")}
    configs = {task: json.load(open(os.path.join(folder, "config.json"))) for task, folder in folders.items()}
    assert [configs[t]["architectures"][0] for t in folders] == ["BertForSequenceClassification"] * 3 + [
        "BertForTokenClassification", "BertForQuestionAnswering"]
    assert configs["mood"]["id2label"] == {"0": "sad", "1": "calm", "2": "glad"} and \
        configs["mood"]["label2id"]["glad"] == 2 and configs["mood"]["problem_type"] == "single_label_classification"
    assert configs["same"]["id2label"] == {"0": "no", "1": "yes"}
    assert configs["stars"]["problem_type"] == "regression" and len(configs["stars"]["id2label"]) == 1
    assert configs["ner"]["id2label"] == {"0": "O", "1": "B-PER", "2": "I-PER"}
    assert configs["mood"]["hidden_act"] == "gelu_new" and configs["mood"]["vocab_size"] == len(TINY_VOCAB)
    # transformers' names: those of the checkpoints written above, `bert.` prefixed
    classifier_names = {"bert." + k for k in checkpoints["classifier"][1] if not k.startswith("classifier")}
    assert set(saved_weights(folders["mood"])) == classifier_names | {"classifier.weight", "classifier.bias"}
    assert set(saved_weights(folders["squad"])) == {n for n in classifier_names if ".pooler." not in n} | {
        "qa_outputs.weight", "qa_outputs.bias"}
    with open(os.path.join(folders["ner"], "tokenizer_config.json")) as f:
        settings = json.load(f)  # the longest input transformers reads: the position table, not the run's 32
        assert settings["do_lower_case"] is True and settings["model_max_length"] == POSITIONS
    with open(os.path.join(folders["ner"], "vocab.txt")) as f:
        assert f.read().split("\n")[:-1] == TINY_VOCAB


def test_transformers_arithmetic_on_the_exported_weights_gives_kerasbert_outputs(exported):
    """What transformers computes from each folder (BERT in NumPy with its gelu_new) equals the model."""
    model, _, folders = exported
    ids, segments, mask = packed(TEXTS, TEXTS_B)
    x = model_inputs(ids, segments, mask)
    plain = {task: {k[len("bert."):] if k.startswith("bert.") else k: v for k, v in saved_weights(f).items()}
             for task, f in folders.items()}
    sequence, pooled = {}, {}
    for task in folders:
        sequence[task], pooled[task] = bert_forward(plain[task], ids, segments, mask, gelu_tanh)
    close = dict(atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(softmax(linear(pooled["mood"], plain["mood"], "classifier")),
                               model.task_prediction("mood", x), **close)
    np.testing.assert_allclose(softmax(linear(pooled["same"], plain["same"], "classifier"))[:, 1],
                               model.task_prediction("same", x), **close)
    logit = linear(pooled["stars"], plain["stars"], "classifier")[:, 0]  # the sigmoid head's logit
    np.testing.assert_allclose(np.clip(1 + 4 / (1 + np.exp(-logit)), 1, 5), model.task_prediction("stars", x), **close)
    real = mask.astype(bool)
    for task, head in (("ner", "classifier"), ("squad", "qa_outputs")):
        np.testing.assert_allclose(linear(sequence[task], plain[task], head)[real],
                                   model.head_output(task, x).numpy()[real], **close)


def test_round_trip_gives_equal_outputs(exported):
    from kerasbert.hf.importing import load_transformers

    model, _, folders = exported
    x = model_inputs(*packed(TEXTS, TEXTS_B))
    for task, folder in folders.items():
        config, back, _ = load_transformers(folder)
        assert config.tasks[task] == model.task_specs[task]  # kind, names, range, head
        if not config.tasks[task].family.pooled:
            ours, theirs = back.head_output(task, x), model.head_output(task, x)
        else:
            ours, theirs = back.task_prediction(task, x), model.task_prediction(task, x)
        np.testing.assert_allclose(ours, theirs, atol=1e-6, err_msg=task)


def test_an_exact_gelu_run_exports_hidden_act_gelu(checkpoints, tmp_path):
    """Out as it came in: the encoder's exact GELU is config.json's "gelu", and comes back."""
    from kerasbert.hf.exporting import export_transformers
    from kerasbert.hf.importing import load_transformers

    _, model, preprocessor = load_transformers(checkpoints["classifier"][0], sequence_length=32)
    folder = export_transformers((model, preprocessor), str(tmp_path / "hf"))["classifier"]
    with open(os.path.join(folder, "config.json")) as f:
        assert json.load(f)["hidden_act"] == "gelu"
    _, back, _ = load_transformers(folder)
    x = model_inputs(*packed(TEXTS))
    np.testing.assert_allclose(back.task_prediction("classifier", x), model.task_prediction("classifier", x), atol=1e-6)


def test_a_tagger_of_space_split_words_exports_with_one_warning_line(tmp_path, caplog):
    """transformers' pipeline splits words at punctuation: exporting a tagger that does not says so, once."""
    import dataclasses

    from kerasbert.families.tagging import TaggingSettings
    from kerasbert.hf.exporting import export_transformers

    model, preprocessor = tiny_multitask()
    with caplog.at_level("WARNING"):
        export_transformers((model, preprocessor), str(tmp_path / "spaces"), tasks=["ner", "mood"])
    assert [record.getMessage() for record in caplog.records] == [
        "task 'ner' serves words split at spaces; transformers' pipeline will split words at punctuation too "
        "('U.S.' is 4 words, 'O'Gorman' 3), so its entities differ on such words: declare the task with "
        "words: \"punctuation\" (--set tasks.ner.words=punctuation) to serve words as it does"]
    caplog.clear()
    model.task_specs["ner"] = dataclasses.replace(model.task_specs["ner"], settings=TaggingSettings(words="punctuation"))
    with caplog.at_level("WARNING"):
        export_transformers((model, preprocessor), str(tmp_path / "punctuation"), tasks=["ner"])
    assert caplog.records == []


def test_heads_without_a_transformers_form_are_refused(tmp_path):
    from kerasbert.errors import ConfigError
    from kerasbert.hf.exporting import export_transformers

    model, preprocessor = tiny_multitask(pooling="mean")
    with pytest.raises(ConfigError, match=r"task 'mood': its head reads the mean .*heads.pooling=cls"):
        export_transformers((model, preprocessor), str(tmp_path / "hf"))
    assert not os.path.exists(tmp_path / "hf" / "ner")  # nothing written
    assert export_transformers((model, preprocessor), str(tmp_path / "hf"), tasks=["ner"]) == \
        {"ner": str(tmp_path / "hf" / "ner")}


# --- Bad checkpoints: one error line each ---------------------------------------------------------

def _edit_json(path, **changes):
    with open(path) as f:
        values = json.load(f)
    values.update(changes)
    with open(path, "w") as f:
        json.dump(values, f)


def _bad_copy(checkpoints, tmp_path, name="classifier"):
    folder = str(tmp_path / "bad")
    shutil.copytree(checkpoints[name][0], folder)
    return folder


BAD = {
    "roberta": (lambda f: _edit_json(f"{f}/config.json", model_type="roberta",
                                     architectures=["RobertaForSequenceClassification"]),
                r"a 'roberta' checkpoint \(RobertaForSequenceClassification\); kerasbert imports BERT checkpoints "
                r"with a task head: BertForSequenceClassification, BertForTokenClassification, BertForQuestionAnswering"),
    "distilbert": (lambda f: _edit_json(f"{f}/config.json", model_type="distilbert"), r"a 'distilbert' checkpoint"),
    "bare encoder": (lambda f: _edit_json(f"{f}/config.json", architectures=["BertModel"]),
                     r"architecture BertModel; kerasbert imports"),
    "no head": (lambda f: save_file({k: v for k, v in saved_weights(f).items() if not k.startswith("classifier")},
                                    f"{f}/model.safetensors"),
                r"BertForSequenceClassification without its head's weights \['classifier.weight', 'classifier.bias'\]"),
    "head of another size": (lambda f: _edit_json(f"{f}/config.json", id2label={"0": "a", "1": "b"}),
                             r"classifier.weight has shape \(3, 16\) .* the 2 labels of id2label need \(2, 16\)"),
    "sentencepiece": (lambda f: _edit_json(f"{f}/tokenizer_config.json", tokenizer_class="XLMRobertaTokenizer"),
                      r"tokenizer XLMRobertaTokenizer; kerasbert reads BERT's WordPiece tokenizer"),
    "bpe tokenizer.json": (lambda f: (os.remove(f"{f}/vocab.txt"), _edit_json(f"{f}/tokenizer_config.json",
                                                                               tokenizer_class="BertTokenizerFast"),
                                      json.dump({"model": {"type": "BPE", "vocab": {}}}, open(f"{f}/tokenizer.json", "w"))),
                           r"tokenizer.json: a BPE tokenizer; kerasbert reads WordPiece vocabularies"),
    "not a checkpoint": (lambda f: os.remove(f"{f}/config.json"), r"not a transformers checkpoint \(no config.json\)"),
    "pytorch only": (lambda f: os.rename(f"{f}/model.safetensors", f"{f}/pytorch_model.bin"),
                     r"no model.safetensors .*pytorch_model.bin is not read"),
    "missing shard": (lambda f: os.remove(f"{f}/model-00002-of-00003.safetensors"),
                      r"shard model-00002-of-00003.safetensors of model.safetensors.index.json is missing"),
    "not a gelu": (lambda f: _edit_json(f"{f}/config.json", hidden_act="relu"),
                   r"hidden_act 'relu'; kerasbert's encoder computes GELU, exact \(.gelu.\) or its tanh approximation"),
    "wrong sizes": (lambda f: _edit_json(f"{f}/config.json", intermediate_size=64),
                    r"weight encoder.layer.0.intermediate.dense.weight has shape \(32, 16\)"),
}


@pytest.mark.parametrize("case", BAD)
def test_bad_checkpoint_is_one_error_line(case, checkpoints, tmp_path):
    from kerasbert.hf.importing import load_transformers

    folder = _bad_copy(checkpoints, tmp_path, "reader" if case == "missing shard" else "classifier")
    change, message = BAD[case]
    change(folder)
    with pytest.raises(DataError, match=message) as raised:
        load_transformers(folder)
    assert str(raised.value).startswith(folder) and "\n" not in str(raised.value)


def test_not_a_folder(tmp_path):
    from kerasbert.hf.checkpoint import read_checkpoint

    with pytest.raises(KerasbertError, match="not a folder"):
        read_checkpoint(str(tmp_path / "nowhere" / "deeper" / "x"))


# --- The pipelines on an imported run ---------------------------------------------------------------

def test_pipelines_import_then_export_both_formats(checkpoints, tmp_path, capsys):
    import subprocess
    import sys

    from conftest import ROOT, run_main

    run = str(tmp_path / "run")
    run_main(["pipelines.import_transformers", "--checkpoint", checkpoints["classifier"][0], "--output_dir", run,
              "--sequence_length", "32"], capsys, check=True)
    assert sorted(os.listdir(run)) == ["config.json", "encoder", "model.keras"]
    again = run_main(["pipelines.import_transformers", "--checkpoint", checkpoints["classifier"][0],
                      "--output_dir", run], capsys)
    assert again.returncode == 2 and again.stderr.strip().splitlines() == [f"error: {run}: not empty; the imported "
                                                                          "run goes into a new folder"]
    bad = run_main(["pipelines.import_transformers", "--checkpoint", str(tmp_path), "--output_dir",
                    str(tmp_path / "r2")], capsys)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        f"error: {tmp_path}: not a transformers checkpoint (no config.json)"]

    run_main(["pipelines.export", "--model_dir", run, "--format", "transformers", "--export_base",
              str(tmp_path / "hf")], capsys, check=True)
    with open(tmp_path / "hf" / "classifier" / "config.json") as f:
        assert json.load(f)["id2label"] == {"0": "negative", "1": "neutral", "2": "positive"}

    run_main(["pipelines.export", "--model_dir", run, "--export_base", str(tmp_path / "saved")], capsys, check=True)
    inputs = tmp_path / "inputs.json"
    inputs.write_text(json.dumps({"classifier": {"text": TEXTS}}))
    result = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "load_export.py"),
                             str(tmp_path / "saved" / "1"), str(inputs)], capture_output=True, text=True, check=True,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    served = json.loads(result.stdout.strip().splitlines()[-1])
    assert {"classifier", "classifier_tokens", "classifier_classify", "embed"} <= set(served["signatures"])
    w = checkpoints["classifier"][1]
    ids, segments, mask = packed(TEXTS)
    expected = softmax(linear(bert_forward(w, ids, segments, mask, gelu_exact)[1], w, "classifier"))  # hidden_act gelu
    np.testing.assert_allclose(served["outputs"]["classifier"]["probabilities"], expected, atol=1e-5)


def test_finetuning_an_imported_run_continues_its_heads(checkpoints, tmp_path, capsys):
    """--init_checkpoint RUN: a task of the same name, kind and tags keeps the run's head (its
    columns in this run's tag order); a sentence head read through another pooling starts new."""
    from kerasbert.config import FinetuneConfig, HeadsConfig
    from kerasbert.finetuning.run import build_model, carried_heads
    from kerasbert.hf.importing import import_transformers
    from kerasbert.tasks import Task

    tagger, classifier = str(tmp_path / "tagger"), str(tmp_path / "classifier")
    import_transformers(checkpoints["tagger"][0], tagger, sequence_length=32)
    import_transformers(checkpoints["classifier"][0], classifier, sequence_length=32)
    tags = ("O", "B-LOC", "B-PER", "I-LOC", "I-PER")  # as a training file sorts them
    tasks = {"ner": Task("ner", "tags", head="entities", labels=tags)}
    config = FinetuneConfig(tasks=tasks, heads=HeadsConfig(pooling="cls"))
    model = build_model(config, tasks, tagger, carried_heads(config, tasks, tagger))
    w = checkpoints["tagger"][1]
    kernel, bias = model.head("ner").get_weights()
    np.testing.assert_array_equal(kernel, w["classifier.weight"][[TAGS.index(t) for t in tags]].T)
    np.testing.assert_array_equal(bias, w["classifier.bias"][[TAGS.index(t) for t in tags]])
    assert f"ner: its head from {tagger}" in capsys.readouterr().out

    names = ("negative", "neutral", "positive")
    tasks = {"classifier": Task("classifier", "classes", text="text", class_names=names, labels=("0", "1", "2"))}
    assert carried_heads(FinetuneConfig(tasks=tasks, heads=HeadsConfig(pooling="cls")), tasks, classifier)
    assert carried_heads(FinetuneConfig(tasks=tasks), tasks, classifier) == {}  # mean pooling: a new head
    assert "a new head" in capsys.readouterr().out and carried_heads(config, tasks, checkpoints["tagger"][0]) == {}
