"""The token-tagging family (named entities on CoNLL-2003): features, model, loss, scores.

Words are what `str.split()` gives, as CoNLL files are split (`WORD_SEPARATOR`: every Unicode
space separates words; a zero-width joiner does not, so `Jon\\u200dAiko` and an emoji sequence
are one word each), or, for a task declared with `words="punctuation"` (imported transformers
taggers), BERT's basic tokenizer's words (punctuation and CJK characters are words of their own:
`U.S.` is four, as transformers' token-classification pipeline reads it). Each word is
tokenized on its own; each word's tag is predicted from its first word piece, the other pieces (and [CLS], [SEP], padding) are left out of the loss
(label -1), as BERT's paper and `run_ner.py` do. Opening brackets and quotes a word starts
with are passed over (`"Paris` is tagged from `paris`, as `pipeline("token-classification")`,
which splits them off, would tag it); CoNLL-2003 splits them off its words itself. A
sentence longer than the sequence is cut after `sequence_length - 2` word pieces: its later
words get no tag, and they are counted (`TaggingFeatures.untagged_words`, and
`num_untagged_words` in the export), never dropped silently. The words are found by one
graph function (`TaggingGraph.align`) in training and in the exported signature, so both
tokenize alike.

Interface for the task system (plain values in, no config objects):
    reader:    kerasbert.families.tagging.conll.read_conll(path) -> ConllFile(.sentences: [Sentence(words, tags, line)])
    tags:      kerasbert.families.tagging.conll.tag_names(train_sentences) -> ("O", "B-LOC", "I-LOC", ...)
    graph:     TaggingGraph(vocabulary, tag_names, sequence_length, words="spaces")
    features:  tagging_features(graph, sentences) -> TaggingFeatures (numpy arrays, counts):
               token_ids, segment_ids, padding_mask, and labels int32 (examples, sequence_length):
               the tag id at each word's first piece, -1 elsewhere
    loss:      masked_tag_loss(y, logits)  (mean over labelled tokens)
    predict:   predict_tags(entities, sentences) -> [[tag per word]] (through the export's graph)
    metrics:   kerasbert.families.tagging.conlleval.entity_scores(references, predictions).as_dict() -> {"ner_f1", ...}
    export:    kerasbert.families.tagging.export.TaggingSignatures(predict, graph): `entities` (text)
               and its token-id variant; see that module.

The task system (a task of kind `tags`, kerasbert/tasks.py) trains it: its batches
(`kerasbert.finetuning.data.family_dataset`) and head (`MultitaskBert`) beside the other tasks'.

Example:
    >>> from kerasbert.families.tagging.conll import read_conll, tag_names
    >>> sentences = read_conll(conll_file).sentences
    >>> graph = TaggingGraph(vocabulary, tag_names(sentences), sequence_length=16)
    >>> graph.tag_names
    ('O', 'B-ANIMAL', 'I-ANIMAL', 'B-LOC', 'I-LOC')
    >>> features = tagging_features(graph, sentences)
    >>> features.labels[:, :6].tolist()  # each word's tag at its first piece, -1 elsewhere
    [[-1, 0, 1, 0, -1, -1], [-1, 1, -1, 0, 0, 0]]
    >>> masked_tag_loss(features.labels, tf.zeros([2, 16, 5]))  # logits (batch, seq, tags)
    <tf.Tensor: shape=(), dtype=float32, numpy=1.6094379425048828>
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

from kerasbert.compat.keras_hub import word_split_patterns
from kerasbert.families.tagging.conll import Sentence, check_tag
from kerasbert.families.wordpiece import OffsetTokenizer
from kerasbert.packing import ENCODER_KEYS, pack_segments
from kerasbert.tokenization import special_token_ids

log = logging.getLogger(__name__)
IGNORED = -1  # the label of tokens left out of the loss
# What separates words (RE2): exactly the characters str.split() splits on, which CoNLL files
# are split with: tab to carriage return, the separators U+001C-U+001F and U+0085, and every
# Unicode space (Zs, Zl, Zp: space, no-break space, ideographic space, ...). Format characters
# (the zero-width joiner of emoji sequences and some names, soft hyphens) are inside a word.
WORD_SEPARATOR = r"[\t-\r\x{1C}-\x{1F}\x{85}\p{Z}]"
# `TaggingGraph`'s word splits: (delimiters, the delimiters kept as words), RE2.
WORD_PATTERNS = {"spaces": (WORD_SEPARATOR, ""), "punctuation": word_split_patterns()}
OPENING_MARKS = "([{\"“”‘„‚«»‹›`"  # a piece of one of these characters is passed over when a word starts with it


class TaggingGraph(tf.Module):
    """The graph pieces shared by training features and the export: text -> words with
    their byte spans, packed token tensors, and each word's first-piece position.

    `tag_names` start with "O" (the tag of an untagged word); the others are IOB2 tags.

    Example:
        >>> graph = TaggingGraph(vocabulary, ("O", "B-ANIMAL", "I-ANIMAL"), sequence_length=16)
        >>> graph.align(tf.constant(["the cats sat"]))["first_token"].to_list()
        [[1, 2, 4]]
    """

    def __init__(self, vocabulary: list[str], tag_names, sequence_length: int, words: str = "spaces"):
        super().__init__(name="tagging_graph")
        if words not in WORD_PATTERNS:
            raise ValueError(f"words must be one of {sorted(WORD_PATTERNS)}. Received: {words!r}")
        tag_names = tuple(tag_names)
        if not tag_names or tag_names[0] != "O":
            raise ValueError(f"tag_names must start with 'O'. Received: {tag_names}")
        for tag in tag_names:
            check_tag(tag)
        if sequence_length < 3:
            raise ValueError(f"sequence_length must be at least 3. Received: {sequence_length}")
        self.tag_names, self.sequence_length, self.words = tag_names, sequence_length, words
        self.tokenizer = OffsetTokenizer(vocabulary)
        self.ids = special_token_ids(vocabulary)

    def align(self, text: tf.Tensor, words: str = "") -> dict:
        """string (batch,) -> `words`, `word_starts`, `word_ends` (byte offsets), `first_token`
        (the packed position of each word's first piece; -1 past the sequence), all ragged
        (batch, words); and the packed `token_ids`, `segment_ids`, `padding_mask` (batch, width).
        `words`: how the text is split into words ("spaces", "punctuation"; "" = the graph's)."""
        words, word_starts, word_ends = tf_text.regex_split_with_offsets(
            text, *WORD_PATTERNS[words or self.words])  # (batch, words)
        ids, starts, ends = self.tokenizer.tokenize_with_offsets(words.flat_values)  # (all words, pieces)
        word = ids.value_rowids()  # each piece's word, (all pieces,)
        opening = opening_pieces(words.flat_values, starts, ends)  # (all pieces,)
        splits = tf.gather(ids.row_splits, words.row_splits)  # each text's first piece, (batch + 1,)
        text_ids = tf.RaggedTensor.from_row_splits(ids.flat_values, splits, validate=False)  # (batch, pieces)
        packed = pack_segments([text_ids], self.sequence_length, self.ids)
        row = tf.gather(words.value_rowids(), word)  # each piece's text
        position = tf.range(tf.shape(word, out_type=tf.int64)[0]) - tf.gather(splits, row)  # in its text
        kept = position < self.sequence_length - 2  # the pieces that fit
        # One segment per word; pieces past the cut go to a spare last segment.
        count = tf.shape(words.flat_values, out_type=tf.int64)[0]
        first = tf.math.unsorted_segment_min(position + 1, tf.where(kept, word, count), count + 1)[:-1]  # +1: [CLS]
        # A word's first piece that is not an opening mark, where it has one.
        first_text = tf.math.unsorted_segment_min(position + 1, tf.where(kept & ~opening, word, count),
                                                  count + 1)[:-1]
        first = tf.where(first_text <= self.sequence_length, first_text, first)
        first = tf.where(first > self.sequence_length, tf.constant(-1, tf.int64), first)  # no piece kept
        return {"words": words, "word_starts": word_starts, "word_ends": word_ends,
                "first_token": words.with_flat_values(first), **packed}


def opening_pieces(words: tf.Tensor, starts: tf.RaggedTensor, ends: tf.RaggedTensor) -> tf.Tensor:
    """Whether each piece is exactly one of OPENING_MARKS: words string (words,), the pieces'
    byte spans in them, ragged (words, pieces) -> bool (all pieces,).

    Read from the words' code points at byte offsets of the words laid end to end, never by
    cutting a piece's text out of its word: a copy of the word per piece grew with the square
    of a word's length (100 kB of "a,a,a,...": +1.7 GiB).

    Example:
        >>> opening_pieces(tf.constant(["(paris", "“x"]), tf.ragged.constant([[0, 1], [0, 3]], tf.int64),
        ...                tf.ragged.constant([[1, 6], [3, 4]], tf.int64)).numpy().tolist()
        [True, False, True, False]
    """
    codes, char_starts = tf.strings.unicode_decode_with_offsets(words, "UTF-8")  # (words, chars)
    base = tf.cumsum(tf.cast(tf.strings.length(words), tf.int64), exclusive=True)  # each word's first byte
    char_start = char_starts.flat_values + tf.gather(base, char_starts.value_rowids())  # (all chars,) sorted
    char_end = tf.concat([char_start[1:], tf.reduce_sum(tf.cast(tf.strings.length(words), tf.int64))[None]], 0)
    piece_base = tf.gather(base, starts.value_rowids())
    piece_start, piece_end = starts.flat_values + piece_base, ends.flat_values + piece_base  # (all pieces,)
    char = tf.searchsorted(char_start[None], piece_start[None], out_type=tf.int64)[0]  # the piece's first char
    char = tf.minimum(char, tf.maximum(tf.size(char_start, out_type=tf.int64) - 1, 0))
    marks = tf.constant([ord(mark) for mark in OPENING_MARKS], tf.int32)
    is_mark = tf.reduce_any(tf.gather(codes.flat_values, char)[:, None] == marks[None, :], axis=1)
    return is_mark & (tf.gather(char_start, char) == piece_start) & (tf.gather(char_end, char) == piece_end)


@dataclasses.dataclass(frozen=True)
class TaggingFeatures:
    token_ids: np.ndarray  # int32 (examples, sequence_length)
    segment_ids: np.ndarray
    padding_mask: np.ndarray
    labels: np.ndarray  # int32 (examples, sequence_length): tag id at first pieces, -1 elsewhere
    untagged_words: int  # words past the sequence (or without a word piece): no label
    skipped: int  # sentences whose words `align` splits differently (a word holding a space: built in Python)


def tagging_features(graph: TaggingGraph, sentences: list[Sentence], batch_size: int = 512) -> TaggingFeatures:
    """Packed tokens and first-piece labels of `sentences` (joined with spaces, then aligned
    by the export's own graph function). Logs how many words got no label."""
    tag_ids = {tag: i for i, tag in enumerate(graph.tag_names)}
    length = graph.sequence_length
    rows = {name: [] for name in (*ENCODER_KEYS, "labels")}
    untagged = skipped = 0
    for begin in range(0, len(sentences), batch_size):
        chunk = sentences[begin:begin + batch_size]
        aligned = graph.align(tf.constant([" ".join(sentence.words) for sentence in chunk]), words="spaces")
        packed = [aligned[key].numpy() for key in ENCODER_KEYS]
        for row, (sentence, first) in enumerate(zip(chunk, aligned["first_token"].to_list())):
            unknown = [tag for tag in sentence.tags if tag not in tag_ids]
            if unknown:
                raise ValueError(f"line {sentence.line}: tag(s) {sorted(set(unknown))} not among the task's tags "
                                 f"{graph.tag_names}")
            if len(first) != len(sentence.words):
                skipped += 1
                continue
            labels = np.full(length, IGNORED, np.int32)
            for position, tag in zip(first, sentence.tags):
                if position >= 0:
                    labels[position] = tag_ids[tag]
            untagged += sum(position < 0 for position in first)
            for key, values in zip(ENCODER_KEYS, packed):
                rows[key].append(np.pad(values[row], (0, length - values.shape[1])).astype(np.int32))
            rows["labels"].append(labels)
    if untagged or skipped:
        log.warning("tagging features: %d words past %d word pieces got no label; %d sentences skipped "
                    "(a word holding a space, which splits it in two)", untagged, length - 2, skipped)
    arrays = {key: np.stack(values) if values else np.zeros((0, length), np.int32) for key, values in rows.items()}
    return TaggingFeatures(**arrays, untagged_words=untagged, skipped=skipped)


def masked_tag_loss(labels, logits):
    """Cross-entropy averaged over labelled tokens only (label -1 is left out): padding and
    continuation pieces neither add loss nor dilute it."""
    labels = tf.cast(labels, tf.int32)
    weights = tf.cast(labels != IGNORED, tf.float32)
    losses = tf.nn.sparse_softmax_cross_entropy_with_logits(tf.maximum(labels, 0), tf.cast(logits, tf.float32))
    return tf.reduce_sum(losses * weights) / tf.maximum(tf.reduce_sum(weights), 1.0)


def predict_tags(entities, sentences: list[Sentence], batch_size: int = 64) -> list[list[str]]:
    """Each sentence's predicted tag per word, through the export's `entities` function
    (`TaggingSignatures.entities`, or a loaded SavedModel's signature). A word's tag is that of
    the first served word inside it that is not an opening mark (under `words="punctuation"`,
    `U.S.` is served as four words and tagged as `U`); an untagged word is "O"."""
    predicted = []
    for begin in range(0, len(sentences), batch_size):
        chunk = sentences[begin:begin + batch_size]
        outputs = {key: np.asarray(value) for key, value in
                   entities(text=tf.constant([" ".join(sentence.words) for sentence in chunk])).items()
                   if key in ("word", "word_tag", "word_start", "num_words")}
        for row, sentence in enumerate(chunk):
            starts = np.cumsum([0] + [len(word) + 1 for word in sentence.words[:-1]])  # each word's first char
            tags = {}  # word index -> (served word is an opening mark, its tag)
            for served in range(int(outputs["num_words"][row])):
                word = int(np.searchsorted(starts, outputs["word_start"][row, served], side="right")) - 1
                opening = set(outputs["word"][row, served].decode()) <= set(OPENING_MARKS)
                if word not in tags or (tags[word][0] and not opening):
                    tags[word] = (opening, outputs["word_tag"][row, served].decode())
            predicted.append([tags.get(word, (False, ""))[1] or "O" for word in range(len(sentence.words))])
    return predicted
