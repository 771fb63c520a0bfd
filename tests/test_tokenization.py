"""Tokenizers: an uncased BERT strips accents, as BERT's and Hugging Face's tokenizers do,
so accented words meet the vocabulary's plain ones (keras-hub's loader would keep them)."""

import json
import shutil

from conftest import TINY_VOCAB
from kerasbert.models.encoder import minilm_checkpoint
from kerasbert.tokenization import load_tokenizer, make_tokenizer, tokenize_sentences


def ids(tokenizer, text):
    return list(map(int, tokenizer(text)))


def test_an_uncased_checkpoint_strips_accents():
    tokenizer = load_tokenizer(minilm_checkpoint())
    assert ids(tokenizer, "How do you spell cliché in Malmö ?") == ids(tokenizer, "how do you spell cliche in malmo ?")
    assert tokenizer.token_to_id("[UNK]") not in ids(tokenizer, "Maelström , naïveté")


def test_corpus_tokenization_in_batches_gives_the_ids_the_tokenizer_gives_one_text_at_a_time():
    """tokenize_sentences runs TensorFlow Text's op, keras-hub's eager call its Python path."""
    tokenizer = load_tokenizer(minilm_checkpoint())
    texts = ["How do you spell cliché in Malmö ?", "", "don't!!  tabs\tand\nnewlines", "日本語 and emoji 🙂",
             "[MASK] stays text", "supercalifragilisticexpialidocious " * 20, "a"]
    assert tokenize_sentences(tokenizer, texts, batch_size=3) == [ids(tokenizer, text) for text in texts]


def test_a_checkpoint_that_says_strip_accents_false_keeps_them(tmp_path):
    folder = tmp_path / "minilm"
    shutil.copytree(minilm_checkpoint(), folder)
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**config, "strip_accents": False}))
    tokenizer = load_tokenizer(str(folder))
    assert ids(tokenizer, "cliché") != ids(tokenizer, "cliche")


def test_a_trained_vocabulary_tokenizes_as_it_was_trained():
    tokenizer = make_tokenizer(TINY_VOCAB)
    assert ids(tokenizer, "Thé cât sät") == ids(tokenizer, "the cat sat") == [5, 6, 8]
