"""WordPiece vocabulary training and the BERT tokenizer, both from keras-hub.

Example:
    >>> vocab = train_vocabulary(["the cat sat", "the dog ran"], vocab_size=40)
    >>> tokenizer = make_tokenizer(vocab)
    >>> tokenizer("The cat").tolist()  # ids depend on the corpus
    [...]
"""

from __future__ import annotations

import json
import os
import weakref

import keras_hub
import tensorflow as tf

from kerasbert.errors import ConfigError, DataError

# BERT's special tokens. A trained vocabulary starts with them, in this order.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")

# BERT's text cleaning (its BasicTokenizer's _clean_text; transformers' BertNormalizer):
# control and format characters are dropped (NUL, U+FFFD, Cc but tab, newline and return,
# Cf, Co), and Unicode whitespace is a space. keras-hub's tokenizer splits on ASCII whitespace
# only ("New\u00a0York" was one unknown word) and splits words at format characters.
DROPPED_CHARACTERS = r"[\x00-\x08\x0B\x0C\x0E-\x1F\x7F-\x9F\x{FFFD}\p{Cf}\p{Co}]"
SPACE_CHARACTERS = r"[\t\n\r\p{Zs}\x{2028}\x{2029}]"


def clean_text(text: tf.Tensor) -> tf.Tensor:
    """Strings as BERT's tokenizer cleans them before splitting words (see DROPPED_CHARACTERS).

    >>> clean_text(tf.constant(["New\u00a0York", "Rex\u200dcat co\u00adoperate"])).numpy().tolist()
    [b'New York', b'Rexcat cooperate']
    """
    return tf.strings.regex_replace(tf.strings.regex_replace(text, DROPPED_CHARACTERS, ""), SPACE_CHARACTERS, " ")


def train_vocabulary(sentences: list[str], vocab_size: int, output_file: str | None = None) -> list[str]:
    """Trains an uncased WordPiece vocabulary (keras-hub's trainer, tf_text inside) that
    starts with BERT's special tokens; writes it to `output_file` if given.

    Example:
        >>> train_vocabulary(["the cat sat", "the dog ran"], vocab_size=40)[:6]
        ['[PAD]', '[UNK]', '[CLS]', '[SEP]', '[MASK]', 'a']
    """
    if not sentences:
        raise DataError("train_vocabulary needs at least one sentence. Received: 0")
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ConfigError(f"vocab_size must exceed the {len(SPECIAL_TOKENS)} special tokens. "
                          f"Received: vocab_size={vocab_size}")
    dataset = tf.data.Dataset.from_tensor_slices(sentences).batch(1000)
    vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(
        dataset,
        vocabulary_size=vocab_size,
        lowercase=True,
        strip_accents=True,
        reserved_tokens=list(SPECIAL_TOKENS),
    )
    if output_file:
        write_vocabulary(vocabulary, output_file)
    return vocabulary


def write_vocabulary(vocabulary: list[str], path: str) -> None:
    """One token a line, written atomically (a reader never sees half a file)."""
    tmp = path + ".tmp"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write("\n".join(vocabulary) + "\n")
    os.replace(tmp, path)


def read_vocabulary(path: str) -> list[str]:
    if not os.path.isfile(path):
        raise FileNotFoundError(f"{path}: vocabulary file not found")
    with open(path, encoding="utf-8") as f:
        vocabulary = [line.rstrip("\n") for line in f if line.rstrip("\n")]
    missing = [t for t in SPECIAL_TOKENS if t not in vocabulary]
    if missing:
        raise DataError(f"{path}: vocabulary lacks special token(s) {missing}")
    return vocabulary


def make_tokenizer(vocabulary: list[str] | str) -> keras_hub.models.BertTokenizer:
    """An uncased BERT WordPiece tokenizer over a vocabulary list or file: lower case and
    accents stripped, as `train_vocabulary` and BERT's own uncased tokenizer do.

    Example:
        >>> make_tokenizer(vocab_file)("The Cats sat")  # a vocab.txt; or a list of tokens
        array([ 5,  6, 13,  8], dtype=int32)
    """
    if isinstance(vocabulary, str):
        vocabulary = read_vocabulary(vocabulary)
    return keras_hub.models.BertTokenizer(vocabulary=list(vocabulary), lowercase=True, strip_accents=True)


def checkpoint_source(checkpoint: str) -> str:
    """The preset folder of a checkpoint: a kerasbert run keeps its encoder in `encoder/`."""
    inner = os.path.join(checkpoint, "encoder")
    return inner if os.path.isfile(os.path.join(inner, "config.json")) else checkpoint


def load_tokenizer(checkpoint_dir: str) -> keras_hub.models.BertTokenizer:
    """The tokenizer of a checkpoint: a kerasbert run or keras-hub preset folder, a Hugging
    Face folder, or a hub handle.

    An uncased checkpoint strips accents, as BERT's tokenizer and Hugging Face's do unless
    the folder's tokenizer_config.json says `"strip_accents": false`; keras-hub's loader
    leaves them, so "cliché" would not meet the vocabulary's "cliche".

    Example:
        >>> from kerasbert import minilm_checkpoint
        >>> load_tokenizer(minilm_checkpoint()).vocabulary_size()
        30522
    """
    from kerasbert.models import encoder  # noqa: F401 (registers BertEncoder's tokenizer, which a run's preset may name)

    source = checkpoint_source(checkpoint_dir)
    tokenizer = keras_hub.models.BertTokenizer.from_preset(source)
    if tokenizer.lowercase and not tokenizer.strip_accents and _uncased_strips_accents(source):
        tokenizer = keras_hub.models.BertTokenizer(vocabulary=tokenizer.get_vocabulary(), lowercase=True,
                                                   strip_accents=True)
    return tokenizer


def _uncased_strips_accents(source: str) -> bool:
    config_path = os.path.join(source, "tokenizer_config.json")
    if not os.path.isfile(config_path):
        return True
    with open(config_path, encoding="utf-8") as f:
        strip_accents = json.load(f).get("strip_accents")
    return strip_accents is None or bool(strip_accents)


def special_token_ids(vocabulary) -> dict[str, int]:
    """[PAD], [CLS], [SEP] and [MASK]'s ids by the names `pack_segments` and the masking take, from
    a tokenizer or its vocabulary (a list of tokens; one without [MASK] gives no "mask").

    >>> special_token_ids(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the"])
    {'pad': 0, 'cls': 2, 'sep': 3}
    """
    tokens = vocabulary.get_vocabulary() if hasattr(vocabulary, "get_vocabulary") else vocabulary
    index = {token: i for i, token in enumerate(tokens)}
    missing = [token for token in ("[CLS]", "[SEP]", "[PAD]") if token not in index]
    if missing:
        raise ValueError(f"The vocabulary lacks {missing}")
    names = {"pad": "[PAD]", "cls": "[CLS]", "sep": "[SEP]", "mask": "[MASK]"}
    return {name: index[token] for name, token in names.items() if token in index}


def continuation_table(tokenizer) -> tf.Tensor:
    """Bool [vocabulary_size]: True for `##` word-piece continuations (whole-word masking)."""
    vocabulary = tokenizer.get_vocabulary()
    return tf.constant([token.startswith("##") for token in vocabulary])


def tokenize_sentences(tokenizer, sentences: list[str], batch_size: int = 4096) -> list[list[int]]:
    """Token ids of each sentence (no special tokens; its text cleaned as BERT's tokenizer
    cleans it, `clean_text`), in batches through TensorFlow Text's WordPiece op, traced once
    per tokenizer: called eagerly, keras-hub tokenizes in Python (the same ids, an order of
    magnitude slower)."""
    if tokenizer not in _GRAPH_TOKENIZERS:
        held = weakref.ref(tokenizer)  # the cache must not keep its key alive
        _GRAPH_TOKENIZERS[tokenizer] = tf.function(lambda text: held()(clean_text(text)), autograph=False,
                                                   input_signature=[tf.TensorSpec([None], tf.string)])
    tokenize = _GRAPH_TOKENIZERS[tokenizer]
    ids: list[list[int]] = []
    for start in range(0, len(sentences), batch_size):
        ids.extend(tokenize(tf.constant(sentences[start:start + batch_size], tf.string)).to_list())
    return ids


_GRAPH_TOKENIZERS = weakref.WeakKeyDictionary()  # tokenizer -> its traced call, for tokenize_sentences
