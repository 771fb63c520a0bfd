import numpy as np
import pytest

from benchmarks.nsp_overlap import OverlapBaseline


def pairs_from_topics(n, rng, shared_words):
    """True-next pairs draw both segments from one topic's words, others from two topics."""
    pairs = []
    for i in range(n):
        label = i % 2
        topic_a = rng.integers(0, 50)
        topic_b = topic_a if label else (topic_a + rng.integers(1, 50)) % 50
        words = lambda topic: list(rng.choice(shared_words, 4)) + list(100 + 10 * topic + rng.integers(0, 10, 6))
        pairs.append({"segment_a": words(topic_a), "segment_b": words(topic_b), "nsp_label": label})
    return pairs


def test_overlap_separates_same_topic_pairs_and_ignores_common_words():
    rng = np.random.default_rng(0)
    baseline = OverlapBaseline.fit(pairs_from_topics(400, rng, shared_words=[1, 2, 3]))
    assert baseline.idf[1] < baseline.idf[105]  # a word in every segment weighs least
    assert baseline.accuracy(pairs_from_topics(200, rng, shared_words=[1, 2, 3])) > 0.9


def test_overlap_is_at_chance_when_labels_do_not_depend_on_the_words():
    rng = np.random.default_rng(1)
    random_pairs = lambda n: [{"segment_a": list(rng.integers(0, 30, 8)), "segment_b": list(rng.integers(0, 30, 8)),
                               "nsp_label": int(rng.integers(0, 2))} for _ in range(n)]
    baseline = OverlapBaseline.fit(random_pairs(400))
    assert abs(baseline.accuracy(random_pairs(2000)) - 0.5) < 0.06


def test_fitted_threshold_is_the_best_on_the_training_pairs():
    # Negatives share a common word (low IDF), positives a rarer one: only a threshold above
    # zero separates them.
    pairs = [{"segment_a": a, "segment_b": b, "nsp_label": label} for a, b, label in (
        ([2, 3], [2, 4], 1), ([5, 6], [5, 7], 1),
        ([1, 8], [1, 9], 0), ([1, 10], [1, 11], 0), ([12, 13], [14, 15], 0))]
    baseline = OverlapBaseline.fit(pairs)
    assert baseline.threshold > 0
    assert baseline.accuracy(pairs) == 1.0
    with pytest.raises(ValueError, match="at least one NSP pair"):
        OverlapBaseline.fit([])
