"""keras-hub's `BertBackbone` forward pass over the real tokens only, for serving graphs.

A batch of sentences is padded to its longest row, and on short text most of the
padded encoder's work is padding: the SST-5 dev sentences, 32 to a batch, fill about
half of their rows. Every dense layer of BERT (the Q, K, V and output projections, the
feed-forward block, the LayerNorms) works on each token alone, so here the tokens are
gathered into one (tokens, hidden) matrix and only attention, which mixes the tokens of
a sentence, sees a padded (rows, width) layout, with padded keys masked as keras-hub
masks them. This is the "remove padding" of FasterTransformer and TurboTransformers.
In training that layout is the batch's own (its batches are grouped by length); at
inference the rows, longest first, are attended `ROWS_PER_CHUNK` at a time, each chunk
padded to its own longest row, so a batch of mixed lengths (the `answer` signature's
SQuAD windows, client requests) spends its attention on about its real tokens too.

The weights are the backbone's own variables, read in place, so an export holds them
once and they stay restorable, and training updates them as it would through the
backbone; dropout is the backbone's own dropout layers, at the same places. The outputs
and gradients equal `backbone(inputs)`'s at the real tokens (tests/test_unpadded.py).
The number of real tokens changes from batch to batch, which XLA cannot compile.

Example (`encoder`: a BertBackbone with hidden_dim 8; rows of 2 and 4 real tokens):
    >>> inputs = {"token_ids": tf.constant([[2, 6, 3, 0], [2, 7, 9, 3]]),
    ...           "segment_ids": tf.zeros((2, 4), tf.int32), "padding_mask": tf.constant([[1, 1, 1, 0], [1, 1, 1, 1]])}
    >>> embedding = sentence_embedding(encoder, inputs)
    >>> embedding.shape  # (batch, hidden): the mean of the token states over the padding mask
    TensorShape([2, 8])
    >>> states = encoder(inputs)["sequence_output"]  # the padded forward pass, for comparison
    >>> mean = tf.reduce_sum(states * tf.cast(inputs["padding_mask"], tf.float32)[..., None], 1) / [[3.0], [4.0]]
    >>> bool(tf.reduce_all(tf.abs(embedding - mean) < 1e-5))
    True
"""

from __future__ import annotations

import math

import tensorflow as tf

from kerasbert.compat import keras as keras_compat
from kerasbert.compat import keras_hub as keras_hub_compat
from kerasbert.quantize import ServingWeights, kernel_matrix, query_key_value_weights

_MASKED = -1e9  # keras' softmax adds this to masked scores


def available() -> bool:
    """Whether this Keras and keras-hub are releases whose private layer attributes this
    module was checked against (kerasbert/compat/); elsewhere run the backbone padded."""
    return keras_compat.checked() and keras_hub_compat.checked()


def _dense(x, layer, compute_dtype: ServingWeights | None = None):
    """A Dense or EinsumDense projection on (tokens, in): kernels (in, ...) or (heads, head_dim, out);
    with `compute_dtype` (`ServingWeights` of kerasbert/quantize.py), its bfloat16 or int8 product."""
    if compute_dtype is not None:
        return compute_dtype.dense(x, layer)
    kernel, bias = kernel_matrix(layer), layer.bias
    # bias_add rather than +: oneDNN's graph rewrite fuses MatMul, BiasAdd and a GELU after
    # them into one op (with +, the feed-forward's GELU ran as five element-wise passes).
    return tf.nn.bias_add(tf.matmul(x, kernel), tf.reshape(bias, [-1]))


def layer_norm(x, layer):
    """`layer` (a LayerNormalization over the last axis) on x (tokens, hidden)."""
    mean, variance = tf.nn.moments(x, axes=[-1], keepdims=True)
    return (x - mean) * tf.math.rsqrt(variance + layer.epsilon) * layer.gamma + layer.beta


class Tokens:
    """Where the real tokens of a (batch, width) padded batch are: `index` (tokens, 1) into the
    flattened batch, their `row` and `position`, and the batch's shape. The tokens are
    listed row by row, the rows longest first (`sorted_row`: a token's row in that order;
    `row_splits`: where each of those rows begins), so that rows of like length sit
    together for `_attention_in_chunks`; every per-token layer is indifferent to the order."""

    def __init__(self, padding_mask: tf.Tensor):
        shape = tf.shape(padding_mask)
        self.batch, self.width = shape[0], shape[1]
        real = padding_mask > 0
        lengths = tf.reduce_sum(tf.cast(real, tf.int32), axis=1)  # (batch,)
        order = tf.argsort(lengths, direction="DESCENDING", stable=True)  # (batch,)
        where = tf.cast(tf.where(tf.gather(real, order)), tf.int32)  # (tokens, 2): sorted row, position
        self.sorted_row, self.position = where[:, 0], where[:, 1]
        self.row = tf.gather(order, self.sorted_row)
        self.index = tf.cast(self.row * self.width + self.position, tf.int64)[:, None]
        self.row_splits = tf.concat([[0], tf.cumsum(tf.gather(lengths, order))], 0)  # (batch + 1,)

    def gather(self, padded):
        """(batch, width, ...) -> (tokens, ...)"""
        return tf.gather_nd(tf.reshape(padded, tf.concat([[-1], tf.shape(padded)[2:]], 0)), self.index)

    def scatter(self, tokens):
        """(tokens, d) -> (batch, width, d), zeros at padding."""
        flat = tf.scatter_nd(self.index, tokens, tf.stack([tf.cast(self.batch * self.width, tf.int64),
                                                           tf.cast(tf.shape(tokens)[-1], tf.int64)]))
        return tf.reshape(flat, [self.batch, self.width, -1])


def _attention(x, layer, tokens: Tokens, key_bias, training, compute_dtype):
    heads, head_dim = layer.query_dense.kernel.shape[1], layer.query_dense.kernel.shape[2]

    def projected(dense, scale=None):  # (batch, heads, width, head_dim)
        y = _dense(x, dense, compute_dtype)  # (tokens, hidden)
        y = tf.reshape(tokens.scatter(y if scale is None else y * scale), [tokens.batch, tokens.width, heads, head_dim])
        return tf.transpose(y, [0, 2, 1, 3])

    # Q, K and V each scattered on its own: no concatenation to copy (per call, a cost at
    # batch 1) and no slices, whose gradients are zero-filled copies (per training step).
    # Batched matmuls rather than einsum: the same products; a training step ran 1.09x as fast,
    # a batch of 1 0.8x, for the transposes (measured in commit 8132dc4).
    query = projected(layer.query_dense, 1.0 / math.sqrt(head_dim))  # scaled as keras scales it
    key, value = projected(layer.key_dense), projected(layer.value_dense)
    scores = tf.matmul(query, key, transpose_b=True) + key_bias  # (batch, heads, width, width)
    probabilities = keras_compat.attention_dropout(layer)(tf.nn.softmax(scores, axis=-1), training=training)
    context = tf.transpose(tf.matmul(probabilities, value), [0, 2, 1, 3])  # (batch, width, heads, head_dim)
    context = tokens.gather(tf.reshape(context, [tokens.batch, tokens.width, heads * head_dim]))  # (tokens, hidden)
    return _dense(context, layer.output_dense, compute_dtype)


ROWS_PER_CHUNK = 4  # rows whose attention one step of `_attention_in_chunks` computes


def _query_key_value(x, layer, compute_dtype):
    """(tokens, 3 * hidden): the scaled query, the key and the value of each token from one
    product with the three kernels side by side (one wider matmul runs faster than three)."""
    if compute_dtype is not None:
        return compute_dtype.query_key_value(x, layer)
    kernel, bias = query_key_value_weights(layer)
    return tf.nn.bias_add(tf.matmul(x, kernel), bias)


def _attention_in_chunks(x, layer, tokens: Tokens, compute_dtype):
    """Inference attention: the rows, longest first, in chunks of `ROWS_PER_CHUNK`, each
    padded only to its own longest row. A batch of unsorted lengths (windows of a SQuAD
    context, client requests) then spends its score matrices and softmax on real tokens,
    not on the batch's longest row, and each chunk's scores stay small enough for the
    caches. A chunk's padded slots repeat its rows' last token (a gather; their keys are
    masked, their outputs dropped). No dropout: training runs `_attention`."""
    heads, head_dim = layer.query_dense.kernel.shape[1], layer.query_dense.kernel.shape[2]
    qkv = _query_key_value(x, layer, compute_dtype)  # (tokens, 3 * hidden)
    count = tf.shape(qkv)[0]
    lengths = tokens.row_splits[1:] - tokens.row_splits[:-1]  # (batch,), longest first
    chunks = (tokens.batch + ROWS_PER_CHUNK - 1) // ROWS_PER_CHUNK

    def chunk_context(chunk, contexts):
        first_row = chunk * ROWS_PER_CHUNK
        rows = tf.minimum(ROWS_PER_CHUNK, tokens.batch - first_row)
        width = tf.maximum(lengths[first_row], 1)  # its first row is its longest
        row_lengths = lengths[first_row:first_row + rows][:, None]  # (rows, 1)
        position = tf.range(width)[None, :]  # (1, width)
        slot = tokens.row_splits[first_row:first_row + rows][:, None] + tf.minimum(position, row_lengths - 1)
        padded = tf.gather(qkv, tf.clip_by_value(slot, 0, count - 1))  # (rows, width, 3 * hidden)
        query, key, value = tf.unstack(tf.transpose(
            tf.reshape(padded, [rows, width, 3, heads, head_dim]), [2, 0, 3, 1, 4]))  # each (rows, heads, width, head_dim)
        key_bias = tf.cast(position >= row_lengths, x.dtype)[:, None, None, :] * _MASKED  # (rows, 1, 1, width)
        scores = tf.matmul(query, key, transpose_b=True) + key_bias
        context = tf.transpose(tf.matmul(tf.nn.softmax(scores, axis=-1), value), [0, 2, 1, 3])  # (rows, width, heads, head_dim)
        begin, end = tokens.row_splits[first_row], tokens.row_splits[first_row + rows]
        index = (tokens.sorted_row[begin:end] - first_row) * width + tokens.position[begin:end]  # (chunk tokens,)
        return chunk + 1, contexts.write(chunk, tf.gather(tf.reshape(context, [rows * width, -1]), index))

    def attend():
        contexts = tf.TensorArray(x.dtype, size=chunks, infer_shape=False, element_shape=[None, heads * head_dim])
        _, contexts = tf.while_loop(lambda chunk, _: chunk < chunks, chunk_context, (0, contexts))
        return contexts.concat()

    # No tokens (an empty batch, or rows without any): eager TensorArrays cannot concatenate
    # nothing, and there is nothing to gather from.
    context = tf.cond(count > 0, attend, lambda: tf.zeros([0, heads * head_dim], x.dtype))
    return _dense(context, layer.output_dense, compute_dtype)  # tokens in `tokens`' order


def encode_tokens(backbone, inputs: dict, training: bool = False,
                  compute_dtype: ServingWeights | None = None) -> tuple[tf.Tensor, Tokens]:
    """The final hidden state of each real token, (tokens, hidden), and where they are.

    `compute_dtype`, a `Bfloat16Weights` (kerasbert/quantize.py), runs the projections' products
    in bfloat16 (twice the float32 rate on CPUs with AVX512-BF16 or AMX); an `Int8Weights` runs
    them in int8 on oneDNN's kernels; sums, LayerNorms, softmax and the residual stream stay
    float32. Serving only: those weights are copies, which training does not update."""
    tokens = Tokens(inputs["padding_mask"])
    # (tokens,); cast as keras' Embedding casts (Keras builds models on float placeholders)
    ids, segments = (tf.cast(tokens.gather(inputs[name]), tf.int32) for name in ("token_ids", "segment_ids"))
    x = (tf.gather(backbone.token_embedding.embeddings, ids)
         + tf.gather(backbone.position_embedding.position_embeddings, tokens.position)
         + tf.gather(backbone.segment_embedding.embeddings, segments))  # (tokens, hidden)
    x = backbone.embeddings_dropout(layer_norm(x, backbone.embeddings_layer_norm), training=training)
    # Padded keys take no attention: (batch, 1, 1, width), added to every head's scores.
    key_bias = (1.0 - tf.cast(inputs["padding_mask"] > 0, x.dtype))[:, None, None, :] * _MASKED if training else None
    for block in map(keras_hub_compat.block_parts, backbone.transformer_layers):
        attended = (_attention(x, block.attention, tokens, key_bias, training, compute_dtype) if training
                    else _attention_in_chunks(x, block.attention, tokens, compute_dtype))
        x = layer_norm(x + block.attention_dropout(attended, training=training), block.attention_norm)
        inner = block.intermediate.activation(_dense(x, block.intermediate, compute_dtype))  # (tokens, intermediate)
        out = block.output_dropout(_dense(inner, block.output, compute_dtype), training=training)
        x = layer_norm(x + out, block.output_norm)
    return x, tokens


def sentence_embedding(backbone, inputs: dict, pooling: str = "mean", training: bool = False,
                       compute_dtype: ServingWeights | None = None) -> tf.Tensor:
    """(batch, hidden): the mean of the real tokens' states ("mean"), or the `[CLS]`
    pooler's output ("cls"), as they come from `backbone(inputs)`."""
    x, tokens = encode_tokens(backbone, inputs, training, compute_dtype)
    if pooling == "cls":  # the state at position 0 of each row, as keras-hub takes x[:, 0]
        first = tf.cast(tokens.position == 0, x.dtype)[:, None]
        cls_states = tf.math.unsorted_segment_sum(x * first, tokens.row, tokens.batch)  # (batch, hidden)
        return tf.tanh(_dense(cls_states, backbone.pooled_dense))
    sums = tf.math.unsorted_segment_sum(x, tokens.row, tokens.batch)  # (batch, hidden)
    counts = tf.math.unsorted_segment_sum(tf.ones_like(x[:, :1]), tokens.row, tokens.batch)  # (batch, 1)
    return sums / tf.maximum(counts, 1.0)
