"""The offset tokenizer of the tagging and span families: keras-hub's ids, and offsets that
slice the original text (tokens -> characters and back)."""

import json
import os

import pytest
import tensorflow as tf

from conftest import DATA_DIR
from kerasbert.families.conll import read_conll
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
