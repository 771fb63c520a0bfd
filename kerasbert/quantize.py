"""int8 serving of the encoder's matrix products on oneDNN's quantized kernels, for exports
(`pipelines.export --precision int8`).

Each projection of each block (the fused query-key-value product, the attention output, the
feed-forward's two) keeps its weights as int8, one scale a matrix, in variables of their own
(`Int8Weights`, a `tf.Module` the export tracks). At serving time its input, a (tokens, in)
float32 matrix, is shifted to start at 0 and quantized to uint8 over its own range, call by call
(ONNX Runtime's dynamic quantization takes the same per-call range), then
`QuantizedMatMulWithBiasAndDequantize` multiplies uint8 by int8 into int32 and returns float32
with the bias added; the shift comes back through the bias (x = x' + low, so
x @ W = x' @ W + low * column sums of W). That op is TensorFlow core's (nn_ops.cc), its CPU
kernel oneDNN's (mkl_qmatmul_op.cc: VNNI's u8 x s8 products where the CPU has them), as every
x86 Linux TensorFlow since 2.9 runs them; it takes uint8 inputs only in its SCALED mode, one
weight scale a matrix (a vector of scales fails a CHECK in 2.21, so none is passed). Sums,
LayerNorms, softmax, GELU and attention's own products stay float32, as the [CLS] pooler and the
heads do. `Bfloat16Weights` does the same for `--precision bf16`: the kernels stored as bfloat16,
the products in bfloat16 (oneDNN's AVX512-BF16 / AMX kernels where the CPU has them).

Example (`encoder`: a BertBackbone with hidden_dim 8; the products of its first block):
    >>> weights = Int8Weights(encoder)
    >>> block = keras_hub_compat.block_parts(encoder.transformer_layers[0])
    >>> x = tf.random.stateless_normal((5, 8), seed=(1, 2))
    >>> exact = tf.nn.bias_add(tf.matmul(x, tf.reshape(block.intermediate.kernel, [8, -1])), block.intermediate.bias)
    >>> found = weights.dense(x, block.intermediate)
    >>> float(tf.norm(found - exact) / tf.norm(exact)) < 0.05
    True
"""

from __future__ import annotations

import math

import numpy as np
import tensorflow as tf

from kerasbert.compat import keras_hub as keras_hub_compat


def kernel_matrix(layer) -> tf.Tensor:
    """A Dense or EinsumDense kernel as (in, out); the attention output's (heads, head_dim, hidden)
    as (heads * head_dim, hidden)."""
    kernel = layer.kernel
    if kernel.shape.rank == 3 and layer.name == "attention_output":
        return tf.reshape(kernel, [-1, kernel.shape[-1]])
    return tf.reshape(kernel, [kernel.shape[0], -1])


def query_key_value_weights(attention) -> tuple[tf.Tensor, tf.Tensor]:
    """(kernel (hidden, 3 * hidden), bias): the query, key and value projections side by side,
    the query's scaled by 1/sqrt(head_dim) as keras scales the query."""
    scale = 1.0 / math.sqrt(attention.query_dense.kernel.shape[-1])
    parts = ((attention.query_dense, scale), (attention.key_dense, 1.0), (attention.value_dense, 1.0))
    kernel = tf.concat([kernel_matrix(dense) * factor for dense, factor in parts], axis=1)
    bias = tf.concat([tf.reshape(dense.bias, [-1]) * factor for dense, factor in parts], axis=0)
    return kernel, bias


class Int8Product(tf.Module):
    """One projection's int8 weights: `kernel` int8 (in, out), `kernel_max` (its scale is
    kernel_max / 127), `column_sums` of the dequantized kernel (out,), and the float32 `bias`."""

    def __init__(self, kernel: tf.Tensor, bias: tf.Tensor):
        super().__init__()
        kernel = np.asarray(kernel, np.float32)
        kernel_max = max(float(np.abs(kernel).max()), 1e-12)
        quantized = np.clip(np.round(kernel / kernel_max * 127), -127, 127).astype(np.int8)
        self.kernel = tf.Variable(quantized, trainable=False, name="kernel_int8")
        self.kernel_max = tf.Variable(kernel_max, trainable=False, name="kernel_max")
        self.column_sums = tf.Variable(quantized.astype(np.float32).sum(0) * kernel_max / 127, trainable=False,
                                       name="column_sums")
        self.bias = tf.Variable(np.asarray(bias, np.float32).reshape(-1), trainable=False, name="bias")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        """x (tokens, in) float32 -> x @ kernel + bias (tokens, out) float32."""
        low = tf.minimum(tf.reduce_min(x), 0.0)  # 0 for no tokens (the minimum of nothing is +inf)
        span = tf.maximum(tf.maximum(tf.reduce_max(x), 0.0) - low, 1e-6)
        quantized = tf.raw_ops.QuantizeV2(input=x - low, min_range=0.0, max_range=span, T=tf.quint8, mode="SCALED")
        return tf.raw_ops.QuantizedMatMulWithBiasAndDequantize(
            a=quantized.output, b=tf.bitcast(self.kernel, tf.qint8), bias=self.bias + low * self.column_sums,
            min_a=quantized.output_min, max_a=quantized.output_max, min_b=-self.kernel_max, max_b=self.kernel_max,
            min_freezed_output=-1.0, max_freezed_output=1.0, Toutput=tf.float32, input_quant_mode="SCALED")


class Bfloat16Product(tf.Module):
    """One projection's kernel stored as bfloat16 (in, out) and its float32 `bias`. Cast once here
    rather than on every call: a batch-1 request ran 1.4x as fast (docs/benchmarks.md)."""

    def __init__(self, kernel: tf.Tensor, bias: tf.Tensor):
        super().__init__()
        self.kernel = tf.Variable(tf.cast(kernel, tf.bfloat16), trainable=False, name="kernel_bfloat16")
        self.bias = tf.Variable(tf.reshape(bias, [-1]), trainable=False, name="bias")

    def __call__(self, x: tf.Tensor) -> tf.Tensor:
        """x (tokens, in) float32 -> x @ kernel + bias (tokens, out) float32, the product in bfloat16."""
        return tf.nn.bias_add(tf.cast(tf.matmul(tf.cast(x, tf.bfloat16), self.kernel), x.dtype), self.bias)


COMPUTE_DTYPES = ("float32", "bfloat16", "int8")  # an export's; float32 also as None


def serving_precision(backbone, compute_dtype: str | None):
    """What kerasbert/models/unpadded.py takes as its `compute_dtype` for an export's
    `compute_dtype`: None (float32), or the backbone's `Bfloat16Weights` ("bfloat16") or
    `Int8Weights` ("int8"), which the export must track."""
    weights = {"bfloat16": Bfloat16Weights, "int8": Int8Weights}.get(compute_dtype)
    return None if weights is None else weights(backbone)


class ServingWeights(tf.Module):
    """The reduced-precision products of every block of a keras-hub BertBackbone (one `product`
    each), by the layer they replace; kerasbert/models/unpadded.py calls `dense` and
    `query_key_value` in place of its float32 ones."""

    product = None  # the class of one projection's weights: Int8Product, Bfloat16Product

    def __init__(self, backbone):
        super().__init__()
        self.products, self._index = [], {}
        for block in map(keras_hub_compat.block_parts, backbone.transformer_layers):
            self._add(block.attention, *query_key_value_weights(block.attention))
            for layer in (block.attention.output_dense, block.intermediate, block.output):
                self._add(layer, kernel_matrix(layer), layer.bias)

    def _add(self, layer, kernel, bias) -> None:
        self._index[id(layer)] = len(self.products)
        self.products.append(self.product(kernel, bias))

    def dense(self, x: tf.Tensor, layer) -> tf.Tensor:
        """`layer`'s projection of x (tokens, in)."""
        return self.products[self._index[id(layer)]](x)

    def query_key_value(self, x: tf.Tensor, attention) -> tf.Tensor:
        """(tokens, 3 * hidden): the scaled query, the key and the value, from one product."""
        return self.products[self._index[id(attention)]](x)


class Int8Weights(ServingWeights):
    """int8 products on oneDNN's quantized kernels (`Int8Product`)."""

    product = Int8Product


class Bfloat16Weights(ServingWeights):
    """bfloat16 products, the kernels stored as bfloat16 (`Bfloat16Product`)."""

    product = Bfloat16Product
