"""Masking statistics and invariants for the token, whole-word and span maskers."""

import numpy as np
import pytest
import tensorflow as tf

from kerasbert.pretraining.masking import Masker

PAD, CLS, SEP, MASK = 0, 2, 3, 4
VOCAB = 1000


def packed_batch(batch=256, seq=64, seed=0):
    """[CLS] a [SEP] b [SEP] [PAD]... with random ordinary ids >= 5."""
    rng = np.random.default_rng(seed)
    ids = np.zeros((batch, seq), np.int32)
    for row in ids:
        length = rng.integers(20, seq + 1)
        split = rng.integers(2, length - 2)
        row[:length] = rng.integers(5, VOCAB, length)
        row[0], row[split], row[length - 1] = CLS, SEP, SEP
    return tf.constant(ids)


def masker(strategy="token", continuation=None, **kwargs):
    return Masker(VOCAB, MASK, [PAD, CLS, SEP], strategy=strategy, continuation=continuation,
                  mask_selection_length=kwargs.pop("mask_selection_length", 20), **kwargs)


def outcome_counts(original, out):
    original, masked = original.numpy(), out["token_ids"].numpy()
    weights = out["mask_weights"].numpy() > 0
    positions = out["mask_positions"].numpy()
    rows = np.repeat(np.arange(len(positions))[:, None], positions.shape[1], 1)[weights]
    cols = positions[weights]
    new = masked[rows, cols]
    was = original[rows, cols]
    return dict(selected=len(cols), mask=np.sum(new == MASK),
                unchanged=np.sum(new == was), random=np.sum((new != MASK) & (new != was)),
                rows=rows, cols=cols, was=was)


@pytest.mark.parametrize("strategy", ["token", "whole_word", "span"])
def test_selects_about_15_percent_with_80_10_10(strategy):
    tf.random.set_seed(7)
    ids = packed_batch()
    continuation = tf.zeros([VOCAB], tf.bool)  # every token is a word start
    out = masker(strategy, continuation, mask_selection_length=64)(ids)
    counts = outcome_counts(ids, out)
    selectable = np.sum(~np.isin(ids.numpy(), [PAD, CLS, SEP]))
    rate = counts["selected"] / selectable
    # token/whole_word fill a ceil(15%) budget; span fills it with whole spans (<=).
    assert 0.13 <= rate <= 0.17, rate
    n = counts["selected"]
    assert abs(counts["mask"] / n - 0.8) < 0.04
    # A random replacement equals the original 1 time in VOCAB: count it as unchanged.
    assert abs(counts["random"] / n - 0.1) < 0.03
    assert abs(counts["unchanged"] / n - 0.1) < 0.03


@pytest.mark.parametrize("strategy", ["token", "whole_word", "span"])
def test_never_selects_special_tokens_and_labels_are_originals(strategy):
    ids = packed_batch(batch=64)
    out = masker(strategy, tf.zeros([VOCAB], tf.bool), mask_selection_rate=0.5,
                 mask_selection_length=40)(ids)
    counts = outcome_counts(ids, out)
    assert not np.isin(counts["was"], [PAD, CLS, SEP]).any()
    labels = out["mask_ids"].numpy()[out["mask_weights"].numpy() > 0]
    np.testing.assert_array_equal(labels, counts["was"])
    # Unselected positions keep their ids.
    unselected = np.ones(ids.shape, bool)
    unselected[counts["rows"], counts["cols"]] = False
    np.testing.assert_array_equal(out["token_ids"].numpy()[unselected], ids.numpy()[unselected])


def test_whole_word_masks_all_pieces_of_a_word_together():
    continuation = np.zeros(VOCAB, bool)
    continuation[500:] = True  # ids >= 500 are "##" pieces
    tf.random.set_seed(3)
    ids = packed_batch(batch=128)
    out = masker("whole_word", tf.constant(continuation), mask_selection_length=64)(ids)
    ids_np, selected = ids.numpy(), np.zeros(ids.shape, bool)
    counts = outcome_counts(ids, out)
    selected[counts["rows"], counts["cols"]] = True
    for row in range(ids.shape[0]):
        word = []
        for col in range(ids.shape[1]):
            starts_word = not continuation[ids_np[row, col]] or ids_np[row, col] in (PAD, CLS, SEP)
            if starts_word and word:
                assert len(set(selected[row, word])) == 1, (row, word)
                word = []
            if ids_np[row, col] not in (PAD, CLS, SEP):
                word.append(col)


def test_span_masking_masks_contiguous_runs_longer_than_single_tokens():
    tf.random.set_seed(5)
    ids = packed_batch(batch=256)
    out = masker("span", tf.zeros([VOCAB], tf.bool), mask_selection_length=64)(ids)
    counts = outcome_counts(ids, out)
    runs = []
    for row in np.unique(counts["rows"]):
        cols = np.sort(counts["cols"][counts["rows"] == row])
        runs += [len(r) for r in np.split(cols, np.where(np.diff(cols) > 1)[0] + 1)]
    # Geometric(0.2) clipped at 10 has mean ~4.5; merged/clipped runs stay well above 1.
    assert 2.5 < np.mean(runs) < 7, np.mean(runs)


def test_deterministic_rates_mask_everything_selected():
    """Rates 1/1/0 (select all, always [MASK]) make the output fully predictable."""
    ids = tf.constant([[CLS, 10, 11, SEP, 12, SEP, PAD]])
    for strategy in ("token", "whole_word"):
        out = masker(strategy, tf.zeros([VOCAB], tf.bool), mask_selection_rate=0.999,
                     mask_token_rate=1.0, random_token_rate=0.0, mask_selection_length=4)(ids)
        assert out["token_ids"].numpy().tolist() == [[CLS, MASK, MASK, SEP, MASK, SEP, PAD]]
        assert sorted(out["mask_positions"].numpy()[0][:3].tolist()) == [1, 2, 4]
        assert out["mask_weights"].numpy().tolist() == [[1, 1, 1, 0]]
