"""tf.data input pipeline for pretraining: examples -> packed, masked batches.

An *example* holds two unpacked segments of token ids (`segment_a`, `segment_b`;
`segment_b` empty for MLM-only examples), `nsp_label` and `nsp_weight`. Batches
are packed by keras-hub's `MultiSegmentPacker` (`[CLS] A [SEP] B [SEP]`, padded
with `[PAD]`) and masked afresh every time they are drawn, so each pass over the
data sees new masks. Examples can live in memory or in sharded TFRecords.

Each batch is Keras' `(x, y, sample_weight)`:
    x: token_ids, segment_ids, padding_mask, mask_positions      (batch, seq) / (batch, K)
    y: {"mlm": mask_ids (batch, K), "nsp": nsp_label (batch,)}
    sample_weight: {"mlm": mask_weights, "nsp": nsp_weight}

Example (`tokenizer`: a 15-token vocabulary; [CLS] 2, [SEP] 3, [PAD] 0):
    >>> from kerasbert.packing import make_packer
    >>> from kerasbert.pretraining.masking import Masker
    >>> pairs = [{"segment_a": [5, 6, 8], "segment_b": [5, 7, 9], "nsp_label": 1, "nsp_weight": 1.0},
    ...          {"segment_a": [6, 13], "segment_b": [11, 14], "nsp_label": 0, "nsp_weight": 1.0}]
    >>> packer = make_packer(10, {"cls": 2, "sep": 3, "pad": 0})
    >>> masker = Masker(vocabulary_size=15, mask_token_id=4, unselectable_token_ids=[0, 2, 3], mask_selection_length=3)
    >>> dataset = pretraining_dataset(examples_dataset(pairs), packer, masker, batch_size=2, pad_id=0)
    >>> x, y, w = next(iter(dataset))
    >>> x["token_ids"].shape, x["mask_positions"].shape, y["nsp"].shape
    (TensorShape([2, 10]), TensorShape([2, 3]), TensorShape([2]))

Held-out batches come from `heldout_dataset`: masked once, the same in every run.
"""

from __future__ import annotations

import glob
import os

import numpy as np
import tensorflow as tf

from kerasbert.errors import DataError


def _ragged(rows: list[list[int]]) -> tf.RaggedTensor:
    lengths = np.fromiter((len(r) for r in rows), dtype=np.int64, count=len(rows))
    flat = np.fromiter((t for r in rows for t in r), dtype=np.int32, count=int(lengths.sum()))
    return tf.RaggedTensor.from_row_lengths(flat, lengths)


def examples_dataset(examples: list[dict]) -> tf.data.Dataset:
    """In-memory examples (from `pairs.build_pairs`) as an unbatched dataset."""
    if not examples:
        raise DataError("No pretraining examples: the corpus produced none.")
    return tf.data.Dataset.from_tensor_slices({
        "segment_a": _ragged([e["segment_a"] for e in examples]),
        "segment_b": _ragged([e["segment_b"] for e in examples]),
        "nsp_label": np.array([e["nsp_label"] for e in examples], np.int32),
        "nsp_weight": np.array([e["nsp_weight"] for e in examples], np.float32),
    })


def write_tfrecords(examples: list[dict], output_dir: str, num_shards: int) -> list[str]:
    """Writes examples as `tf.train.Example`s, round-robin over `num_shards` files."""
    os.makedirs(output_dir, exist_ok=True)
    paths = [os.path.join(output_dir, f"examples-{i:05d}-of-{num_shards:05d}.tfrecord")
             for i in range(num_shards)]
    writers = [tf.io.TFRecordWriter(p + ".tmp") for p in paths]
    for i, e in enumerate(examples):
        feature = {
            "segment_a": tf.train.Feature(int64_list=tf.train.Int64List(value=e["segment_a"])),
            "segment_b": tf.train.Feature(int64_list=tf.train.Int64List(value=e["segment_b"])),
            "nsp_label": tf.train.Feature(int64_list=tf.train.Int64List(value=[e["nsp_label"]])),
            "nsp_weight": tf.train.Feature(float_list=tf.train.FloatList(value=[e["nsp_weight"]])),
        }
        record = tf.train.Example(features=tf.train.Features(feature=feature))
        writers[i % num_shards].write(record.SerializeToString())
    for writer, path in zip(writers, paths):
        writer.close()
        os.replace(path + ".tmp", path)  # a shard is complete or absent
    return paths


_TFRECORD_SPEC = {
    "segment_a": tf.io.RaggedFeature(tf.int64),
    "segment_b": tf.io.RaggedFeature(tf.int64),
    "nsp_label": tf.io.FixedLenFeature([], tf.int64),
    "nsp_weight": tf.io.FixedLenFeature([], tf.float32),
}


def tfrecord_dataset(pattern_or_dir: str, seed: int, shuffle_files: bool = True) -> tf.data.Dataset:
    """Reads shards written by `write_tfrecords`, interleaved across files."""
    pattern = (os.path.join(pattern_or_dir, "*.tfrecord")
               if os.path.isdir(pattern_or_dir) else pattern_or_dir)
    files = sorted(glob.glob(pattern))
    if not files:
        raise FileNotFoundError(f"No TFRecord shards match {pattern}")
    dataset = tf.data.Dataset.from_tensor_slices(files)
    if shuffle_files:
        dataset = dataset.shuffle(len(files), seed=seed)
    dataset = dataset.interleave(tf.data.TFRecordDataset, cycle_length=min(4, len(files)),
                                 num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)

    def parse(record):
        e = tf.io.parse_single_example(record, _TFRECORD_SPEC)
        return {"segment_a": tf.cast(e["segment_a"], tf.int32),
                "segment_b": tf.cast(e["segment_b"], tf.int32),
                "nsp_label": tf.cast(e["nsp_label"], tf.int32),
                "nsp_weight": e["nsp_weight"]}

    return dataset.map(parse, num_parallel_calls=tf.data.AUTOTUNE)


def pack_and_mask(batch: dict, packer, masker, pad_id: int, nsp: bool = True):
    """One batch of ragged examples -> Keras (x, y, sample_weight); MLM-only without `nsp`."""
    a, b = batch["segment_a"], batch["segment_b"]
    pair_ids, pair_segments = packer((a, b))  # (batch, seq)
    # MLM-only rows have no B: pack them alone, so they end in one [SEP], not two.
    single_ids, single_segments = packer((a,))
    has_b = (b.row_lengths() > 0)[:, None]
    token_ids = tf.where(has_b, pair_ids, single_ids)
    segment_ids = tf.where(has_b, pair_segments, single_segments)
    masked = masker(token_ids)
    x = {
        "token_ids": masked["token_ids"],
        "segment_ids": tf.cast(segment_ids, tf.int32),
        # int, not bool: MirroredStrategy cannot all-reduce bool tensors.
        "padding_mask": tf.cast(token_ids != pad_id, tf.int32),
        "mask_positions": masked["mask_positions"],
    }
    y = {"mlm": masked["mask_ids"]}
    weights = {"mlm": masked["mask_weights"]}
    if nsp:
        y["nsp"], weights["nsp"] = batch["nsp_label"], batch["nsp_weight"]
    return x, y, weights


def pretraining_dataset(examples: tf.data.Dataset, packer, masker, batch_size: int, pad_id: int,
                        seed: int = 0, shuffle_buffer: int = 10000, repeat: bool = True,
                        skip_batches: int = 0, nsp: bool = True) -> tf.data.Dataset:
    """Shuffled, repeated, batched, packed and masked pretraining batches.

    `skip_batches` resumes the batch order of an interrupted run: the shuffle is
    seeded, so the first `skip_batches` batches are the ones it already trained on.
    """
    if shuffle_buffer:
        examples = examples.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        examples = examples.repeat()
    dataset = examples.ragged_batch(batch_size, drop_remainder=True)
    if skip_batches:
        dataset = dataset.skip(skip_batches)
    dataset = dataset.map(lambda batch: pack_and_mask(batch, packer, masker, pad_id, nsp),
                          num_parallel_calls=tf.data.AUTOTUNE)
    return dataset.prefetch(tf.data.AUTOTUNE)


def heldout_dataset(examples: tf.data.Dataset, packer, masker, batch_size: int, pad_id: int,
                    nsp: bool = True) -> tf.data.Dataset:
    """Packed, masked batches with the same masks in every run, for held-out metrics.

    The masks come from stateful random ops, and the masking of a batch runs rows in
    parallel (keras-hub's mask generator shuffles each row inside a `map_fn`): rows
    draw their masks in whatever order the threads run, so two runs with the same
    seed would score different masks. Here examples are masked one at a time, in
    order, then batched and held whole in memory as tensors (a held-out set is small).
    Every evaluation then starts at once: under MultiWorkerMirroredStrategy, each
    block's new iterator over the packing pipeline itself took seconds to start.

    Example:
        >>> from kerasbert.packing import make_packer
        >>> from kerasbert.pretraining.masking import Masker
        >>> pairs = [{"segment_a": [5, 6, 8], "segment_b": [5, 7, 9], "nsp_label": 1, "nsp_weight": 1.0}] * 4
        >>> packer = make_packer(10, {"cls": 2, "sep": 3, "pad": 0})
        >>> masker = Masker(vocabulary_size=15, mask_token_id=4, unselectable_token_ids=[0, 2, 3],
        ...                 mask_selection_length=3, seed=1)
        >>> data = heldout_dataset(examples_dataset(pairs), packer, masker, 2, pad_id=0)
        >>> [int(x["token_ids"].shape[0]) for x, y, w in data]  # one pass: 4 examples, 2 a batch
        [2, 2]
        >>> first = [x["mask_positions"].numpy().tolist() for x, y, w in data]
        >>> first == [x["mask_positions"].numpy().tolist() for x, y, w in data]  # the same masks at every pass
        True
    """
    dataset = examples.ragged_batch(1).map(
        lambda one: pack_and_mask(one, packer, masker, pad_id, nsp))  # sequential: no parallel calls
    batches = list(dataset.unbatch().batch(batch_size, drop_remainder=True).as_numpy_iterator())
    if not batches:
        raise DataError(f"Held-out data: fewer examples than one batch of {batch_size}")
    stacked = tf.nest.map_structure(lambda *arrays: np.stack(arrays), *batches)
    return tf.data.Dataset.from_tensor_slices(stacked)
