"""kerasbert's dense packer (fine-tuning and the export) against keras-hub's MultiSegmentPacker."""

import numpy as np
import pytest
import tensorflow as tf

from kerasbert.finetuning.data import TaskPreprocessor
from kerasbert.packing import make_packer, pack_segments, stack_sides
from kerasbert.tokenization import make_tokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(40)]


def random_segment(rng, rows: int, longest: int) -> tf.RaggedTensor:
    lengths = rng.integers(0, longest + 1, rows)
    return tf.ragged.constant([rng.integers(5, len(VOCAB), n).tolist() for n in lengths], dtype=tf.int32,
                              ragged_rank=1)


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("sequence_length", [5, 8, 16, 64])
@pytest.mark.parametrize("trim", [True, False])
def test_dense_packer_matches_keras_hub_packer(count, sequence_length, trim):
    preprocessor = TaskPreprocessor(make_tokenizer(VOCAB), sequence_length, trim=trim)
    packer = make_packer(sequence_length, preprocessor.ids)
    rng = np.random.default_rng(sequence_length * 10 + count)
    for trial in range(20):
        rows = int(rng.integers(1, 6))
        longest = int(rng.integers(0, 2 * sequence_length))
        segments = [random_segment(rng, rows, longest) for _ in range(count)]
        token_ids, segment_ids = packer(tuple(segments))
        expected = {"token_ids": token_ids, "segment_ids": segment_ids,
                    "padding_mask": tf.cast(token_ids != preprocessor.ids["pad"], tf.int32)}
        if trim:  # to the longest row, as TaskPreprocessor(trim=True) packs for training
            width = max(int(tf.reduce_max(tf.reduce_sum(expected["padding_mask"], axis=1))), 1)
            expected = {key: value[:, :width] for key, value in expected.items()}
        packed = preprocessor.pack_tokens(*segments)
        for key in ("token_ids", "segment_ids", "padding_mask"):
            assert packed[key].dtype == tf.int32
            np.testing.assert_array_equal(packed[key].numpy(), expected[key].numpy(),
                                          err_msg=f"{key}, trial {trial}")


def test_dense_packer_traces_small():
    """The point of the dense packer: a small graph without assertion branches."""
    spec = tf.RaggedTensorSpec([None, None], tf.int32, ragged_rank=1, row_splits_dtype=tf.int64)
    ids = {"cls": 2, "sep": 3, "pad": 0}
    graph = tf.function(lambda a, b: pack_segments([a, b], 128, ids)).get_concrete_function(spec, spec).graph
    ops = [op.type for op in graph.get_operations()]
    assert len(ops) < 200 and "Assert" not in ops and "If" not in ops, (len(ops), sorted(set(ops)))


def test_more_than_two_segments_is_an_error():
    segment = tf.ragged.constant([[5]], dtype=tf.int32)
    with pytest.raises(ValueError, match="one or two segments"):
        pack_segments([segment] * 3, 8, {"cls": 2, "sep": 3, "pad": 0})


def test_stacked_sides_keep_each_sides_rows_and_split_back():
    ids = {"cls": 2, "sep": 3, "pad": 0}
    a = pack_segments([tf.ragged.constant([[5, 6, 7], [8]], dtype=tf.int32)], 16, ids)  # width 5
    b = pack_segments([tf.ragged.constant([[9]], dtype=tf.int32)], 16, ids)  # another size, width 3
    both, sizes = stack_sides(a, b)
    assert both["token_ids"].numpy().tolist() == [[2, 5, 6, 7, 3], [2, 8, 3, 0, 0], [2, 9, 3, 0, 0]]
    assert both["padding_mask"].numpy().sum(axis=1).tolist() == [5, 3, 3]
    first, second = tf.split(both["segment_ids"], sizes)
    assert first.shape == (2, 5) and second.shape == (1, 5)
