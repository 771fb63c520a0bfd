"""The tagging family: CoNLL reader, conlleval's scores, first-piece features, the masked
loss, training, and the `entities` signature in memory and in a fresh TF-only process."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import kerasbert
from conftest import DATA_DIR, ROOT
from kerasbert.data.rows import DataError
from kerasbert.families.tagging.conll import Sentence, read_conll, tag_names, to_iob2, write_conll
from kerasbert.families.tagging.conlleval import entities, entity_scores
from helpers import save_family_functions
from kerasbert.families.tagging.features import (IGNORED, WORD_SEPARATOR, TaggingGraph, masked_tag_loss, predict_tags,
                                       tagging_features)
from kerasbert.families.tagging.export import TaggingSignatures
from kerasbert.finetuning.data import TaskPreprocessor, family_dataset
from kerasbert.finetuning.model import MultitaskBert
from kerasbert.packing import ENCODER_KEYS
from kerasbert.tasks import Task
from kerasbert.tokenization import make_tokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "dog", "sat", "in", "paris", "##s", ".",
         "rex", "cafe", "new", "york"]
TAGS = ("O", "B-ANIMAL", "I-ANIMAL", "B-LOC", "I-LOC")


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return str(path)


def test_reader_splits_sentences_skips_docstart_and_converts_iob1(tmp_path):
    path = write(tmp_path / "iob1.txt", "-DOCSTART- -X- -X- O\n\nEU NNP B-NP I-ORG\nrejects VBZ B-VP O\n"
                                        "German JJ B-NP I-MISC\n\nPeter NNP B-NP I-PER\nPaul NNP I-NP B-PER\n\n")
    result = read_conll(path)
    assert result.scheme == "IOB1" and result.skipped == 0
    assert [(s.words, s.tags, s.line) for s in result.sentences] == [
        (["EU", "rejects", "German"], ["B-ORG", "O", "B-MISC"], 3),
        (["Peter", "Paul"], ["B-PER", "B-PER"], 7)]
    assert to_iob2(["B-PER", "I-PER", "O", "B-LOC"]) == ["B-PER", "I-PER", "O", "B-LOC"]  # IOB2 unchanged
    assert tag_names(result.sentences) == ("O", "B-MISC", "I-MISC", "B-ORG", "I-ORG", "B-PER", "I-PER")


def test_reader_skips_and_counts_a_sentence_with_a_damaged_line(tmp_path, caplog):
    good = "".join(f"w{i} NN B-NP O\nParis NNP I-NP B-LOC\n\n" for i in range(12))
    path = write(tmp_path / "damaged.txt", good + "Bad NN O\nline NN B-NP O\n\n")
    result = read_conll(path)
    assert (len(result.sentences), result.skipped) == (12, 1)
    assert "damaged.txt:37: skipped damaged row (3 fields, the file's first word line has 4)" in caplog.text
    too_many = write(tmp_path / "bad.txt", "a NN O\n\nb O\n\nc O\n\n")
    with pytest.raises(DataError, match=r"bad.txt:3: 2 of 3 rows are damaged; first: 2 fields"):
        read_conll(too_many)
    with pytest.raises(DataError, match="tag 'Z-LOC' is not IOB"):
        read_conll(write(tmp_path / "tag.txt", "a NN Z-LOC\n"))
    with pytest.raises(DataError, match="not valid UTF-8"):
        (tmp_path / "latin1.txt").write_bytes(b"caf\xe9 NN O\n")
        read_conll(str(tmp_path / "latin1.txt"))


def test_a_dev_tag_the_training_file_never_showed_is_an_error_naming_file_and_line(tmp_path):
    from kerasbert.data.task_files import read_task_file, read_training_file

    train = write(tmp_path / "train.txt", "Rex NNP B-ANIMAL\nsat VBD O\n\nParis NNP B-LOC\n\n")
    task, _ = read_training_file(Task("pets", "tags"), train)
    assert task.settings.labels == ("O", "B-ANIMAL", "I-ANIMAL", "B-LOC", "I-LOC")
    dev = write(tmp_path / "dev.txt", "Paris NNP B-LOC\n\nthe DT O\ncafe NN B-ORG\n\n")
    with pytest.raises(DataError, match=r"dev.txt:3: tag\(s\) \['B-ORG'\] not among task 'pets'"):
        read_task_file(task, dev)


def test_reader_counts_on_the_real_dev_set():
    path = os.path.join(DATA_DIR, "conll2003", "dev.txt")
    if not os.path.isfile(path):
        pytest.skip(f"{path} is not here")
    result = read_conll(path)
    assert (len(result.sentences), result.scheme, result.skipped) == (3250, "IOB2", 0)
    assert sum(len(s.words) for s in result.sentences) == 51362  # the data README's counts
    assert sum(len(entities(s.tags)) for s in result.sentences) == 5942


def test_entities_follow_conllevals_chunk_rules():
    # I- after O starts an entity; a type change starts one; B- after I- of one type starts one.
    assert entities(["I-PER", "I-PER", "I-LOC", "B-LOC", "I-LOC", "O", "B-ORG"]) == \
        [("PER", 0, 2), ("LOC", 2, 3), ("LOC", 3, 5), ("ORG", 6, 7)]


def test_entity_scores_by_hand():
    references = [["B-PER", "I-PER", "O", "B-LOC", "O"], ["B-ORG", "O", "B-PER"]]
    predictions = [["B-PER", "I-PER", "O", "B-ORG", "O"], ["B-ORG", "I-ORG", "B-PER"]]
    # Found: PER(0,2) correct, ORG(3,4) wrong type, ORG(0,2) wrong boundary, PER(2,3) correct.
    scores = entity_scores(references, predictions)
    assert (scores.correct, scores.predicted, scores.reference) == (2, 4, 4)
    assert (scores.precision, scores.recall, scores.f1) == (0.5, 0.5, 0.5)
    assert scores.by_type["PER"].f1 == 1.0 and scores.by_type["ORG"].precision == 0.0
    assert scores.by_type["LOC"].recall == 0.0 and scores.by_type["LOC"].predicted == 0
    flat = scores.as_dict()
    assert flat["ner_f1"] == 0.5 and flat["ner_f1_PER"] == 1.0 and flat["ner_f1_LOC"] == 0.0
    # conlleval: precision 1/1, recall 1/2 -> F1 2/3.
    assert entity_scores([["B-PER", "O", "B-LOC"]], [["B-PER", "O", "O"]]).f1 == pytest.approx(2 / 3)
    with pytest.raises(ValueError, match="sentence 0: 2 reference tags but 1 predicted"):
        entity_scores([["O", "O"]], [["O"]])


def graph(sequence_length=16):
    return TaggingGraph(VOCAB, TAGS, sequence_length=sequence_length)


def test_features_label_each_words_first_piece_and_count_truncated_words(caplog):
    sentences = [Sentence(["The", "cats", "sat", "in", "Paris"], ["O", "B-ANIMAL", "O", "O", "B-LOC"], 1),
                 Sentence(["dogs", "dogs", "dogs", "sat"], ["B-ANIMAL", "I-ANIMAL", "I-ANIMAL", "O"], 3)]
    features = tagging_features(graph(sequence_length=8), sentences)
    # [CLS] the cat ##s sat in paris [SEP] ; [CLS] dog ##s dog ##s dog ##s [SEP] ("sat" cut).
    assert features.token_ids.tolist() == [[2, 5, 6, 11, 8, 9, 10, 3], [2, 7, 11, 7, 11, 7, 11, 3]]
    assert features.labels.tolist() == [[IGNORED, 0, 1, IGNORED, 0, 0, 3, IGNORED],
                                        [IGNORED, 1, IGNORED, 2, IGNORED, 2, IGNORED, IGNORED]]
    assert features.padding_mask.tolist() == [[1] * 8, [1] * 8]
    assert features.untagged_words == 1  # "sat", past 6 pieces
    assert "1 words past 6 word pieces got no label" in caplog.text
    # An opening quote a word starts with is passed over: [CLS] in " paris [SEP], "Paris labelled at paris.
    quoted = tagging_features(graph(), [Sentence(["in", '"Paris'], ["O", "B-LOC"], 1)])
    assert quoted.labels.tolist()[0][:5] == [IGNORED, 0, IGNORED, 3, IGNORED]
    with pytest.raises(ValueError, match=r"line 1: tag\(s\) \['B-PER'\] not among"):
        tagging_features(graph(), [Sentence(["Rex"], ["B-PER"], 1)])


def test_a_word_is_what_str_split_gives_in_training_and_in_the_graph(tmp_path):
    """CoNLL files are split on whitespace (str.split), so the graph's words are too: format
    characters (a zero-width joiner, as in emoji sequences and some names) are inside a word,
    every Unicode space separates words. Each word is tokenized on its own."""
    code_points = [chr(c) for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    separates = tf.strings.regex_full_match(tf.constant(code_points), WORD_SEPARATOR).numpy()
    assert [c for c, split in zip(code_points, separates) if split] == [c for c in code_points if c.isspace()]

    texts = ["Jon\u200dAiko sat", "\U0001F469\u200d\U0001F4BB  in\u3000Paris", "New\u00a0York\u2028cats",
             "soft\u00adhyphen (Paris)"]
    aligned = graph().align(tf.constant(texts))
    assert [[w.decode() for w in row] for row in aligned["words"].to_list()] == [t.split() for t in texts]
    assert aligned["first_token"].to_list() == [[1, 3], [1, 3, 4], [1, 2, 3], [1, 4]]  # (Paris) from paris

    # Training aligns the file's words the same way: none skipped, each labelled at its first piece.
    path = write(tmp_path / "zwj.conll", "Rex\u200dcat NNP B-ANIMAL\nsat VBD O\nin IN O\nParis NNP B-LOC\n")
    features = tagging_features(graph(), read_conll(path).sentences)
    assert features.skipped == 0  # [CLS] rex cat sat in paris [SEP]
    assert features.labels.tolist()[0][:7] == [IGNORED, 1, IGNORED, 0, 0, 3, IGNORED]


def test_masked_loss_is_the_mean_over_labelled_tokens_only():
    logits = tf.constant([[[2.0, 0.0], [0.0, 0.0], [5.0, -5.0]]])
    labels = tf.constant([[0, IGNORED, 1]])
    expected = (np.log(1 + np.exp(-2.0)) + np.log(1 + np.exp(10.0))) / 2
    assert float(masked_tag_loss(labels, logits)) == pytest.approx(expected, rel=1e-5)
    assert float(masked_tag_loss(tf.constant([[IGNORED, IGNORED]]), logits[:, :2])) == 0.0


def test_a_tiny_multitask_model_learns_a_few_sentences_through_its_tags_head():
    keras.utils.set_random_seed(1)
    sentences = [Sentence(["the", "cat", "sat", "in", "Paris"], ["O", "B-ANIMAL", "O", "O", "B-LOC"], 1),
                 Sentence(["Rex", "sat", "in", "New", "York"], ["B-ANIMAL", "O", "O", "B-LOC", "I-LOC"], 2),
                 Sentence(["the", "dogs", "sat"], ["O", "B-ANIMAL", "O"], 3)] * 4
    task = Task("animals", "tags", labels=TAGS)
    data = family_dataset(task, sentences, TaskPreprocessor(make_tokenizer(VOCAB), 16), batch_size=4, training=True,
                          seed=1)
    x, y = next(iter(data))
    width = int(tf.reduce_max(tf.reduce_sum(x["padding_mask"], axis=1)))  # trimmed to its longest sentence
    assert x["token_ids"].shape == y.shape == (4, width) and width <= 7
    model = MultitaskBert(kerasbert.build_encoder("tiny", vocabulary_size=len(VOCAB)), tasks=(task,))
    assert model.head_output("animals", x).shape == (4, width, len(TAGS))
    model.compile(keras.optimizers.Adam(3e-3))
    history = model.fit(data, steps_per_epoch=3, epochs=8, verbose=0).history["loss"]
    assert history[-1] < 0.5 * history[0]


def test_fit_alone_trains_a_tags_head_no_call_or_build_first():
    """The API user's path: MultitaskBert, compile, fit (the head used to be left to build
    inside fit's traced step, where the hidden size is unknown: a ValueError)."""
    keras.utils.set_random_seed(1)
    task = Task("animals", "tags", labels=TAGS)
    sentences = [Sentence(["Rex", "sat", "in", "Paris"], ["B-ANIMAL", "O", "O", "B-LOC"], 1)] * 8
    data = family_dataset(task, sentences, TaskPreprocessor(make_tokenizer(VOCAB), 16), batch_size=4, training=True,
                          seed=1)
    model = MultitaskBert(kerasbert.build_encoder("tiny", vocabulary_size=len(VOCAB)), tasks=(task,))
    model.compile(keras.optimizers.Adam(3e-3))
    history = model.fit(data, steps_per_epoch=2, epochs=2, verbose=0).history["loss"]
    assert len(history) == 2 and history[-1] < history[0]
    assert len(model.head("animals").weights) == 2  # built once: kernel and bias


def test_grouping_by_length_cuts_the_padding_of_tag_batches_and_keeps_every_sentence():
    rng = np.random.default_rng(0)
    sentences = [Sentence(["the"] * int(n), ["O"] * int(n), i) for i, n in enumerate(rng.integers(1, 30, 128))]
    task = Task("animals", "tags", labels=TAGS)
    preprocessor = TaskPreprocessor(make_tokenizer(VOCAB), 48)

    def ten_epochs(group_by_length):  # 160 batches of 8: fill = real tokens / tokens computed
        lengths, real, computed = [], 0, 0
        data = family_dataset(task, sentences, preprocessor, 8, training=True, seed=3, group_by_length=group_by_length)
        for x, y in data.take(160).as_numpy_iterator():
            assert x["token_ids"].shape == y.shape  # labels trimmed with their tokens
            real, computed = real + x["padding_mask"].sum(), computed + x["padding_mask"].size
            lengths += list(x["padding_mask"].sum(axis=1))
        return np.bincount(lengths, minlength=32), real / computed

    (plain_lengths, plain_fill), (grouped_lengths, grouped_fill) = ten_epochs(0), ten_epochs(8)
    assert plain_fill < 0.7 and grouped_fill > 0.9
    seen = plain_lengths > 0  # 10 epochs exactly without grouping; grouped, about 10 of each sentence
    assert ((grouped_lengths > 0) == seen).all()
    assert (10 * abs(grouped_lengths[seen] - plain_lengths[seen]) <= plain_lengths[seen]).all()  # within 10%


FIXED_TAGS = [("cat", 1), ("dog", 1), ("rex", 1), ("paris", 3), ("new", 3), ("york", 4), ("cafe", 4)]


def fixed_tagger(tags=FIXED_TAGS):
    """A 'model' whose tag logits are a table of each token's: cat/dog/rex -> B-ANIMAL,
    paris/new -> B-LOC, york -> I-LOC, cafe -> I-LOC (invalid after O: conlleval starts an
    entity), the rest O. Probabilities are softmax(4 * one-hot)."""
    table = np.zeros((len(VOCAB), len(TAGS)), np.float32)
    table[:, 0] = 4.0
    for token, tag in tags:
        table[VOCAB.index(token)] = 0.0
        table[VOCAB.index(token), tag] = 4.0
    inputs = {key: keras.Input((None,), dtype="int32", name=key) for key in ENCODER_KEYS}
    layer = keras.layers.Embedding(len(VOCAB), len(TAGS), name="tag_table")
    model = keras.Model(inputs, layer(inputs["token_ids"]))
    layer.set_weights([table])
    return model


# Punctuation a tokenizer splits off is not part of an entity: "Cats," and "(Paris)!" are
# "Cats" and "Paris" ("(Paris)!" tagged from "paris", not from "("); a full stop only where
# the entity ends the text ("York." but "Rex.").
# A word is what str.split() gives: "Rex\u200dcat" (a zero-width joiner inside) is one word,
# tagged from "rex"; a no-break space separates "New" and "York".
TEXTS = ["Rex.  sat in New York.", "Le café Cats, in (Paris)!", "", "the the", "Rex\u200dcat in New\u00a0York"]
EXPECTED = {
    "entity_text": [["Rex.", "New York", ""], ["café", "Cats", "Paris"], ["", "", ""], ["", "", ""],
                    ["Rex\u200dcat", "New\u00a0York", ""]],
    "entity_type": [["ANIMAL", "LOC", ""], ["LOC", "ANIMAL", "LOC"], ["", "", ""], ["", "", ""], ["ANIMAL", "LOC", ""]],
    "entity_start": [[0, 13, -1], [3, 8, 18], [-1] * 3, [-1] * 3, [0, 11, -1]],
    "entity_end": [[4, 21, -1], [7, 12, 23], [-1] * 3, [-1] * 3, [7, 19, -1]],
    "num_entities": [2, 3, 0, 0, 2],
    "word": [["Rex.", "sat", "in", "New", "York."], ["Le", "café", "Cats,", "in", "(Paris)!"], [""] * 5,
             ["the", "the", "", "", ""], ["Rex\u200dcat", "in", "New", "York", ""]],
    "word_tag": [["B-ANIMAL", "O", "O", "B-LOC", "I-LOC"], ["O", "I-LOC", "B-ANIMAL", "O", "B-LOC"],
                 [""] * 5, ["O", "O", "", "", ""], ["B-ANIMAL", "O", "B-LOC", "I-LOC", ""]],
    "num_words": [5, 5, 0, 2, 4],
}


def check_entities(outputs):
    decoded = {key: [[v.decode() if isinstance(v, bytes) else v for v in row] if isinstance(row, (list, np.ndarray))
                     else row for row in np.asarray(value).tolist()] for key, value in outputs.items()}
    for key, value in EXPECTED.items():
        assert decoded[key] == value, key
    for text, row, starts, ends in zip(TEXTS, decoded["entity_text"], decoded["entity_start"], decoded["entity_end"]):
        assert [text[s:e] for s, e in zip(starts, ends) if s >= 0] == [t for t in row if t]
    score = np.exp(4.0) / (np.exp(4.0) + len(TAGS) - 1)  # every word's tag at probability softmax(4, 0, 0, 0, 0)
    np.testing.assert_allclose(np.asarray(outputs["entity_score"])[0], [score, score, 0.0], rtol=1e-5)


def decoder(sequence_length=16):
    model = fixed_tagger()
    return TaggingSignatures(model, graph(sequence_length)), model


def test_entities_signature_gives_entities_with_character_offsets():
    signatures, _ = decoder()
    outputs = {key: value.numpy() for key, value in signatures.entities(tf.constant(TEXTS)).items()}
    check_entities(outputs)
    assert outputs["num_untagged_words"].tolist() == [0, 0, 0, 0, 0]
    tokens = tf.constant([[2, 13, 8, 3]])
    by_token = signatures.tags_tokens(tokens, tf.zeros_like(tokens), tf.ones_like(tokens))
    assert [t.decode() for t in by_token["tag"].numpy()[0]] == ["O", "B-ANIMAL", "O", "O"]
    quoted = signatures.entities(tf.constant(["„Paris“ »Rex«"]))  # German and Swiss quotes, tagged from the names
    assert [t.decode() for t in quoted["entity_text"].numpy()[0]] == ["Paris", "Rex"]
    assert quoted["entity_start"].numpy()[0].tolist() == [1, 9] and quoted["entity_end"].numpy()[0].tolist() == [6, 12]
    with pytest.raises(tf.errors.InvalidArgumentError, match="the text input is not valid UTF-8"):
        signatures.entities(tf.constant([b"caf\xe9"]))
    # Scoring goes through the same signature: predicted tags per word, untagged words as O.
    sentences = [Sentence(["Rex", "sat", "in", "Paris"], ["B-ANIMAL", "O", "O", "B-LOC"], 1)]
    assert predict_tags(signatures.entities, sentences) == [["B-ANIMAL", "O", "O", "B-LOC"]]
    short, _ = decoder(sequence_length=4)
    assert predict_tags(short.entities, sentences) == [["B-ANIMAL", "O", "O", "O"]]
    assert short.entities(tf.constant(["Rex sat in Paris"]))["num_untagged_words"].numpy().tolist() == [2]


def test_an_entitys_edge_word_of_punctuation_only_leaves_no_space_in_its_text():
    # "(" is [UNK] here, tagged B-LOC; "." is I-LOC: "( Paris" and "New York ." are entities of their words.
    signatures = TaggingSignatures(fixed_tagger([("[UNK]", 3), ("paris", 4), ("new", 3), ("york", 4), (".", 4)]),
                                   graph())
    outputs = signatures.entities(tf.constant(["( Paris sat in New York ."]))
    assert [t.decode() for t in outputs["entity_text"].numpy()[0]] == ["Paris", "New York"]
    assert outputs["entity_start"].numpy()[0].tolist() == [2, 15] and outputs["entity_end"].numpy()[0].tolist() == [7, 23]


def test_punctuation_words_split_as_berts_basic_tokenizer_and_scoring_maps_them_to_the_given_words():
    """words="punctuation" (imported transformers taggers): punctuation is a word of its own, each
    tagged from its own first piece, as transformers' pipeline reads text; training and scoring
    still label the given (CoNLL) words, each from the first served word inside it."""
    signatures = TaggingSignatures(fixed_tagger(), TaggingGraph(VOCAB, TAGS, 16, words="punctuation"))
    outputs = signatures.entities(tf.constant(["Rex.cat (Paris)"]))
    assert [w.decode() for w in outputs["word"].numpy()[0]] == ["Rex", ".", "cat", "(", "Paris", ")"]
    assert [t.decode() for t in outputs["entity_text"].numpy()[0]] == ["Rex", "cat", "Paris"]
    assert outputs["entity_start"].numpy()[0].tolist() == [0, 4, 9]
    sentences = [Sentence(["Rex.cat", "(Paris)", "sat"], ["B-ANIMAL", "B-LOC", "O"], 1)]
    assert predict_tags(signatures.entities, sentences) == [["B-ANIMAL", "B-LOC", "O"]]  # "(" passed over
    features = tagging_features(signatures.graph, sentences)
    assert (features.skipped, int((features.labels >= 0).sum())) == (0, 3)  # one label per given word
    with pytest.raises(ValueError, match="words must be one of"):
        TaggingGraph(VOCAB, TAGS, 16, words="bert")


def test_saved_entities_signature_in_a_fresh_tf_only_process_matches(tmp_path):
    signatures, model = decoder()
    path = str(tmp_path / "export" / "1")
    save_family_functions(path, model, signatures.graph, signatures.functions("entities"))
    calls = {"entities": {"text": TEXTS}, "entities_tokens": {"token_ids": [[2, 13, 8, 3]], "segment_ids": [[0] * 4],
                                                          "padding_mask": [[1] * 4]}}
    (tmp_path / "calls.json").write_text(json.dumps(calls))
    result = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "load_export.py"), path,
                             str(tmp_path / "calls.json")], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])["outputs"]
    shape = (len(TEXTS), 3)
    loaded = {key: np.array(value).reshape(shape if key.startswith("entity_") else
                                           (len(TEXTS), -1) if key.startswith("word") else (-1,))
              for key, value in out["entities"].items()}
    loaded = {key: value.astype(object) if value.dtype.kind == "U" else value for key, value in loaded.items()}
    loaded = {key: np.vectorize(str.encode)(value) if value.dtype == object else value for key, value in loaded.items()}
    check_entities(loaded)
    in_memory = signatures.entities(tf.constant(TEXTS))
    np.testing.assert_allclose(loaded["entity_score"], in_memory["entity_score"].numpy(), rtol=1e-6)
    assert out["entities_tokens"]["tag"] == ["O", "B-ANIMAL", "O", "O"]


def test_a_written_conll_file_reads_back_to_the_same_sentences(tmp_path):
    """bench-tasks trains kerasbert on the file and gives transformers the sentences: both the same."""
    sentences = read_conll(os.path.join(DATA_DIR, "conll2003", "dev.txt")).sentences[:12]
    sentences.append(Sentence(["Zürich", "'s", "café"], ["B-LOC", "O", "O"], 0))
    write_conll(str(tmp_path / "train.txt"), sentences)
    assert [(s.words, s.tags) for s in read_conll(str(tmp_path / "train.txt")).sentences] == \
        [(s.words, s.tags) for s in sentences]
