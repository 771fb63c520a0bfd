"""The sentence embedding of a one-sentence request in few graph nodes, for serving graphs.

At batch 1 the unpadded encoder (kerasbert/models/unpadded.py) spends much of a call on
TensorFlow dispatching its ops (its token bookkeeping, the chunked attention's while loop: a
session on MiniLM-L6's fp32 export runs 1,844 nodes for one sentence), not on the products. One
sentence needs none of that bookkeeping: its real tokens are one (tokens, hidden) matrix and
attention runs on it as it is, without padding or masks (964 nodes, the tokenizer and head
included; docs/serving.md). Projections are MatMul + BiasAdd, which Grappler's remapper fuses
into one oneDNN op on x86 (with the exact GELU after them too, written in the order it matches).
LayerNorm in the FusedBatchNormV3 form the remapper turns into _MklLayerNorm was measured no faster
(docs/serving.md), so it stays unpadded.py's. The weights are the backbone's own variables, read
in place, or `compute_dtype`'s reduced-precision copies (kerasbert/quantize.py); the embedding
equals the unpadded encoder's within float rounding (tests/test_unpadded.py).

Example (`encoder`: a BertBackbone with hidden_dim 8; a row of 3 real tokens and 1 of padding):
    >>> from kerasbert.models.unpadded import sentence_embedding
    >>> inputs = {"token_ids": tf.constant([[2, 6, 3, 0]]), "segment_ids": tf.constant([[0, 0, 0, 0]]),
    ...           "padding_mask": tf.constant([[1, 1, 1, 0]])}
    >>> found = one_row_embedding(encoder, inputs)  # (1, hidden)
    >>> bool(tf.reduce_max(tf.abs(found - sentence_embedding(encoder, inputs))) < 1e-5)
    True
"""

from __future__ import annotations

import math

import keras
import tensorflow as tf

from kerasbert.compat import keras_hub as keras_hub_compat
from kerasbert.models.unpadded import layer_norm
from kerasbert.quantize import ServingWeights, kernel_matrix

_SQRT_ONE_HALF = 1.0 / math.sqrt(2.0)


def _dense(x, layer, compute_dtype: ServingWeights | None):
    """(tokens, in) -> (tokens, out): MatMul + BiasAdd, or `compute_dtype`'s product."""
    if compute_dtype is not None:
        return compute_dtype.dense(x, layer)
    return tf.nn.bias_add(tf.matmul(x, kernel_matrix(layer)), tf.reshape(layer.bias, [-1]))


def _activation(x, layer):
    """`layer`'s activation; the exact GELU (BertEncoder's "gelu") with its ops in the order the
    remapper fuses after a MatMul + BiasAdd (tf.nn.gelu divides by sqrt(2), which it does not match)."""
    if layer.activation is keras.activations.gelu:
        return (tf.math.erf(x * _SQRT_ONE_HALF) + 1.0) * 0.5 * x
    return layer.activation(x)


def _heads(x, attention, compute_dtype, heads: int, head_dim: int):
    """(3, heads, tokens, head_dim): the query (scaled as keras scales it), key and value."""
    if compute_dtype is not None:  # one product of the three kernels side by side
        qkv = compute_dtype.query_key_value(x, attention)  # (tokens, 3 * hidden)
        return tf.transpose(tf.reshape(qkv, [-1, 3, heads, head_dim]), [1, 2, 0, 3])
    query = _dense(x, attention.query_dense, None) * (1.0 / math.sqrt(head_dim))
    parts = [query, _dense(x, attention.key_dense, None), _dense(x, attention.value_dense, None)]
    return tf.transpose(tf.reshape(tf.stack(parts), [3, -1, heads, head_dim]), [0, 2, 1, 3])


def _attention(x, attention, compute_dtype):
    """Self-attention of one sentence's tokens (tokens, hidden) -> (tokens, hidden)."""
    heads, head_dim = attention.query_dense.kernel.shape[1], attention.query_dense.kernel.shape[2]
    query, key, value = tf.unstack(_heads(x, attention, compute_dtype, heads, head_dim))  # (heads, tokens, head_dim)
    probabilities = tf.nn.softmax(tf.matmul(query, key, transpose_b=True))  # (heads, tokens, tokens)
    context = tf.transpose(tf.matmul(probabilities, value), [1, 0, 2])  # (tokens, heads, head_dim)
    return _dense(tf.reshape(context, [-1, heads * head_dim]), attention.output_dense, compute_dtype)


def one_row_states(backbone, inputs: dict, compute_dtype: ServingWeights | None = None):
    """(states (tokens, hidden), positions (tokens,)): the final hidden state of each real token of
    the one row of `inputs` (token_ids, segment_ids, padding_mask, each (1, width)), and its position."""
    positions = tf.cast(tf.where(inputs["padding_mask"][0] > 0)[:, 0], tf.int32)  # (tokens,)
    ids, segments = (tf.gather(tf.cast(inputs[name][0], tf.int32), positions) for name in ("token_ids", "segment_ids"))
    x = (tf.gather(backbone.token_embedding.embeddings, ids)
         + tf.gather(backbone.position_embedding.position_embeddings, positions)
         + tf.gather(backbone.segment_embedding.embeddings, segments))  # (tokens, hidden)
    x = layer_norm(x, backbone.embeddings_layer_norm)
    for block in map(keras_hub_compat.block_parts, backbone.transformer_layers):
        x = layer_norm(x + _attention(x, block.attention, compute_dtype), block.attention_norm)
        inner = _activation(_dense(x, block.intermediate, compute_dtype), block.intermediate)  # (tokens, intermediate)
        x = layer_norm(x + _dense(inner, block.output, compute_dtype), block.output_norm)
    return x, positions


def one_row_embedding(backbone, inputs: dict, pooling: str = "mean",
                      compute_dtype: ServingWeights | None = None) -> tf.Tensor:
    """(1, hidden): the sentence embedding of the one row of `inputs`, as
    kerasbert/models/unpadded.py `sentence_embedding` gives it ("mean" or "cls" pooling)."""
    x, positions = one_row_states(backbone, inputs, compute_dtype)
    if pooling == "cls":  # the state at position 0 (zeros if it is padding), as unpadded.py takes it
        first = tf.reduce_sum(x * tf.cast(positions == 0, x.dtype)[:, None], 0, keepdims=True)
        return tf.tanh(_dense(first, backbone.pooled_dense, None))
    count = tf.maximum(tf.cast(tf.shape(x)[0], x.dtype), 1.0)
    return tf.reduce_sum(x, 0, keepdims=True) / count
