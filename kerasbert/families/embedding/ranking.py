"""The embedding family's dev metrics over the whole dev set: Spearman of the pairs' cosines
against their scores, or, for unlabelled pairs, how each anchor ranks its own positive among
every dev positive (recall@1, MRR@10).

Example:
    >>> import numpy as np
    >>> anchors = np.array([[1.0, 0.0], [0.0, 1.0], [0.6, 0.8]])
    >>> positives = np.array([[0.9, 0.1], [0.6, 0.8], [0.0, 1.0]])
    >>> positive_ranks(anchors, positives).tolist()  # anchor 1 and 2 each find the other's first
    [1, 2, 2]
    >>> ranking_scores(anchors, positives)
    {'recall_at_1': 0.3333333333333333, 'mrr_at_10': 0.6666666666666666}
"""

from __future__ import annotations

import numpy as np


def positive_ranks(anchors: np.ndarray, positives: np.ndarray) -> np.ndarray:
    """Each anchor's rank (1 = first) of its own positive among all positives, by dot product
    (cosine, for unit rows); a tie counts against it."""
    similarity = anchors @ positives.T  # (n, n)
    own = np.diagonal(similarity)[:, None]  # (n, 1)
    others = similarity >= own
    np.fill_diagonal(others, False)
    return 1 + others.sum(axis=1)


def ranking_scores(anchors: np.ndarray, positives: np.ndarray) -> dict[str, float]:
    """recall@1 (the positive first) and MRR@10 (1 / its rank, 0 past 10), means over anchors."""
    ranks = positive_ranks(anchors, positives)
    return {"recall_at_1": float(np.mean(ranks == 1)),
            "mrr_at_10": float(np.mean(np.where(ranks <= 10, 1.0 / ranks, 0.0)))}


def spearman(cosines: np.ndarray, scores) -> float:
    import scipy.stats  # here: it takes seconds to import

    return float(scipy.stats.spearmanr(cosines, np.asarray(scores, float))[0])
