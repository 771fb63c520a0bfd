"""The sentence embedding of one request compiled by XLA: its tokens padded up to one of a few
widths, for serving graphs (`pipelines.export --xla`).

At batch 1 about half of the unpadded encoder's time (kerasbert/models/unpadded.py, ~29 tokens)
is TensorFlow's dispatch of its ~1,800 ops rather than matrix products; XLA runs the padded
backbone as a few fused kernels instead. XLA compiles one program per input shape, so the tokens
are padded up to the next of `BUCKETS` (capped at the sequence length): a handful of programs,
each compiled on the first request of its width. Padded keys are masked as keras-hub masks
them, so the embedding equals the unpadded encoder's within float rounding (tests/test_export.py).
Batches wider than one row keep the unpadded encoder, whose work is the real tokens only.

TF Serving's binary runs XLA:CPU only with `--xla_cpu_compilation_enabled` (model_servers/main.cc;
without it the first request fails); `python -m serving` runs it as it is.

Example (`model`, `preprocessor`: a tiny MultitaskBert and its preprocessor):
    >>> int(bucket_width(tf.constant(20), sequence_length=128))  # 20 tokens run as 32
    32
    >>> packed = preprocessor.pack(tf.constant(["the cat sat on the mat ."]))
    >>> width = int(tf.reduce_sum(packed["padding_mask"]))  # the real tokens only, as the export packs them
    >>> tokens = [packed[key][:, :width] for key in ENCODER_KEYS]
    >>> embed = bucketed_embedding(model, preprocessor.sequence_length)
    >>> bool(tf.reduce_max(tf.abs(embed(*tokens) - model.embed(packed))) < 1e-5)
    True
"""

from __future__ import annotations

import tensorflow as tf

from kerasbert.packing import ENCODER_KEYS

BUCKETS = (16, 32, 64, 128)  # token counts XLA compiles the encoder for, each up to the sequence length


def bucket_width(tokens: tf.Tensor, sequence_length: int) -> tf.Tensor:
    """The width a row of `tokens` real tokens is padded to: the smallest bucket that holds it."""
    widths = sorted({min(b, sequence_length) for b in BUCKETS} | {sequence_length})
    return tf.gather(widths, tf.minimum(tf.searchsorted(widths, tokens[None])[0], len(widths) - 1))


def bucketed_embedding(model, sequence_length: int):
    """(token_ids, segment_ids, padding_mask) -> the sentence embedding, the padded forward pass
    compiled by XLA at the row's bucket width."""
    compiled = tf.function(lambda *tokens: model.embed(dict(zip(ENCODER_KEYS, tokens)), unpadded=False),
                           jit_compile=True, autograph=False)

    def embed(*tokens):
        width = tf.shape(tokens[0])[1]
        padding = [[0, 0], [0, bucket_width(width, sequence_length) - width]]
        return compiled(*(tf.pad(t, padding) for t in tokens))

    return embed
