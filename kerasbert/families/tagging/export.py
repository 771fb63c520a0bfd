"""The tagging family's serving signatures: raw text in, entities with character offsets out.

    entities(text: string (batch,)) ->
        entity_text   string  (batch, n)   "" past num_entities
        entity_type   string  (batch, n)   e.g. "PER"; ""
        entity_start  int64   (batch, n)   character offset into text; -1
        entity_end    int64   (batch, n)   exclusive: text[start:end] == entity_text; -1
        entity_score  float32 (batch, n)   mean probability of the entity's word tags; 0
        num_entities  int64   (batch,)
        word, word_tag          string (batch, w)  the whitespace words and their tags ("" past num_words,
                                                   and for words past the sequence: untagged)
        word_start, word_end    int64  (batch, w)  character offsets; -1
        num_words, num_untagged_words  int64 (batch,)
    entities_tokens(token_ids, segment_ids, padding_mask: int32 (batch, seq)) ->
        tag string (batch, seq), tag_id int64 (batch, seq), tag_score float32 (batch, seq)

(named by the task's head: `entities` and `entities_tokens` for the shipped `ner`).

n is the batch's largest entity count. Entities are read from the word tags with
conlleval's rules (`kerasbert.families.tagging.conlleval.entities`): the same entities the metrics
score. Words are what str.split() gives, as CoNLL's (`kerasbert.families.tagging.features.WORD_SEPARATOR`);
an entity's text leaves out the punctuation a tokenizer splits off ("(Reuters)," -> "Reuters";
"in Paris." at the end -> "Paris": `trimmed`).
Text that is not valid UTF-8 is an InvalidArgumentError naming the input.

Example:
    >>> import functools
    >>> graph = preprocessor.graph_of(model.task_specs["ner"])  # a TaggingGraph
    >>> signatures = TaggingSignatures(functools.partial(model.head_output, "ner"), graph)
    >>> outputs = signatures.entities(tf.constant(["The cat sat on the mat."]))
    >>> outputs["word"]
    <tf.Tensor: shape=(1, 6), dtype=string, numpy=array([[b'The', b'cat', b'sat', b'on', b'the', b'mat.']], dtype=object)>
    >>> outputs["entity_text"].shape  # (batch, n): this tiny random model's entities
    TensorShape([1, 5])
    >>> sorted(signatures.functions("entities"))  # {name: (function, input signature)}, for kerasbert.export
    ['entities', 'entities_tokens']
"""

from __future__ import annotations

import tensorflow as tf

from kerasbert.families.tagging.features import TaggingGraph
from kerasbert.families.wordpiece import GRAPH_BYTES_PER_BYTE, char_offsets, check_utf8
from kerasbert.packing import ENCODER_KEYS

TEXT = tf.TensorSpec([None], tf.string, name="text")
TOKENS = [tf.TensorSpec([None, None], tf.int32, name=key) for key in ENCODER_KEYS]
# Punctuation around a name that a tokenizer splits off (words here are what str.split() gives):
# opening brackets and quotes before it; closing ones, , ; : ! ? after it; and a full stop when
# the entity ends the text ("in Paris." -> "Paris"), as Penn Treebank tokenizers split it.
OPENING = "^[(\\[{\"'“”‘’„‚«»‹›]+"
CLOSING = "[)\\]}\"'“”‘’»«›‹,;:!?]+$"
CLOSING_AT_END = "[)\\]}\"'“”‘’»«›‹,;:!?.]+$"


def trimmed(first_word: tf.Tensor, last_word: tf.Tensor, start_byte: tf.Tensor, end_byte: tf.Tensor,
            ends_text: tf.Tensor, second_start: tf.Tensor, penultimate_end: tf.Tensor):
    """Byte spans (start, end) of entities (all (entities,)) without the punctuation around the
    name (OPENING, CLOSING; CLOSING_AT_END where `ends_text`); a span of punctuation only is
    kept whole. Read from each entity's first and last word (the same word for an entity of
    one word, whose span is then that word's): a separator between two words is neither
    opening nor closing, so trimming never reaches past them, and no entity copies its text.
    An edge word of punctuation only ("New York ," as three words) goes with the separator
    before it: the span ends where the word before it ends (`penultimate_end`), or starts
    where the word after the first starts (`second_start`).

    Example:
        >>> words = tf.constant(["(Reuters)", "Paris.", "U.S.", "!!"])  # one word each: its own span
        >>> starts, ends = tf.constant([0, 0, 0, 0], tf.int64), tf.constant([9, 6, 4, 2], tf.int64)
        >>> trimmed(words, words, starts, ends, tf.constant([False, True, False, True]), starts, ends)[0].numpy().tolist()
        [1, 0, 0, 0]
        >>> [span.numpy().tolist() for span in trimmed(  # starts, then ends: "( Paris" -> "Paris", "New York ," -> "New York"
        ...     tf.constant(["(", "New"]), tf.constant(["Paris", ","]), tf.constant([0, 0], tf.int64),
        ...     tf.constant([7, 10], tf.int64), tf.constant([True, True]), tf.constant([2, 4], tf.int64),
        ...     tf.constant([1, 8], tf.int64))]
        [[2, 0], [7, 8]]
    """
    def size(strings):
        return tf.cast(tf.strings.length(strings, unit="BYTE"), tf.int64)

    single = end_byte - start_byte == size(first_word)  # a longer span holds a separator too
    opened = tf.strings.regex_replace(first_word, OPENING, "")
    tail = tf.where(single, opened, last_word)
    closed = tf.where(ends_text, tf.strings.regex_replace(tail, CLOSING_AT_END, ""),
                      tf.strings.regex_replace(tail, CLOSING, ""))
    lead, trail = size(first_word) - size(opened), size(tail) - size(closed)
    name = ~single | (size(closed) > 0)
    start, end = tf.where(name, start_byte + lead, start_byte), tf.where(name, end_byte - trail, end_byte)
    start = tf.where(~single & (size(opened) == 0), second_start, start)  # past the separator too
    end = tf.where(~single & (size(closed) == 0), penultimate_end, end)
    whole = start >= end  # two words of punctuation only: kept whole
    return tf.where(whole, start_byte, start), tf.where(whole, end_byte, end)


def substrings(text: tf.Tensor, row: tf.Tensor, start_char: tf.Tensor, end_char: tf.Tensor) -> tf.Tensor:
    """text[row][start_char:end_char] for each span (all (spans,); character offsets), from the
    texts' code points: each span costs its own length, never a copy of its row.

    Example:
        >>> substrings(tf.constant(["né b", "x"]), tf.constant([0, 1], tf.int64), tf.constant([1, 0], tf.int64),
        ...            tf.constant([4, 1], tf.int64)).numpy().tolist()
        [b'\xc3\xa9 b', b'x']
    """
    codes = tf.strings.unicode_decode(text, "UTF-8")  # (batch, chars)
    first = tf.gather(codes.row_starts(), row)
    return tf.strings.unicode_encode(tf.gather(codes.flat_values, tf.ragged.range(first + start_char,
                                                                                  first + end_char)), "UTF-8")


def tag_tables(tag_names: tuple[str, ...]):
    """Per tag id: its IOB prefix (0 O, 1 B, 2 I), its type id (-1 for O), and the type names."""
    types = sorted({tag[2:] for tag in tag_names if tag != "O"})
    prefix = [0 if tag == "O" else (1 if tag.startswith("B-") else 2) for tag in tag_names]
    kind = [-1 if tag == "O" else types.index(tag[2:]) for tag in tag_names]
    return tf.constant(prefix, tf.int32), tf.constant(kind, tf.int32), tf.constant(types or [""])


def entity_spans(tag_ids: tf.Tensor, word_scores: tf.Tensor, prefix: tf.Tensor, kind: tf.Tensor):
    """Word tag ids (batch, W) -> entities as conlleval reads them: `row`, `first_word`,
    `last_word`, `kind`, `score` (each (entities,), rows in order) and `count` (batch,).

    An entity starts at B-X, at I-X after O, or where the type changes; it runs while the
    words are I- of its type.
    """
    word_prefix, word_kind = tf.gather(prefix, tag_ids), tf.gather(kind, tag_ids)  # (batch, W)
    previous_prefix = tf.pad(word_prefix[:, :-1], [[0, 0], [1, 0]])  # O before the first word
    previous_kind = tf.pad(word_kind[:, :-1], [[0, 0], [1, 0]], constant_values=-1)
    inside = word_prefix != 0
    starts = inside & ((word_prefix == 1) | (previous_prefix == 0) | (previous_kind != word_kind))
    count = tf.reduce_sum(tf.cast(starts, tf.int64), axis=1)  # (batch,)
    total = tf.reduce_sum(count)
    # Each inside word's entity, numbered across the batch; outside words go to a spare segment.
    entity = tf.cumsum(tf.cast(starts, tf.int64), axis=1) - 1 + (tf.cumsum(count, exclusive=True))[:, tf.newaxis]
    segment = tf.where(inside, entity, total)
    word = tf.broadcast_to(tf.range(tf.shape(tag_ids, out_type=tf.int64)[1]), tf.shape(segment))
    segments = total + 1
    return {
        "row": tf.repeat(tf.range(tf.shape(count, out_type=tf.int64)[0]), count),
        "first_word": tf.math.unsorted_segment_min(word, segment, segments)[:-1],
        "last_word": tf.math.unsorted_segment_max(word, segment, segments)[:-1],
        "kind": tf.math.unsorted_segment_max(word_kind, segment, segments)[:-1],
        "score": tf.math.unsorted_segment_mean(word_scores, segment, segments)[:-1],
        "count": count,
    }


class TaggingSignatures:
    """The serving functions of a tags head: `predict` (token tensors {token_ids, segment_ids,
    padding_mask} -> tag logits (batch, seq, tags), e.g. `MultitaskBert.head_output` of the
    task) and its `TaggingGraph`. Holds no variables: the caller's export tracks the model
    and the graph (whose tokenizer tables the functions use)."""

    def __init__(self, predict, graph: TaggingGraph):
        self.predict, self.graph = predict, graph
        self._prefix, self._kind, self._types = tag_tables(graph.tag_names)
        self._tags = tf.constant(graph.tag_names)

    def functions(self, head: str = "entities") -> dict:
        """{name: (function, input signature)}: `head` (text) and `<head>_tokens`."""
        return {head: (self.entities, [TEXT]), f"{head}_tokens": (self.tags_tokens, TOKENS)}

    def row_costs(self, head: str = "entities") -> dict:
        """What a row of `head` costs, for assets.extra/row_costs.json (serving/row_costs.py): one
        window of the sequence, and the graph's memory per byte of the text."""
        length = self.graph.sequence_length
        return {head: {"text": {"graph_bytes_per_byte": GRAPH_BYTES_PER_BYTE, "sequence_length": length,
                                "room": length - 2, "doc_stride": length - 2, "max_windows": 1}}}

    def _probabilities(self, tokens: dict) -> tf.Tensor:
        logits = self.predict({key: tokens[key] for key in ENCODER_KEYS})
        return tf.nn.softmax(tf.cast(logits, tf.float32), axis=-1)  # (batch, seq, tags)

    def tags_tokens(self, token_ids, segment_ids, padding_mask):
        probabilities = self._probabilities(
            {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask})
        tag_id = tf.argmax(probabilities, axis=-1)  # (batch, seq)
        return {"tag": tf.gather(self._tags, tag_id), "tag_id": tag_id,
                "tag_score": tf.reduce_max(probabilities, axis=-1)}

    def entities(self, text):
        text = check_utf8(text, "text")
        aligned = self.graph.align(text)
        probabilities = self._probabilities(aligned)  # (batch, seq, tags)
        words = aligned["words"]  # ragged (batch, W)
        first = aligned["first_token"].flat_values  # (all words,)
        # Only the words within the sequence are looked up (at most seq - 2 a row); the
        # others stay untagged (tag id 0, "O"; no word_tag).
        tagged = tf.where(first >= 0)[:, 0]  # (tagged words,)
        word_probabilities = tf.gather_nd(probabilities, tf.stack([tf.gather(words.value_rowids(), tagged),
                                                                   tf.gather(first, tagged)], axis=1))
        flat_words = tf.shape(first, out_type=tf.int64)[:1]
        tag_ids = tf.scatter_nd(tagged[:, None], tf.argmax(word_probabilities, axis=-1, output_type=tf.int32),
                                flat_words)
        word_scores = tf.scatter_nd(tagged[:, None], tf.reduce_max(word_probabilities, axis=-1), flat_words)
        is_tagged = words.with_flat_values(first >= 0).to_tensor(default_value=False)  # (batch, W)
        spans = entity_spans(words.with_flat_values(tag_ids).to_tensor(), words.with_flat_values(word_scores)
                             .to_tensor(), self._prefix, self._kind)

        num_words = words.row_lengths()
        first_word = tf.gather(words.row_starts(), spans["row"]) + spans["first_word"]  # (entities,), flat
        last_word = tf.gather(words.row_starts(), spans["row"]) + spans["last_word"]
        word_starts, word_ends = aligned["word_starts"].flat_values, aligned["word_ends"].flat_values
        start_byte, end_byte = trimmed(tf.gather(words.flat_values, first_word), tf.gather(words.flat_values, last_word),
                                       tf.gather(word_starts, first_word), tf.gather(word_ends, last_word),
                                       spans["last_word"] == tf.gather(num_words, spans["row"]) - 1,
                                       tf.gather(word_starts, tf.minimum(first_word + 1, last_word)),
                                       tf.gather(word_ends, tf.maximum(last_word - 1, first_word)))

        def per_row(values):  # (entities,) -> ragged (batch, n)
            return tf.RaggedTensor.from_row_lengths(values, spans["count"], validate=False)

        start_char, end_char = char_offsets(text, per_row(start_byte)), char_offsets(text, per_row(end_byte))
        entity_text = substrings(text, spans["row"], start_char.flat_values, end_char.flat_values)
        return {
            "entity_text": per_row(entity_text).to_tensor(default_value=""),
            "entity_type": per_row(tf.gather(self._types, spans["kind"])).to_tensor(default_value=""),
            "entity_start": start_char.to_tensor(default_value=-1),
            "entity_end": end_char.to_tensor(default_value=-1),
            "entity_score": per_row(spans["score"]).to_tensor(default_value=0.0),
            "num_entities": spans["count"],
            "word": words.to_tensor(default_value=""),
            "word_tag": tf.where(is_tagged, tf.gather(self._tags, words.with_flat_values(tag_ids).to_tensor()), ""),
            "word_start": char_offsets(text, aligned["word_starts"]).to_tensor(default_value=-1),
            "word_end": char_offsets(text, aligned["word_ends"]).to_tensor(default_value=-1),
            "num_words": num_words,
            "num_untagged_words": num_words - tf.reduce_sum(tf.cast(is_tagged, tf.int64), axis=1),
        }
