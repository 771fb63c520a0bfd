"""BERT packing: keras-hub's packer (`make_packer`, for pretraining), and the same packing
in a few dense ops (`pack_segments`, for fine-tuning and serving graphs).

`pack_segments` gives the same `[CLS] a [SEP] (b [SEP])` token ids, segment ids and
padding mask as keras-hub's `MultiSegmentPacker(truncate="round_robin")` trimmed to the
longest row (tests/test_packing.py checks this on random batches). The packer's ragged
ops trace into about 3,900 graph nodes and 150 assertion branch functions. Every server
that loads the model has to rebuild those in Python, so they tripled the load time of a
new version; and fine-tuning traced them again for each task's training and dev data.
This version traces into about 100 nodes. Pretraining keeps keras-hub's packer: it packs
to one fixed length, and a run traces it in two datasets only (training and held-out).

Round-robin trimming of two segments to a budget of m tokens gives a
min(len_a, max(ceil(m / 2), m - len_b)) tokens and b what is left, up to len_b. This
matches tf_text's RoundRobinTrimmer, which hands out one token at a time in turn.

Example:
    >>> ids = {"cls": 2, "sep": 3, "pad": 0}
    >>> packed = pack_segments([tf.ragged.constant([[7, 8, 9]]), tf.ragged.constant([[5]])], 6, ids)
    >>> packed["token_ids"].numpy().tolist(), packed["segment_ids"].numpy().tolist()
    ([[2, 7, 8, 3, 5, 3]], [[0, 0, 0, 0, 1, 1]])
"""

from __future__ import annotations

import keras_hub
import tensorflow as tf

# The packed tensors an encoder takes, by name: token ids, segment ids, padding mask.
ENCODER_KEYS = ("token_ids", "segment_ids", "padding_mask")


def make_packer(sequence_length: int, ids: dict[str, int]) -> keras_hub.layers.MultiSegmentPacker:
    """keras-hub's `[CLS] a [SEP] (b [SEP])` packer, padded with `[PAD]`, trimmed round-robin."""
    return keras_hub.layers.MultiSegmentPacker(
        sequence_length=sequence_length, start_value=ids["cls"], end_value=ids["sep"],
        pad_value=ids["pad"], truncate="round_robin")



def round_robin_lengths(lengths: list[tf.Tensor], budget: int) -> list[tf.Tensor]:
    """How many tokens each of one or two segments keeps (int32, one per row)."""
    if len(lengths) == 1:
        return [tf.minimum(lengths[0], budget)]
    if len(lengths) != 2:
        raise ValueError(f"pack_segments takes one or two segments. Received: {len(lengths)}")
    a, b = lengths
    keep_a = tf.minimum(a, tf.maximum((budget + 1) // 2, budget - b))
    return [keep_a, tf.minimum(b, budget - keep_a)]


def pack_segments(segments: list[tf.RaggedTensor], sequence_length: int, ids: dict[str, int]) -> dict:
    """One or two ragged (batch, None) segments of token ids -> packed int32 (batch, width).

    width is the longest packed row, at most `sequence_length`.
    """
    budget = sequence_length - 1 - len(segments)  # [CLS] and one [SEP] per segment
    # One spare column, so that a batch of empty rows still has something to gather from; no
    # segment keeps more than `budget` tokens, so none is made dense past them (a long text
    # would make every row of its batch as wide).
    dense = [tf.pad(tf.cast(segment[:, :budget].to_tensor(default_value=ids["pad"]), tf.int32), [[0, 0], [0, 1]])
             for segment in segments]
    keep = round_robin_lengths([tf.cast(segment.row_lengths(), tf.int32) for segment in segments], budget)
    # Row layout: [CLS] at 0, then each segment's kept tokens followed by its [SEP].
    ends = tf.math.cumsum(tf.stack(keep, axis=1) + 1, axis=1) + 1  # (batch, segments): one past each [SEP]
    width = tf.maximum(tf.reduce_max(ends[:, -1]), 1)
    position = tf.zeros_like(ends[:, :1]) + tf.range(width)[tf.newaxis, :]  # (batch, width)
    token_ids = tf.where(position == 0, ids["cls"], ids["pad"])
    segment_ids = tf.zeros_like(token_ids)
    start = tf.ones_like(ends[:, :1])
    for index, values in enumerate(dense):
        end = ends[:, index:index + 1]
        offset = position - start
        inside = (offset >= 0) & (position < end - 1)
        gathered = tf.gather(values, tf.clip_by_value(offset, 0, tf.shape(values)[1] - 1), batch_dims=1)
        token_ids = tf.where(inside, gathered, token_ids)
        token_ids = tf.where(position == end - 1, ids["sep"], token_ids)
        if index:
            segment_ids = tf.where((position >= start) & (position < end), index, segment_ids)
        start = end
    padding_mask = tf.cast(position < ends[:, -1:], tf.int32)
    return {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask}


def stack_sides(first: dict, second: dict) -> tuple[dict, list]:
    """Two packed batches (a bi-encoder pair's sentences a and b) as one: `second`'s rows
    after `first`'s, each padded on the right to the wider one's width, so that an encoder
    embeds both in one call. Returns the batch and the sizes that split its output back.

    Example:
        >>> ids = {"cls": 2, "sep": 3, "pad": 0}
        >>> packed_a = pack_segments([tf.ragged.constant([[6, 8], [7]])], 4, ids)  # 2 rows, width 4
        >>> packed_b = pack_segments([tf.ragged.constant([[9, 10, 11]])], 5, ids)  # 1 row, width 5
        >>> both, sizes = stack_sides(packed_a, packed_b)
        >>> both["token_ids"].numpy().tolist(), [int(size) for size in sizes]
        ([[2, 6, 8, 3, 0], [2, 7, 3, 0, 0], [2, 9, 10, 11, 3]], [2, 1])
        >>> a, b = tf.split(both["padding_mask"], sizes)  # an encoder's output splits the same way
    """
    width = tf.maximum(tf.shape(first["token_ids"])[1], tf.shape(second["token_ids"])[1])

    def widened(tokens):  # (batch, w) -> (batch, width); 0 is padding in every key's mask
        return tf.pad(tokens, [[0, 0], [0, width - tf.shape(tokens)[1]]])

    both = {key: tf.concat([widened(first[key]), widened(second[key])], axis=0) for key in ENCODER_KEYS}
    return both, [tf.shape(first["token_ids"])[0], tf.shape(second["token_ids"])[0]]
