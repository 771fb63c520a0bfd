"""The embedding family's losses over a batch of pairs' embeddings u, v (batch, hidden), each
the other's comparisons: CoSENT on scored pairs, multiple-negatives ranking on unlabelled ones.

Example:
    >>> import tensorflow as tf
    >>> u = tf.constant([[1.0, 0.0], [0.0, 1.0]])
    >>> v = tf.constant([[1.0, 0.1], [0.1, 1.0]])
    >>> float(mnrl_loss(u, v, scale=20.0)) < float(mnrl_loss(u, v[::-1], scale=20.0))  # positives on the diagonal
    True
    >>> float(cosent_loss(u, v, tf.constant([5.0, 0.0]), 20.0)) > float(cosent_loss(u, v, tf.constant([5.0, 5.0]), 20.0))
    True
"""

from __future__ import annotations

import tensorflow as tf


def cosines(u, v):
    """Row-wise cosine of two (batch, hidden) tensors: (batch,)."""
    return tf.reduce_sum(tf.math.l2_normalize(u, -1) * tf.math.l2_normalize(v, -1), -1)


def cosent_loss(u, v, scores, scale: float):
    """CoSENT (Su, 2022; sentence-transformers' CoSENTLoss): for every two pairs i, j of the batch
    with score_i > score_j, cos_i should exceed cos_j:
        log(1 + sum over score_i > score_j of exp(scale * (cos_j - cos_i))).
    Only the order of the scores counts, as for the Spearman it is measured by: no range to map
    the scores into, where a cosine-similarity (MSE) loss must place each pair on [-1, 1]."""
    s = scale * cosines(u, v)  # (batch,)
    difference = s[None, :] - s[:, None]  # (batch, batch): [i, j] = s_j - s_i
    wanted = scores[:, None] > scores[None, :]  # [i, j]: pair i is scored above pair j
    difference = tf.where(wanted, difference, tf.fill(tf.shape(difference), -1e12))
    return tf.reduce_logsumexp(tf.concat([tf.zeros([1]), tf.reshape(difference, [-1])], 0))  # log(1 + sum exp)


def mnrl_loss(u, v, scale: float):
    """Multiple-negatives ranking (sentence-transformers' MultipleNegativesRankingLoss): anchor
    u_i's positive is v_i, every other v_j of the batch its negative; cross-entropy over the
    scaled cosines of u_i with every v."""
    logits = scale * tf.matmul(tf.math.l2_normalize(u, -1), tf.math.l2_normalize(v, -1), transpose_b=True)  # (batch, batch)
    labels = tf.range(tf.shape(logits)[0])
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels, logits))
