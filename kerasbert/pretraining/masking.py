"""Dynamic masked-LM masking of packed batches, run inside tf.data.

Three strategies, one output contract (that of keras-hub's `MaskedLMMaskGenerator`):
`token_ids` (masked), `mask_positions`, `mask_ids` (the original ids there) and
`mask_weights` (1.0 for a real prediction, 0.0 for padding slots), each padded to
`mask_selection_length`.

- `token` (BERT): keras-hub's `MaskedLMMaskGenerator` picks ceil(15%) of the
  selectable tokens of each row.
- `whole_word`: all pieces of a word (a token plus its `##` continuations) are
  masked together; words are taken in random order until the 15% budget is full.
- `span` (SpanBERT): spans of whole words with lengths ~ Geometric(p=0.2), clipped
  to 10 words, taken in random order until the budget is full.

Why 80/10/10: the model must predict the original token at every selected
position, but `[MASK]` never occurs at fine-tuning time. Replacing 10% with a
random token and leaving 10% unchanged forces a good representation of *every*
input token, not only of `[MASK]`. For words and spans, the whole unit gets one
decision, so a span is never half `[MASK]` and half visible.

Special tokens (`[PAD]`, `[CLS]`, `[SEP]`) are never selected.

Example:
    >>> masker = Masker(vocabulary_size=30, mask_token_id=4, unselectable_token_ids=[0, 2, 3])
    >>> out = masker(tf.constant([[2, 10, 11, 12, 3, 0]]))
    >>> sorted(out)
    ['mask_ids', 'mask_positions', 'mask_weights', 'token_ids']
"""

from __future__ import annotations

import math

import keras_hub
import tensorflow as tf


class Masker:
    """Callable that masks a dense batch of packed token ids `[batch, seq]`.

    Args:
        vocabulary_size: random replacements are drawn from `[0, vocabulary_size)`.
        mask_token_id: id of `[MASK]`.
        unselectable_token_ids: ids never selected (pad, cls, sep).
        strategy: "token", "whole_word" or "span".
        continuation: bool `[vocabulary_size]`, True for `##` pieces (whole_word, span).
        seed: optional int for the random ops; None uses the global seed.
    """

    def __init__(self, vocabulary_size, mask_token_id, unselectable_token_ids,
                 strategy="token", mask_selection_rate=0.15, mask_selection_length=20,
                 mask_token_rate=0.8, random_token_rate=0.1, continuation=None,
                 span_geometric_p=0.2, span_max_length=10, seed=None):
        if strategy not in ("token", "whole_word", "span"):
            raise ValueError(f"strategy must be token, whole_word or span. Received: {strategy!r}")
        if strategy != "token" and continuation is None:
            raise ValueError(f"strategy={strategy!r} needs the `continuation` table of the vocabulary.")
        self.vocabulary_size = vocabulary_size
        self.mask_token_id = mask_token_id
        self.unselectable_token_ids = list(unselectable_token_ids)
        self.strategy = strategy
        self.rate = mask_selection_rate
        self.length = mask_selection_length
        self.mask_token_rate = mask_token_rate
        self.random_token_rate = random_token_rate
        self.continuation = continuation
        self.span_p = span_geometric_p
        self.span_max = span_max_length if strategy == "span" else 1
        self.seed = seed
        self._calls = 0
        if strategy == "token":
            self._generator = keras_hub.layers.MaskedLMMaskGenerator(
                vocabulary_size=vocabulary_size,
                mask_selection_rate=mask_selection_rate,
                mask_token_id=mask_token_id,
                mask_selection_length=mask_selection_length,
                unselectable_token_ids=self.unselectable_token_ids,
                mask_token_rate=mask_token_rate,
                random_token_rate=random_token_rate,
            )

    def __call__(self, token_ids: tf.Tensor) -> dict[str, tf.Tensor]:
        if self.strategy == "token":
            out = self._generator(token_ids)
            out["mask_weights"] = tf.cast(out["mask_weights"], tf.float32)
            return out
        return self._mask_units(token_ids)

    def _uniform(self, shape):
        if self.seed is None:
            return tf.random.uniform(shape)
        self._calls += 1  # distinct op seeds for each draw
        return tf.random.uniform(shape, seed=self.seed * 1000 + self._calls)

    def _mask_units(self, token_ids):
        token_ids = tf.convert_to_tensor(token_ids)
        dtype = token_ids.dtype
        shape = tf.shape(token_ids)
        batch, seq = shape[0], shape[1]
        selectable = tf.reduce_all(  # (batch, seq)
            token_ids[..., None] != tf.constant(self.unselectable_token_ids, dtype), axis=-1)
        is_start = tf.logical_not(tf.gather(self.continuation, token_ids))  # (batch, seq)
        word = tf.cumsum(tf.cast(is_start, tf.int32), axis=1) - 1  # (batch, seq) word index
        # Selectable tokens per word; words of special tokens have length 0.
        word_length = tf.math.unsorted_segment_sum(  # (batch * seq,) -> (batch, seq)
            tf.reshape(tf.cast(selectable, tf.int32), [-1]),
            tf.reshape(word + tf.range(batch)[:, None] * seq, [-1]), batch * seq)
        word_length = tf.reshape(word_length, [batch, seq])  # (batch, words=seq)

        # Span length in words for a span starting at each word (1 for whole words).
        if self.span_max > 1:
            u = self._uniform([batch, seq])
            geometric = 1 + tf.floor(tf.math.log(u) / math.log(1.0 - self.span_p))
            span_words = tf.cast(tf.minimum(geometric, self.span_max), tf.int32)
        else:
            span_words = tf.ones([batch, seq], tf.int32)
        starts = tf.range(seq)
        # covers[b, s, w]: the span starting at word s covers word w.   (batch, seq, seq)
        covers = ((starts[None, None, :] >= starts[None, :, None])
                  & (starts[None, None, :] < starts[None, :, None] + span_words[:, :, None]))
        span_tokens = tf.reduce_sum(tf.cast(covers, tf.int32) * word_length[:, None, :], axis=2)
        candidate = span_tokens > 0  # (batch, seq): spans that hold selectable tokens

        # Take spans in random order while the running token count fits the budget.
        num_selectable = tf.reduce_sum(tf.cast(selectable, tf.float32), axis=1)
        budget = tf.minimum(tf.math.ceil(num_selectable * self.rate), float(self.length))
        priority = tf.where(candidate, self._uniform([batch, seq]), 2.0)  # (batch, seq)
        order = tf.argsort(priority, axis=1)
        sorted_tokens = tf.gather(span_tokens, order, batch_dims=1)
        if self.span_max > 1:
            # Spans: keep taking until the budget is reached; the last one is clipped below.
            running = tf.cumsum(sorted_tokens, axis=1, exclusive=True)
            fits = tf.cast(running, tf.float32) < budget[:, None]
        else:
            # Whole words: take a word only if all of it fits.
            fits = tf.cast(tf.cumsum(sorted_tokens, axis=1), tf.float32) <= budget[:, None]
        taken_sorted = fits & tf.gather(candidate, order, batch_dims=1)
        taken = tf.scatter_nd(  # back to span-start order, (batch, seq)
            tf.stack([tf.repeat(tf.range(batch), seq), tf.reshape(order, [-1])], axis=1),
            tf.reshape(taken_sorted, [-1]), [batch, seq])
        covers = covers & taken[:, :, None]
        word_selected = tf.reduce_any(covers, axis=1)  # (batch, seq) per word
        # One 80/10/10 decision per span: that of the first taken span covering the word.
        decision = tf.gather(self._uniform([batch, seq]), tf.argmax(tf.cast(covers, tf.int32), axis=1,
                                                                   output_type=tf.int32), batch_dims=1)
        selected = tf.gather(word_selected, word, batch_dims=1) & selectable  # (batch, seq)
        token_decision = tf.gather(decision, word, batch_dims=1)  # (batch, seq)
        if self.span_max > 1:
            # Clip to the budget: rank selected tokens by (span order, position), keep the
            # first `budget`, so only the tail of the last span is dropped.
            first_span = tf.argmax(tf.cast(covers, tf.int32), axis=1, output_type=tf.int32)
            span_rank = tf.gather(tf.argsort(order, axis=1), first_span, batch_dims=1)
            key = tf.gather(span_rank, word, batch_dims=1) * seq + tf.range(seq)[None, :]
            key = tf.where(selected, key, seq * seq + seq)  # unselected sort last
            token_rank = tf.argsort(tf.argsort(key, axis=1), axis=1)  # (batch, seq)
            selected &= tf.cast(token_rank, tf.float32) < budget[:, None]

        use_mask = selected & (token_decision < self.mask_token_rate)
        use_random = selected & (token_decision >= self.mask_token_rate) & (
            token_decision < self.mask_token_rate + self.random_token_rate)
        random_ids = tf.random.uniform(shape, maxval=self.vocabulary_size, dtype=dtype,
                                       seed=None if self.seed is None else self.seed)
        masked = tf.where(use_mask, tf.cast(self.mask_token_id, dtype), token_ids)
        masked = tf.where(use_random, random_ids, masked)

        # Gather positions of selected tokens, left-aligned and padded to `length`.
        positions = tf.ragged.boolean_mask(tf.broadcast_to(tf.range(seq), shape), selected)
        positions = positions.to_tensor(shape=[None, self.length])  # (batch, length)
        weights = tf.ragged.boolean_mask(tf.ones(shape, tf.float32), selected)
        weights = weights.to_tensor(shape=[None, self.length])
        return {
            "token_ids": masked,
            "mask_positions": tf.cast(positions, dtype),
            "mask_ids": tf.gather(token_ids, positions, batch_dims=1) * tf.cast(weights, dtype),
            "mask_weights": weights,
        }
