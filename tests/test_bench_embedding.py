"""benchmarks.embedding scores every side's embeddings alike: the dev texts' embeddings (every
text_a, then every text_b) split back into pairs, each anchor ranking every positive, and the seeds'
paired interval. Checked on hand-built vectors, without TensorFlow."""

import numpy as np
import pytest
import scipy.stats

from benchmarks.embedding import paired_interval, scores


def test_each_anchor_ranks_every_positive():
    anchors = np.eye(3)  # so anchor i's cosine with a positive is the positive's i-th coordinate
    positives = np.array([[0.8, 0.6, 0.0],  # anchor 0's own: first (0.8 > 0.36 > 0)
                          [0.0, 0.28, 0.96],  # anchor 1's own: third (0.6, 0.48 > 0.28)
                          [0.36, 0.48, 0.8]])  # anchor 2's own: second (0.96 > 0.8)
    ranks = np.array([1, 3, 2])
    found = scores("quora", np.concatenate([anchors, 5 * positives]), [{}] * 3)
    assert found == pytest.approx({"recall_at_1": 1 / 3, "mrr_at_10": np.mean(1 / ranks)})


def test_a_rank_past_ten_counts_nothing():
    anchors = np.eye(12)
    positives = np.eye(12) + 0.5 * np.eye(12)[0]  # every positive leans towards anchor 0 ...
    positives[0] = -np.eye(12)[0]  # ... but its own, which comes last of 12
    found = scores("quora", np.concatenate([anchors, positives]), [{}] * 12)
    assert found == pytest.approx({"recall_at_1": 11 / 12, "mrr_at_10": 11 / 12})


def test_sts_scores_pair_text_a_with_its_own_text_b():
    dev = [{"label": 0.0}, {"label": 2.0}, {"label": 5.0}]
    a = np.array([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    b = np.array([[0.0, 1.0], [1.0, 1.0], [1.0, 0.1]])  # cosines rise with the labels only in this order
    assert scores("sts", np.concatenate([a, b]), dev) == {"spearman": pytest.approx(1.0)}
    assert scores("sts", np.concatenate([a, b[::-1]]), dev) == {"spearman": pytest.approx(-1.0)}


def test_the_interval_is_the_paired_t_interval():
    ours, theirs = [0.812, 0.826, 0.801], [0.815, 0.809, 0.807]
    expected = scipy.stats.ttest_rel(ours, theirs).confidence_interval(0.95)
    interval = paired_interval(ours, theirs)
    assert (interval["low"], interval["high"]) == pytest.approx((expected.low, expected.high))
    assert interval["differences"] == pytest.approx([-0.003, 0.017, -0.006])
