"""A bag-of-words baseline for next-sentence prediction: how far word overlap alone gets.

A pair is called "next" when the TF-IDF cosine of segment A and segment B is above a
threshold. The IDF and the threshold come from the training pairs; the accuracy is then
measured on the held-out pairs that pretraining scores. It puts the model's held-out NSP
accuracy in context: a model below it has not yet learned even to compare the words of
its two segments.

Example:
    >>> baseline = OverlapBaseline.fit(train_pairs)
    >>> baseline.accuracy(heldout_pairs)
    0.77
"""

from __future__ import annotations

import collections
import dataclasses
import math

import numpy as np


def _tfidf(ids: list[int], idf: dict[int, float], default: float) -> dict[int, float]:
    return {t: c * idf.get(t, default) for t, c in collections.Counter(ids).items()}


def _cosine(u: dict[int, float], v: dict[int, float]) -> float:
    dot = sum(w * v.get(t, 0.0) for t, w in u.items())
    norm = math.sqrt(sum(w * w for w in u.values())) * math.sqrt(sum(w * w for w in v.values()))
    return dot / norm if norm else 0.0


@dataclasses.dataclass
class OverlapBaseline:
    """TF-IDF cosine of the two segments, thresholded. Pairs are dicts with `segment_a`,
    `segment_b` (token ids) and `nsp_label` (1 = B follows A), as `build_pairs` makes them."""

    idf: dict[int, float]
    unseen_idf: float
    threshold: float

    def scores(self, pairs: list[dict]) -> np.ndarray:
        return np.array([_cosine(_tfidf(p["segment_a"], self.idf, self.unseen_idf),
                                 _tfidf(p["segment_b"], self.idf, self.unseen_idf)) for p in pairs])

    def accuracy(self, pairs: list[dict]) -> float:
        labels = np.array([p["nsp_label"] for p in pairs])
        return float(np.mean((self.scores(pairs) > self.threshold) == (labels == 1)))

    @classmethod
    def fit(cls, pairs: list[dict]) -> OverlapBaseline:
        """IDF over the segments of `pairs`, then the threshold with the best accuracy on them."""
        if not pairs:
            raise ValueError("OverlapBaseline.fit needs at least one NSP pair. Received: 0")
        counts = collections.Counter()
        for p in pairs:
            counts.update(set(p["segment_a"]))
            counts.update(set(p["segment_b"]))
        documents = 2 * len(pairs)
        idf = {t: math.log(documents / (1 + c)) for t, c in counts.items()}
        baseline = cls(idf, math.log(documents), threshold=0.0)
        scores = baseline.scores(pairs)
        labels = np.array([p["nsp_label"] for p in pairs]) == 1
        order = np.argsort(scores)
        ordered, ordered_labels = scores[order], labels[order]
        # Threshold at ordered[i]: pairs up to i are called "not next", the rest "next".
        correct = np.cumsum(~ordered_labels) + (labels.sum() - np.cumsum(ordered_labels))
        last_of_ties = np.append(ordered[1:] != ordered[:-1], True)
        best = int(np.argmax(np.where(last_of_ties, correct, -1)))
        baseline.threshold = float(ordered[best])
        return baseline
