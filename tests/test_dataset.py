"""Packing, masking in tf.data and TFRecord shards."""

import subprocess
import sys

import numpy as np
import pytest
import tensorflow as tf

from kerasbert.packing import make_packer
from kerasbert.pretraining.dataset import (examples_dataset, heldout_dataset,
                                           pretraining_dataset, tfrecord_dataset, write_tfrecords)
from kerasbert.pretraining.masking import Masker

IDS = {"pad": 0, "cls": 2, "sep": 3, "mask": 4}
EXAMPLES = [
    dict(segment_a=[10, 11, 12], segment_b=[20, 21], nsp_label=1, nsp_weight=1.0),
    dict(segment_a=[13, 14], segment_b=[], nsp_label=0, nsp_weight=0.0),
    dict(segment_a=list(range(30, 50)), segment_b=list(range(60, 80)), nsp_label=0, nsp_weight=1.0),
]


def batches(examples, seq, batch_size=3):
    masker = Masker(100, IDS["mask"], [0, 2, 3], mask_selection_length=8)
    data = pretraining_dataset(examples_dataset(examples), make_packer(seq, IDS), masker,
                               batch_size, IDS["pad"], shuffle_buffer=0, repeat=False)
    x, y, w = next(iter(data))
    # Put the labels back at the masked positions: that must give the packed input.
    ids = x["token_ids"].numpy().copy()
    for row, (positions, labels, weights) in enumerate(zip(
            x["mask_positions"].numpy(), y["mlm"].numpy(), w["mlm"].numpy())):
        ids[row, positions[weights > 0]] = labels[weights > 0]
    x = {**x, "token_ids": tf.constant(ids)}
    return x, y, w


def test_packing_segments_separators_and_padding():
    x, y, w = batches(EXAMPLES, seq=12)
    ids, segments, padding = (x[k].numpy() for k in ("token_ids", "segment_ids", "padding_mask"))
    assert ids[0].tolist() == [2, 10, 11, 12, 3, 20, 21, 3, 0, 0, 0, 0]
    assert segments[0].tolist() == [0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0]
    assert padding[0].tolist() == [1] * 8 + [0] * 4
    # A single-segment example ends with one [SEP] and is all segment 0.
    assert ids[1].tolist() == [2, 13, 14, 3] + [0] * 8
    assert segments[1].tolist() == [0] * 12
    assert y["nsp"].numpy().tolist() == [1, 0, 0]
    assert w["nsp"].numpy().tolist() == [1.0, 0.0, 1.0]
    assert x["padding_mask"].dtype == tf.int32  # numeric for MirroredStrategy


def test_truncates_pairs_to_max_sequence_length():
    x, _, _ = batches(EXAMPLES, seq=10)
    ids, segments = x["token_ids"].numpy()[2], x["segment_ids"].numpy()[2]
    assert len(ids) == 10 and ids[0] == 2 and ids[-1] == 3
    assert np.sum(ids == 3) == 2 and set(segments.tolist()) == {0, 1}


def test_masking_is_dynamic_across_epochs():
    tf.random.set_seed(0)
    masker = Masker(100, IDS["mask"], [0, 2, 3], mask_selection_length=8)
    data = pretraining_dataset(examples_dataset(EXAMPLES * 20), make_packer(48, IDS), masker, 60,
                               IDS["pad"], shuffle_buffer=0, repeat=True)
    first, second = [x["mask_positions"].numpy() for x, _, _ in data.take(2)]
    assert not np.array_equal(first, second)


@pytest.mark.end_to_end
def test_heldout_masks_are_the_same_in_every_build_on_a_busy_machine():
    # A busy process makes the threads interleave: rows masked in parallel (a map_fn in
    # keras-hub's mask generator, parallel tf.data calls) drew their masks in a different order
    # from one build to the next.
    examples = [dict(segment_a=list(range(10 + i % 7, 30)), segment_b=list(range(40, 50 + i % 5)),
                     nsp_label=i % 2, nsp_weight=1.0) for i in range(32)]
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        masks = set()
        for _ in range(4):
            tf.random.set_seed(0)
            masker = Masker(100, IDS["mask"], [0, 2, 3], mask_selection_length=8, seed=0)
            data = heldout_dataset(examples_dataset(examples), make_packer(48, IDS), masker, 8,
                                   IDS["pad"])
            masks.add(b"".join(x["mask_positions"].numpy().tobytes() for x, _, _ in data))
    finally:
        busy.kill()
        busy.wait()
    assert len(masks) == 1


def test_heldout_batches_are_counted_and_the_same_in_every_pass():
    # Held in memory: Keras knows when evaluation ends, and each block scores the same batches.
    masker = Masker(100, IDS["mask"], [0, 2, 3], mask_selection_length=8, seed=0)
    data = heldout_dataset(examples_dataset(EXAMPLES * 3), make_packer(48, IDS), masker, 4, IDS["pad"])
    assert int(data.cardinality()) == 2  # 9 examples: two whole batches of 4
    first, second = ([x["token_ids"].numpy() for x, _, _ in data] for _ in range(2))
    assert len(first) == 2 and all(np.array_equal(a, b) for a, b in zip(first, second))
    with pytest.raises(ValueError, match="fewer examples than one batch of 16"):
        heldout_dataset(examples_dataset(EXAMPLES), make_packer(48, IDS), masker, 16, IDS["pad"])


def test_tfrecord_shards_round_trip(tmp_path):
    paths = write_tfrecords(EXAMPLES, str(tmp_path), num_shards=2)
    assert all(p.endswith(".tfrecord") for p in paths)
    read = sorted(tfrecord_dataset(str(tmp_path), seed=0, shuffle_files=False).as_numpy_iterator(),
                  key=lambda e: e["segment_a"][0])
    assert [e["segment_a"].tolist() for e in read] == [e["segment_a"] for e in EXAMPLES]
    assert [e["segment_b"].tolist() for e in read] == [e["segment_b"] for e in EXAMPLES]
    assert [float(e["nsp_weight"]) for e in read] == [1.0, 0.0, 1.0]
