"""The export's dense packer against keras-hub's MultiSegmentPacker (what training uses)."""

import numpy as np
import pytest
import tensorflow as tf

from kerasbert.finetuning.data import TaskPreprocessor
from kerasbert.packing import pack_segments
from kerasbert.tokenization import make_tokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"] + [f"w{i}" for i in range(40)]


def random_segment(rng, rows: int, longest: int) -> tf.RaggedTensor:
    lengths = rng.integers(0, longest + 1, rows)
    return tf.ragged.constant([rng.integers(5, len(VOCAB), n).tolist() for n in lengths], dtype=tf.int32,
                              ragged_rank=1)


@pytest.mark.parametrize("count", [1, 2])
@pytest.mark.parametrize("sequence_length", [5, 8, 16, 64])
def test_dense_packer_matches_keras_hub_packer(count, sequence_length):
    preprocessor = TaskPreprocessor(make_tokenizer(VOCAB), sequence_length)
    rng = np.random.default_rng(sequence_length * 10 + count)
    for trial in range(20):
        rows = int(rng.integers(1, 6))
        longest = int(rng.integers(0, 2 * sequence_length))
        segments = [random_segment(rng, rows, longest) for _ in range(count)]
        expected = preprocessor.pack_tokens(*segments)
        packed = pack_segments(segments, sequence_length, preprocessor.ids)
        for key in ("token_ids", "segment_ids", "padding_mask"):
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
