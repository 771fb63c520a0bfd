"""The span family's serving signatures: a question and a context in, the answer out.

    answer(question, context: string (batch,)) ->
        answer        string  (batch,)  a slice of the original context
        answer_start  int64   (batch,)  character offset into context
        answer_end    int64   (batch,)  exclusive: context[answer_start:answer_end] == answer
        score         float32 (batch,)  P(start) * P(end) of the span in its window (softmax over
                                        the window's context pieces)
    answer_tokens(token_ids, segment_ids, padding_mask: int32 (batch, seq)) ->
        start_position, end_position int64 (batch,)  the best span's pieces in segment 1; score

All of it runs in the graph: the context's windows (`SpanGraph.windows`), the model over
every window of the batch at once, and the best span over all windows of each example: the
highest start + end logit with both ends on context pieces, end not before start, at
most `max_answer_length` pieces, starting in the window where its first piece has the
most context (`max_context`), as BERT's run_squad.py chooses. An empty question or
context, a context longer than `SpanGraph.max_windows` windows, or text that is not valid
UTF-8 is an InvalidArgumentError naming the problem.

(named by the task's head: `answer` and `answer_tokens` for the shipped `squad`).

Example:
    >>> import functools
    >>> graph = preprocessor.graph_of(model.task_specs["squad"])  # a SpanGraph
    >>> signatures = SpanSignatures(functools.partial(model.head_output, "squad"), graph)
    >>> outputs = signatures.answer(question=tf.constant(["who sat"]), context=tf.constant(["The cat sat."]))
    >>> sorted(outputs)
    ['answer', 'answer_end', 'answer_start', 'score']
    >>> sorted(signatures.functions("answer"))  # {name: (function, input signature)}, for kerasbert.export
    ['answer', 'answer_tokens']
"""

from __future__ import annotations

import tensorflow as tf

from kerasbert.families.span_qa.features import SpanGraph
from kerasbert.families.span_qa.windows import context_room
from kerasbert.families.wordpiece import GRAPH_BYTES_PER_BYTE, char_offsets, check_utf8
from kerasbert.packing import ENCODER_KEYS

TEXTS = [tf.TensorSpec([None], tf.string, name="question"), tf.TensorSpec([None], tf.string, name="context")]
TOKENS = [tf.TensorSpec([None, None], tf.int32, name=key) for key in ENCODER_KEYS]
EXCLUDED = -1e9  # the logit of a piece that cannot be an answer's end


def best_spans(start_logits, end_logits, allowed, max_answer_length: int, starts_allowed=None) -> dict:
    """The best span of each row: start_logits, end_logits (rows, seq) float, allowed (rows,
    seq) bool -> `start`, `end` positions (int64), `logit` (start + end logit) and
    `probability` (their softmax probabilities' product over the allowed pieces), (rows,).
    `starts_allowed` (rows, seq) bool, if given, also limits where a span may start. A row
    with no allowed piece gets logit about -2e9.

    Example:
        >>> allowed = tf.constant([[False, True, True]])
        >>> best_spans(tf.constant([[0., 3., 1.]]), tf.constant([[0., 0., 2.]]), allowed, 2)["end"]
        <tf.Tensor: shape=(1,), dtype=int64, numpy=array([2])>
    """
    start_logits = tf.where(allowed, start_logits, EXCLUDED)  # (rows, seq)
    end_logits = tf.where(allowed, end_logits, EXCLUDED)
    width = tf.shape(end_logits)[1]
    padded = tf.pad(end_logits, [[0, 0], [0, max_answer_length]], constant_values=EXCLUDED)
    # ends[r, p, k]: the end logit k pieces after start p, so k + 1 pieces long.
    ends = tf.stack([padded[:, k:k + width] for k in range(max_answer_length)], axis=-1)  # (rows, seq, A)
    span_starts = start_logits if starts_allowed is None else tf.where(starts_allowed, start_logits, EXCLUDED)
    spans = span_starts[:, :, tf.newaxis] + ends  # (rows, seq, A)
    flat = tf.reshape(spans, [tf.shape(spans)[0], -1])  # (rows, seq * A)
    best = tf.argmax(flat, axis=-1)  # (rows,)
    logit = tf.reduce_max(flat, axis=-1)
    start = best // max_answer_length
    normaliser = tf.reduce_logsumexp(start_logits, axis=-1) + tf.reduce_logsumexp(end_logits, axis=-1)
    return {"start": start, "end": start + best % max_answer_length, "logit": logit,
            "probability": tf.exp(logit - normaliser)}


def max_context(windows: dict, allowed) -> tf.Tensor:
    """Whether each window position holds a context piece in the window where that piece has
    the most context: bool (W, width), from `SpanGraph.windows`' windows and `allowed`, bool
    (W, width), the positions of context pieces. A piece's context in a window is
    min(pieces before it, pieces after it) + 0.01 * the window's context pieces, the first
    window winning a tie: run_squad.py's `_check_is_max_context`, which keeps a span from
    starting where a window's edge cuts off what comes before or after it (Model Garden's
    squad_lib does the same; transformers' run_qa.py does not). Computed on integers
    (100 times the score), so exactly.

    Example:
        >>> graph = SpanGraph(vocabulary, sequence_length=11, doc_stride=2, max_query_length=2)  # a 2-piece question: 6 a window
        >>> context = tf.constant(["the dog sat on the mat the cat ran fast"])  # 10 context pieces
        >>> windows = graph.windows(tf.constant(["the cat"]), context)
        >>> position = tf.range(tf.shape(windows["token_ids"], out_type=tf.int64)[1])[tf.newaxis, :]
        >>> offset = windows["context_offset"][:, tf.newaxis]
        >>> allowed = (position >= offset) & (position < offset + windows["window_length"][:, tf.newaxis])
        >>> tf.cast(max_context(windows, allowed), tf.int32).numpy()  # piece 2: min(2, 3) in window 0, min(0, 5) in 1
        array([[0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0],
               [0, 0, 0, 0, 0, 0, 1, 1, 0, 0, 0],
               [0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 0]], dtype=int32)
    """
    position = tf.range(tf.shape(allowed, out_type=tf.int64)[1])[tf.newaxis, :]  # (1, width)
    before = position - windows["context_offset"][:, tf.newaxis]  # pieces before it in its window (W, width)
    length = windows["window_length"][:, tf.newaxis]
    score = 100 * tf.minimum(before, length - 1 - before) + length
    rank = tf.ragged.range(windows["window_count"]).flat_values[:, tf.newaxis]  # the window's index in its example
    context = tf.where(allowed, score * (tf.reduce_max(windows["window_count"]) + 1) - rank, -1)  # a tie: the first
    # Each position's piece, numbered over the batch's contexts.
    first_piece = tf.gather(windows["context_starts"].row_starts(), windows["example"]) + windows["window_start"]
    piece = tf.where(allowed, first_piece[:, tf.newaxis] + before, 0)
    most = tf.math.unsorted_segment_max(tf.reshape(context, [-1]), tf.reshape(piece, [-1]),
                                        tf.shape(windows["context_starts"].flat_values, out_type=tf.int64)[0])
    return allowed & (context == tf.gather(most, piece))


class SpanSignatures:
    """The serving functions of a span head: `predict` (token tensors {token_ids, segment_ids,
    padding_mask} -> logits (batch, seq, 2), start then end, e.g. `MultitaskBert.head_output`
    of the task) and its `SpanGraph`. Holds no variables: the caller's export tracks the
    model and the graph (whose tokenizer tables the functions use)."""

    def __init__(self, predict, graph: SpanGraph):
        self.predict, self.graph = predict, graph

    def functions(self, head: str = "answer") -> dict:
        """{name: (function, input signature)}: `head` (question, context) and `<head>_tokens`."""
        return {head: (self.answer, TEXTS), f"{head}_tokens": (self.answer_tokens, TOKENS)}

    def row_costs(self, head: str = "answer") -> dict:
        """What a row of `head` costs, for assets.extra/row_costs.json (serving/row_costs.py): the
        context's windows of the sequence, and the graph's memory per byte of both texts."""
        graph = self.graph
        return {head: {"question": {"graph_bytes_per_byte": GRAPH_BYTES_PER_BYTE},
                       "context": {"graph_bytes_per_byte": GRAPH_BYTES_PER_BYTE,
                                   "sequence_length": graph.sequence_length,
                                   "room": context_room(graph.sequence_length, graph.max_query_length),
                                   "doc_stride": graph.doc_stride, "max_windows": graph.max_windows}}}

    def _logits(self, tokens: dict):
        logits = tf.cast(self.predict({key: tokens[key] for key in ENCODER_KEYS}), tf.float32)
        return logits[:, :, 0], logits[:, :, 1]  # (rows, seq) each

    def answer_tokens(self, token_ids, segment_ids, padding_mask):
        start_logits, end_logits = self._logits(
            {"token_ids": token_ids, "segment_ids": segment_ids, "padding_mask": padding_mask})
        allowed = (segment_ids == 1) & (padding_mask == 1) & (token_ids != self.graph.ids["sep"])
        best = best_spans(start_logits, end_logits, allowed, self.graph.max_answer_length)
        return {"start_position": best["start"], "end_position": best["end"], "score": best["probability"]}

    def answer(self, question, context):
        question, context = check_utf8(question, "question"), check_utf8(context, "context")
        windows = self.graph.windows(question, context)
        start_logits, end_logits = self._logits(windows)  # (W, width)
        position = tf.range(tf.shape(start_logits, out_type=tf.int64)[1])[tf.newaxis, :]  # (1, width)
        offset = windows["context_offset"][:, tf.newaxis]  # (W, 1)
        allowed = (position >= offset) & (position < offset + windows["window_length"][:, tf.newaxis])
        best = best_spans(start_logits, end_logits, allowed, self.graph.max_answer_length,
                          max_context(windows, allowed))  # each (W,)

        # The best window of each example (windows are in example order).
        per_example = tf.RaggedTensor.from_row_lengths(best["logit"], windows["window_count"], validate=False)
        chosen = tf.argmax(per_example.to_tensor(default_value=2 * EXCLUDED), axis=-1) + per_example.row_starts()
        # Window positions -> the context's pieces -> bytes of the original context.
        first_piece = tf.gather(windows["window_start"] + best["start"] - windows["context_offset"], chosen)
        last_piece = tf.gather(windows["window_start"] + best["end"] - windows["context_offset"], chosen)
        starts, ends = windows["context_starts"], windows["context_ends"]  # ragged (batch, pieces)
        start_byte = tf.gather(starts.flat_values, starts.row_starts() + first_piece)  # (batch,)
        end_byte = tf.gather(ends.flat_values, ends.row_starts() + last_piece)

        def in_characters(byte_offsets):  # (batch,) -> (batch,)
            return char_offsets(context, tf.RaggedTensor.from_tensor(byte_offsets[:, tf.newaxis])).flat_values

        return {
            "answer": tf.strings.substr(context, start_byte, end_byte - start_byte),
            "answer_start": in_characters(start_byte),
            "answer_end": in_characters(end_byte),
            "score": tf.gather(best["probability"], chosen),
        }
