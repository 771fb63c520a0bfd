"""The extractive question-answering family (SQuAD v1.1): windows, features, model, loss.

Each example is packed as `[CLS] question [SEP] window [SEP]`, where the windows cover
the context's word pieces `sequence_length - len(question) - 3` at a time, each starting
`doc_stride` pieces after the last (the question cut to `max_query_length` pieces), as
BERT's `run_squad.py` does. Training uses every window: one that holds the whole answer
points at the answer's first and last pieces; one that does not points both at [CLS]
(position 0), as BERT does. The windows are built by one graph function
(`SpanGraph.windows`), in training and in the exported signature alike.

Interface for the task system (plain values in, no config objects):
    reader:    kerasbert.families.span_qa.squad.read_squad(path) -> SquadFile(.examples: [QaExample(uid, question,
               context, answers)])
    graph:     SpanGraph(vocabulary, sequence_length=384, doc_stride=128, max_query_length=64,
               max_answer_length=30, max_windows=16)
    features:  span_features(graph, examples) -> SpanFeatures (numpy arrays, counts): token_ids,
               segment_ids, padding_mask, and positions int32 (windows, 2): the answer's (start,
               end) token positions, (0, 0) for none
    loss:      span_loss(y, logits, padding_mask)  (mean of the start and end cross-entropies
               over the real tokens; logits (batch, seq, 2): start, end)
    predict:   predict_answers(answer, examples) -> {uid: answer text} (through the export's graph)
    metrics:   kerasbert.families.span_qa.squad.squad_scores(predictions, {uid: [reference texts]})
               -> {"squad_exact_match", "squad_f1"}
    export:    kerasbert.families.span_qa.export.SpanSignatures(predict, graph): `answer` (question,
               context) and its token-id variant; see that module.

The task system (a task of kind `span`, kerasbert/tasks.py) trains it: its batches
(`kerasbert.finetuning.data.family_dataset`) and head (`MultitaskBert`) beside the other tasks'.

Example:
    >>> from kerasbert.families.span_qa.squad import read_squad
    >>> graph = SpanGraph(vocabulary, sequence_length=16, doc_stride=4, max_query_length=4)  # SQuAD's: 384, 128, 64
    >>> features = span_features(graph, read_squad(squad_file).examples)
    >>> features.token_ids.shape, features.positions.tolist()  # 2 questions, 2 windows each: (first, last) piece
    ((4, 16), [[4, 5], [0, 0], [11, 12], [7, 8]])
    >>> logits = tf.zeros([4, 16, 2])  # the model's start and end logits (windows, seq, 2)
    >>> span_loss(features.positions, logits, features.padding_mask)
    <tf.Tensor: shape=(), dtype=float32, numpy=2.668768882751465>
"""

from __future__ import annotations

import dataclasses
import logging

import numpy as np
import tensorflow as tf

from kerasbert.families.span_qa.squad import QaExample
from kerasbert.families.span_qa.windows import context_room
from kerasbert.families.wordpiece import OffsetTokenizer
from kerasbert.packing import ENCODER_KEYS, pack_segments
from kerasbert.tokenization import special_token_ids

log = logging.getLogger(__name__)


class SpanGraph(tf.Module):
    """The graph pieces shared by training features and the export: question and context
    -> the packed windows, and where each window's context pieces come from.

    A context may need at most `max_windows` windows in the export (`windows(check=True)`):
    with the defaults, 2,237 word pieces or more (about 1,700 English words), at least
    `sequence_length - max_query_length - 3 + (max_windows - 1) * doc_stride`; a longer
    one is an InvalidArgumentError, as are an empty question or context.

    Example:
        >>> graph = SpanGraph(vocabulary, sequence_length=8, doc_stride=2, max_query_length=2)
        >>> graph.windows(tf.constant(["the cat"]), tf.constant(["the dog sat on the mat"]))["window_start"]
        <tf.Tensor: shape=(3,), dtype=int64, numpy=array([0, 2, 4])>
    """

    def __init__(self, vocabulary: list[str], sequence_length: int = 384, doc_stride: int = 128,
                 max_query_length: int = 64, max_answer_length: int = 30, max_windows: int = 16):
        super().__init__(name="span_graph")
        room = context_room(sequence_length, max_query_length)
        if max_query_length < 1 or room < 1:
            raise ValueError(f"sequence_length must exceed max_query_length + 3. Received: "
                             f"sequence_length={sequence_length}, max_query_length={max_query_length}")
        if not 1 <= doc_stride <= room:
            raise ValueError(f"doc_stride must be in [1, sequence_length - max_query_length - 3 = {room}] "
                             f"(else windows would skip context). Received: doc_stride={doc_stride}")
        if max_answer_length < 1 or max_windows < 1:
            raise ValueError(f"max_answer_length and max_windows must be positive. Received: "
                             f"max_answer_length={max_answer_length}, max_windows={max_windows}")
        self.sequence_length, self.doc_stride = sequence_length, doc_stride
        self.max_query_length, self.max_answer_length = max_query_length, max_answer_length
        self.max_windows = max_windows
        self.tokenizer = OffsetTokenizer(vocabulary)
        self.ids = special_token_ids(vocabulary)

    @property
    def max_context_pieces(self) -> int:
        """The longest context (in word pieces) the export always answers, whatever the question."""
        return self.sequence_length - self.max_query_length - 3 + (self.max_windows - 1) * self.doc_stride

    def windows(self, question: tf.Tensor, context: tf.Tensor, check: bool = True) -> dict:
        """question, context: string (batch,) -> per window (W windows over the batch):
        packed `token_ids`, `segment_ids`, `padding_mask` (W, width); `example` (its row),
        `window_start` (its first context piece's index in the context), `window_length`
        (its context pieces) and `context_offset` (the packed position of its first context
        piece), each (W,); and per example `window_count` (batch,) and the context pieces'
        byte spans `context_starts`, `context_ends`, ragged (batch, pieces). `check` enforces
        the limits above."""
        question_ids = self.tokenizer.tokenize_with_offsets(question)[0][:, :self.max_query_length]
        context_ids, context_starts, context_ends = self.tokenizer.tokenize_with_offsets(context)
        question_length, context_length = question_ids.row_lengths(), context_ids.row_lengths()  # (batch,)
        room = self.sequence_length - 3 - question_length  # context pieces per window
        count = 1 + (tf.maximum(context_length - room, 0) + self.doc_stride - 1) // self.doc_stride  # (batch,)
        checks = []
        if check:
            checks = [
                tf.debugging.assert_positive(question_length, message="empty question (no word piece)"),
                tf.debugging.assert_positive(context_length, message="empty context (no word piece)"),
                tf.debugging.assert_less_equal(
                    count, tf.constant(self.max_windows, tf.int64),
                    message=f"context too long: it needs more than {self.max_windows} windows of "
                            f"{self.sequence_length} tokens at stride {self.doc_stride} (at most "
                            f"{self.max_context_pieces} word pieces are always answered)"),
            ]
        with tf.control_dependencies(checks):
            example = tf.repeat(tf.range(tf.shape(count, out_type=tf.int64)[0]), count)  # (W,)
        window_start = tf.ragged.range(count).flat_values * self.doc_stride  # (W,)
        window_length = tf.maximum(tf.minimum(tf.gather(room, example), tf.gather(context_length, example)
                                              - window_start), 0)
        first = tf.gather(context_ids.row_splits, example) + window_start  # into the flat pieces
        pieces = tf.gather(context_ids.flat_values, tf.ragged.range(first, first + window_length))  # (W, None)
        packed = pack_segments([tf.gather(question_ids, example), pieces], self.sequence_length, self.ids)
        return {**packed, "window_count": count, "example": example, "window_start": window_start,
                "window_length": window_length, "context_offset": tf.gather(question_length, example) + 2,
                "context_starts": context_starts, "context_ends": context_ends}


@dataclasses.dataclass(frozen=True)
class SpanFeatures:
    token_ids: np.ndarray  # int32 (windows, sequence_length)
    segment_ids: np.ndarray
    padding_mask: np.ndarray
    positions: np.ndarray  # int32 (windows, 2): the answer's first and last piece; (0, 0) if not in the window
    windows_without_answer: int
    skipped: int  # examples whose answer covers no word piece (whitespace or stripped characters only)


def answer_pieces(starts: list[int], ends: list[int], begin: int, end: int) -> tuple[int, int] | None:
    """The first and last context piece overlapping bytes [begin, end), or None.

    Example:
        >>> answer_pieces([0, 4, 8], [3, 7, 11], 4, 11)
        (1, 2)
    """
    inside = [i for i, (s, e) in enumerate(zip(starts, ends)) if e > begin and s < end]
    return (inside[0], inside[-1]) if inside else None


def span_features(graph: SpanGraph, examples: list[QaExample], batch_size: int = 128) -> SpanFeatures:
    """Every window of every example, with the first reference answer's token positions."""
    length = graph.sequence_length
    rows = {name: [] for name in (*ENCODER_KEYS, "positions")}
    without = skipped = 0
    for begin in range(0, len(examples), batch_size):
        chunk = examples[begin:begin + batch_size]
        windows = graph.windows(tf.constant([e.question for e in chunk]), tf.constant([e.context for e in chunk]),
                                check=False)
        packed = [windows[key].numpy() for key in ENCODER_KEYS]
        starts, ends = windows["context_starts"].to_list(), windows["context_ends"].to_list()
        spans = []
        for row, example in enumerate(chunk):
            answer = example.answers[0]
            byte_begin = len(example.context[:answer.start].encode("utf-8"))
            byte_end = byte_begin + len(answer.text.encode("utf-8"))
            spans.append(answer_pieces(starts[row], ends[row], byte_begin, byte_end))
        skipped += sum(span is None for span in spans)
        for w, (row, window_start, window_length, offset) in enumerate(zip(
                *(windows[key].numpy() for key in ("example", "window_start", "window_length", "context_offset")))):
            span = spans[row]
            if span is None:
                continue
            first, last = span
            if window_start <= first and last < window_start + window_length:
                positions = (offset + first - window_start, offset + last - window_start)
            else:
                positions, without = (0, 0), without + 1
            for key, values in zip(ENCODER_KEYS, packed):
                rows[key].append(np.pad(values[w], (0, length - values.shape[1])).astype(np.int32))
            rows["positions"].append(np.array(positions, np.int32))
    if skipped:
        log.warning("span features: %d examples skipped (their answer covers no word piece)", skipped)
    arrays = {key: np.stack(values) if values else np.zeros((0, 2 if key == "positions" else length), np.int32)
              for key, values in rows.items()}
    return SpanFeatures(**arrays, windows_without_answer=without, skipped=skipped)


def span_loss(positions, logits, padding_mask=None):
    """The mean of the start and end positions' cross-entropies, as BERT's run_squad.py; with
    `padding_mask` (batch, seq), over the real tokens only (run_squad.py's softmax also spans the
    padding, whose share then depends on how a batch was padded)."""
    positions = tf.cast(positions, tf.int32)  # (batch, 2)
    logits = tf.cast(logits, tf.float32)
    if padding_mask is not None:
        logits = tf.where(tf.cast(padding_mask, tf.bool)[:, :, None], logits, -1e9)
    logits = tf.transpose(logits, [0, 2, 1])  # (batch, 2, seq)
    return tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(positions, logits))


def predict_answers(answer, examples: list[QaExample], batch_size: int = 32) -> dict[str, str]:
    """{uid: answer} through the export's `answer` function (`SpanSignatures.answer`, or a
    loaded SavedModel's signature)."""
    predictions = {}
    for begin in range(0, len(examples), batch_size):
        chunk = examples[begin:begin + batch_size]
        outputs = answer(question=tf.constant([e.question for e in chunk]),
                         context=tf.constant([e.context for e in chunk]))
        for example, text in zip(chunk, outputs["answer"].numpy()):
            predictions[example.uid] = text.decode("utf-8")
    return predictions
