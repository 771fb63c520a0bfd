"""BERT's uncased WordPiece tokenization with byte offsets into the original text, in graph.

The tagging and span families need to know where each token came from, so that an entity
or an answer is a slice of the user's text. keras-hub's `BertTokenizer` (what the other
tasks use) gives ids only. `OffsetTokenizer` gives the same ids (tests/test_wordpiece.py
checks every sentence, question and context of the CoNLL-2003 and SQuAD dev sets) and the
byte span of each token, with tf_text ops only, so a SavedModel needs nothing but
TensorFlow and tensorflow-text:

1. split the original text into pre-tokens with keras-hub's own patterns and Unicode spaces
   (whitespace and control characters dropped; punctuation and CJK characters kept as
   one-character pre-tokens): `tf_text.regex_split_with_offsets`;
2. lower-case, NFD-decompose and strip accents each pre-token, keeping a map from each
   normalised byte back to the original: `tf_text.FastBertNormalizer`;
3. split each into word pieces (a pre-token over 100 bytes is `[UNK]`, as keras-hub does):
   `tf_text.FastWordpieceTokenizer`, whose offsets go back through the map of step 2.

keras-hub normalises before it splits; here each pre-token is normalised after, which is
what makes per-pre-token offsets possible. The two agree unless normalisation turns a
character into punctuation or whitespace (rare: e.g. U+037E, the Greek question mark, is
`;` after NFD, and is punctuation before it too).

Offsets are UTF-8 byte offsets (what tf_text gives); `char_offsets` turns them into
character offsets, the indices a Python `str` takes.

Example:
    >>> tokenizer = OffsetTokenizer(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cafe", "##s", "."])
    >>> ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant(["The Cafés."]))
    >>> ids.to_list(), starts.to_list(), ends.to_list()
    ([[5, 6, 7, 8]], [[0, 4, 9, 10]], [[3, 9, 10, 11]])
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_text as tf_text

from kerasbert.compat.keras_hub import word_split_patterns

MAX_BYTES_PER_WORD = 100  # keras-hub's: a longer pre-token is one [UNK]
# Whitespace to BERT that keras-hub's split pattern leaves in words (its `\s` is ASCII):
# "New\u00a0York" is two words. (Format characters, which BERT drops and so joins their
# neighbours, still split a word here: offsets into the text cannot drop them.)
UNICODE_SPACES = r"\p{Zs}|[\x{2028}\x{2029}]"
# The memory a text signature's graph takes per byte of one text, besides the model:
# `entities` on one 1 MB text of one-character pieces took +244 MiB, of one-letter words
# +217 MiB (python -m benchmarks.call_memory). Declared to servers in assets.extra/row_costs.json.
GRAPH_BYTES_PER_BYTE = 256


class OffsetTokenizer(tf.Module):
    """Text -> word-piece ids and the byte span of each piece, over a BERT vocabulary (a list
    of tokens, `[UNK]` among them), uncased as kerasbert's tokenizers are.

    Example:
        >>> tokenizer = OffsetTokenizer(vocabulary)  # e.g. load_tokenizer(minilm_checkpoint()).get_vocabulary()
        >>> ids, starts, ends = tokenizer.tokenize_with_offsets(tf.constant(["The cats, sat"]))
        >>> ids.to_list(), starts.to_list(), ends.to_list()
        ([[5, 6, 13, 1, 8]], [[0, 4, 7, 8, 10]], [[3, 7, 8, 9, 13]])
    """

    def __init__(self, vocabulary: list[str], name: str = "offset_tokenizer"):
        super().__init__(name=name)
        if "[UNK]" not in vocabulary:
            raise ValueError("The vocabulary lacks [UNK]. Received: a vocabulary of "
                             f"{len(vocabulary)} tokens starting {list(vocabulary[:5])}")
        self.vocabulary = list(vocabulary)
        split, self._keep = word_split_patterns()
        self._split = split + "|" + UNICODE_SPACES
        self._normalizer = tf_text.FastBertNormalizer(lower_case_nfd_strip_accents=True)
        self._word_pieces = tf_text.FastWordpieceTokenizer(
            vocab=self.vocabulary, token_out_type=tf.int32, unknown_token="[UNK]",
            max_bytes_per_word=MAX_BYTES_PER_WORD, no_pretokenization=True)

    def tokenize_with_offsets(self, text: tf.Tensor):
        """string (batch,) -> (ids int32, starts int64, ends int64), each ragged (batch, tokens);
        `text[b][starts[b, i]:ends[b, i]]` (in bytes) is where token i came from."""
        words, word_starts, _ = tf_text.regex_split_with_offsets(text, self._split, self._keep)  # (batch, words)
        normalized, to_original = self._normalizer.normalize_with_offsets(words.flat_values)  # (all words, ...)
        ids, starts, ends = self._word_pieces.tokenize_with_offsets(normalized)  # (all words, pieces)
        # Piece offsets are in the normalised word; its map sends them to the original word,
        # whose start in the text is added. Flat index arithmetic: ragged broadcasting traces slowly.
        word = starts.value_rowids()  # (all pieces,)
        base = tf.gather(to_original.row_starts(), word)
        shift = tf.gather(word_starts.flat_values, word)
        starts = tf.gather(to_original.flat_values, base + starts.flat_values) + shift
        ends = tf.gather(to_original.flat_values, base + ends.flat_values) + shift
        # (all words, pieces) -> (batch, tokens): the pieces of each text's words, in order.
        splits = tf.gather(ids.row_splits, words.row_splits)
        return tuple(tf.RaggedTensor.from_row_splits(values, splits, validate=False)
                     for values in (ids.flat_values, starts, ends))


def char_offsets(text: tf.Tensor, byte_offsets: tf.RaggedTensor) -> tf.RaggedTensor:
    """Byte offsets (ragged (batch, n)) into UTF-8 `text` (batch,) -> character offsets.

    A byte offset inside a character (never one from `OffsetTokenizer`) maps to that
    character's end. Raises InvalidArgumentError for text that is not valid UTF-8.

    Example:
        >>> char_offsets(tf.constant(["é b"]), tf.ragged.constant([[0, 2, 3, 4]], tf.int64)).to_list()
        [[0, 1, 2, 3]]
    """
    _, char_starts = tf.strings.unicode_decode_with_offsets(text, "UTF-8", errors="strict")  # (batch, chars)
    # Offsets into the texts laid end to end, so one flat search serves every row: a dense
    # (batch, longest text) table grew with the batch times its longest text.
    base = tf.cumsum(tf.cast(tf.strings.length(text), tf.int64), exclusive=True)  # each text's first byte
    starts = tf.cast(char_starts.flat_values, tf.int64) + tf.gather(base, char_starts.value_rowids())  # sorted
    row = byte_offsets.value_rowids()
    offsets = tf.cast(byte_offsets.flat_values, tf.int64) + tf.gather(base, row)
    counted = tf.searchsorted(starts[None], offsets[None], side="left", out_type=tf.int64)[0]  # chars before
    return byte_offsets.with_flat_values(counted - tf.gather(char_starts.row_starts(), row))


def check_utf8(text: tf.Tensor, name: str) -> tf.Tensor:
    """`text` after an assertion that each string is valid UTF-8: a clear InvalidArgumentError
    naming the input (`name`) instead of a kernel's message from deep inside the graph."""
    repaired = tf.strings.unicode_transcode(text, "UTF-8", "UTF-8", errors="replace", replacement_char=0xFFFD)
    valid = tf.reduce_all(tf.equal(repaired, text))
    with tf.control_dependencies([tf.debugging.Assert(valid, [f"the {name} input is not valid UTF-8"])]):
        return tf.identity(text)
