"""The offset tokenizer of the tagging and span families: keras-hub's ids, and offsets that
slice the original text (tokens -> characters and back)."""

import json
import os

import pytest
import tensorflow as tf

from conftest import DATA_DIR
from kerasbert.families.tagging.conll import read_conll
from kerasbert.families.wordpiece import OffsetTokenizer, char_offsets, check_utf8
from kerasbert.models.encoder import minilm_checkpoint
from kerasbert.tokenization import load_tokenizer, make_tokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cafe", "##s", ".", "naive", "東", "x", "y", "..."]


def test_ids_equal_keras_hubs_bert_tokenizer_on_the_dev_sets():
    conll, squad = (os.path.join(DATA_DIR, "conll2003", "dev.txt"), os.path.join(DATA_DIR, "squad", "dev.json"))
    if not (os.path.isfile(conll) and os.path.isfile(squad)):
        pytest.skip(f"the CoNLL-2003 and SQuAD data are not in {DATA_DIR}")
    texts = [" ".join(sentence.words) for sentence in read_conll(conll).sentences]
    for article in json.load(open(squad, encoding="utf-8"))["data"]:
        for paragraph in article["paragraphs"]:
            texts += [paragraph["context"]] + [qa["question"] for qa in paragraph["qas"]]
    # Accents, CJK, a zero-width space (a separator), an ellipsis (one token in keras-hub), ß, a ligature, a long word.
    texts += ["naïve Café 東京 x\u200by … ß İstanbul ﬁne", "a" * 150 + " b", ""]
    keras_hub_tokenizer = load_tokenizer(minilm_checkpoint())
    expected = [list(ids) for ids in keras_hub_tokenizer(tf.constant(texts))]
    ids, _, _ = OffsetTokenizer(keras_hub_tokenizer.get_vocabulary()).tokenize_with_offsets(tf.constant(texts))
    mismatched = [text for text, want, got in zip(texts, expected, ids.to_list()) if want != got]
    assert len(texts) > 4500 and not mismatched, mismatched[:3]


def test_offsets_slice_the_original_text_and_map_to_characters_and_back():
    text = "Naïve cafés… 東x"
    tokenizer = OffsetTokenizer(VOCAB)
    ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant([text]))
    assert ids.to_list() == [[9, 6, 7, 13, 10, 11]]
    assert list(make_tokenizer(VOCAB)(tf.constant([text]))[0]) == ids.to_list()[0]
    raw = text.encode("utf-8")
    assert [raw[s:e].decode() for s, e in zip(starts.to_list()[0], ends.to_list()[0])] == \
        ["Naïve", "café", "s", "…", "東", "x"]
    char_starts = char_offsets(tf.constant([text]), starts).to_list()[0]
    char_ends = char_offsets(tf.constant([text]), ends).to_list()[0]
    assert (char_starts, char_ends) == ([0, 6, 10, 11, 13, 14], [5, 10, 11, 12, 14, 15])
    # The inverse: each character offset, encoded, is the byte offset it came from.
    assert [len(text[:c].encode()) for c in char_starts + char_ends] == starts.to_list()[0] + ends.to_list()[0]


def test_invalid_utf8_is_a_clear_error():
    check_utf8(tf.constant(["fine", "café"]), "text")
    with pytest.raises(tf.errors.InvalidArgumentError, match="the text input is not valid UTF-8"):
        check_utf8(tf.constant([b"ok", b"caf\xe9"]), "text")


def test_a_vocabulary_without_unk_is_refused():
    with pytest.raises(ValueError, match="lacks \\[UNK\\]"):
        OffsetTokenizer(["[PAD]", "the"])


def test_unicode_spaces_split_words_as_berts_tokenizer_and_offsets_skip_them():
    """keras-hub's split is on ASCII whitespace: "the\u00a0cafe" was one word, [UNK]; BERT's
    tokenizer (and transformers') splits at every Unicode space."""
    text = "the\u00a0cafe\u202fthe\u3000x"
    ids, starts, ends = OffsetTokenizer(VOCAB).tokenize_with_offsets(tf.constant([text]))
    assert ids.to_list() == OffsetTokenizer(VOCAB).tokenize_with_offsets(tf.constant(["the cafe the x"]))[0].to_list()
    raw = text.encode("utf-8")
    assert [raw[s:e].decode() for s, e in zip(starts.to_list()[0], ends.to_list()[0])] == ["the", "cafe", "the", "x"]


def test_sentence_tasks_clean_text_as_berts_tokenizer_does():
    """BERT's tokenizer drops control and format characters (joining their neighbours) and
    reads Unicode whitespace as a space; the preprocessor of sentence tasks, and so their
    exports, tokenize what it cleans, as pretraining does its corpus."""
    from kerasbert.finetuning.data import TaskPreprocessor

    tokenize = TaskPreprocessor(make_tokenizer(VOCAB), 16).tokenize
    for text, as_bert_reads_it in [("the\u00a0cafe", "the cafe"), ("the\u2028cafe", "the cafe"),
                                   ("ca\u00adfe", "cafe"), ("ca\u200dfe", "cafe"), ("the\x07 cafe\ufffd", "the cafe")]:
        assert tokenize(tf.constant([text])).to_list() == tokenize(tf.constant([as_bert_reads_it])).to_list(), text
    assert tokenize(tf.constant(["the\u00a0cafe"])).to_list() == [[5, 6]]
    from kerasbert.tokenization import tokenize_sentences

    assert tokenize_sentences(make_tokenizer(VOCAB), ["the\u00a0ca\u00adfe"]) == [[5, 6]]  # pretraining's corpus too
