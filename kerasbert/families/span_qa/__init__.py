"""The extractive question-answering family as the task system sees it: a task of kind `span`
(SQuAD v1.1) reads SQuAD's JSON (kerasbert/families/span_qa/squad.py), its head is dense(2) on each
token's state (start and end logits), its loss `span_loss`, its metrics SQuAD's F1 and exact
match (as fractions), its signatures `<head>` (question, context -> the answer, a slice of the
context) and `<head>_tokens` (kerasbert/families/span_qa/features.py, export.py). Its settings
(`SpanSettings`) are the task's `sequence_length`, `doc_stride` (`SpanQa.doc_stride_at`),
`max_query_length`, `max_answer_length` and `max_windows`.

Example:
    >>> from kerasbert.tasks import get_task
    >>> squad = get_task("squad")
    >>> SPAN_QA.scores(squad, [["Denver Broncos", "the Broncos"], ["Paris"]], ["the Broncos", "Rome"])
    {'squad_f1': 0.5, 'squad_exact_match': 0.5}
"""

from __future__ import annotations

import dataclasses

from kerasbert.data.rows import DataError, ReadResult, file_exists
from kerasbert.errors import TaskError
from kerasbert.families.base import TokenFamily, TokenSettings
from kerasbert.families.span_qa.squad import read_squad, squad_scores
from kerasbert.families.span_qa.windows import context_room, default_doc_stride


@dataclasses.dataclass(frozen=True)
class SpanSettings(TokenSettings):
    """A span task's settings (`Task.settings`): `sequence_length` (0: the run's) and its context windows.

    >>> from kerasbert import Task
    >>> Task("qa", "span", settings=SpanSettings(sequence_length=192)).settings
    SpanSettings(sequence_length=192, doc_stride=0, max_query_length=64, max_answer_length=30, max_windows=16)
    """

    doc_stride: int = 0  # pieces between windows' starts; 0: the largest that skips no context, up to 128
    max_query_length: int = 64  # the question's pieces kept
    max_answer_length: int = 30  # the longest answer, in pieces
    max_windows: int = 16  # the longest context answered, in windows


class SpanQa(TokenFamily):
    name = "span_qa"
    settings = SpanSettings
    kinds = ("span",)
    format = "squad"
    metrics = {"span": ("f1", "exact_match")}
    architecture = "BertForQuestionAnswering"
    decoder_function = "answer"

    def check(self, task, fail):
        super().check(task, fail)
        settings = task.settings
        numbers = {"max_query_length": settings.max_query_length, "max_answer_length": settings.max_answer_length,
                   "max_windows": settings.max_windows}
        bad = {key: value for key, value in numbers.items() if not (isinstance(value, int) and value >= 1)}
        if bad:
            fail(f"{', '.join(bad)} must be positive integers. Received: {bad}")
        if not (isinstance(settings.doc_stride, int) and settings.doc_stride >= 0):
            fail(f"doc_stride must be a positive integer, or 0 (from the sequence length). "
                 f"Received: {settings.doc_stride!r}")
        if settings.sequence_length:
            self.check_run(task, settings.sequence_length)

    def check_run(self, task, sequence_length):
        self.doc_stride_at(task, sequence_length)  # TaskError when the stride would skip context

    def doc_stride_at(self, task, sequence_length: int) -> int:
        """`task`'s window stride when its windows are `sequence_length` tokens long: the
        declared `doc_stride`, else the largest that skips no context up to run_squad.py's 128
        (kerasbert/families/span_qa/windows.py). TaskError when the declared one would skip context, or
        when the question leaves a window no room for any.

        >>> from kerasbert.tasks import Task
        >>> SPAN_QA.doc_stride_at(Task("qa", "span"), 192), SPAN_QA.doc_stride_at(Task("qa", "span"), 384)
        (125, 128)
        """
        doc_stride, max_query_length = task.settings.doc_stride, task.settings.max_query_length
        room = context_room(sequence_length, max_query_length)
        if room < 1:
            raise TaskError(f"task {task.name!r}: sequence_length {sequence_length} leaves no room for context after "
                            f"a question of max_query_length {max_query_length} (and [CLS], [SEP], [SEP]); "
                            "raise sequence_length or lower max_query_length")
        if not doc_stride:
            return default_doc_stride(sequence_length, max_query_length)
        if doc_stride > room:
            raise TaskError(f"task {task.name!r}: doc_stride must be in [1, {room}] at sequence_length "
                            f"{sequence_length} (sequence_length - max_query_length - 3; a longer stride would skip "
                            f"context). Received: doc_stride={doc_stride}")
        return doc_stride

    # --- Files and features ---------------------------------------------------------------

    def read(self, task, path, max_bad_fraction):
        if not file_exists(path):
            raise DataError(f"{path}: file not found")
        squad = read_squad(path, max_bad_fraction)
        return ReadResult(squad.examples, squad.skipped, path, squad.bad_answers)

    def check_scored(self, task, preprocessor, examples, path, batch_size=128):
        import tensorflow as tf

        graph = preprocessor.graph_of(task)
        needs = {}  # question id -> windows its context takes
        for begin in range(0, len(examples), batch_size):
            chunk = examples[begin:begin + batch_size]
            counts = graph.windows(tf.constant([e.question for e in chunk]), tf.constant([e.context for e in chunk]),
                                   check=False)["window_count"].numpy()
            needs.update({e.uid: int(count) for e, count in zip(chunk, counts) if count > graph.max_windows})
        if needs:
            first, most = next(iter(needs.items())), max(needs.values())
            raise DataError(f"{path}: {len(needs)} question(s) have a context longer than task {task.name!r} answers "
                            f"(max_windows={graph.max_windows} windows of {graph.sequence_length} tokens at stride "
                            f"{graph.doc_stride}, about {graph.max_context_pieces} word pieces); first: id {first[0]!r}, "
                            f"{first[1]} windows. Its export would refuse them: set tasks.{task.name}.max_windows="
                            f"{most}, or leave them out")

    def graph(self, task, vocabulary, sequence_length):
        from kerasbert.families.span_qa.features import SpanGraph

        settings = task.settings
        return SpanGraph(vocabulary, sequence_length, self.doc_stride_at(task, sequence_length),
                         settings.max_query_length, settings.max_answer_length, settings.max_windows)

    def features(self, task, graph, examples, training):
        from kerasbert.families.span_qa.features import span_features

        features = span_features(graph, examples)
        labels = features.positions
        if training:
            print(f"   {task.name}: {len(labels)} windows of {len(examples)} questions, "
                  f"{features.windows_without_answer} without the answer" + (
                      f"; {features.skipped} questions skipped (their answer covers no word piece)"
                      if features.skipped else ""))
        return features, labels

    # --- Model ----------------------------------------------------------------------------

    def head_units(self, task):
        return 2  # start and end

    def loss(self, model, name, x, y):
        import tensorflow as tf

        from kerasbert.families.span_qa.features import span_loss

        # (batch, 2): the answer's first and last piece
        return span_loss(tf.reshape(y, [-1, 2]), model.head_output(name, x, training=True), x["padding_mask"])

    # --- Evaluation and serving -----------------------------------------------------------

    def decoder(self, predict, graph):
        from kerasbert.families.span_qa.export import SpanSignatures

        return SpanSignatures(predict, graph)

    def predict(self, function, examples, batch_size):
        from kerasbert.families.span_qa.features import predict_answers

        answers = predict_answers(function, examples, batch_size)
        return [answers[example.uid] for example in examples]

    def references(self, task, examples):
        return [[answer.text for answer in example.answers] for example in examples]

    def scores(self, task, references, predictions):
        scores = squad_scores({str(i): answer for i, answer in enumerate(predictions)},
                              {str(i): answers for i, answers in enumerate(references)})
        names = task.metric_names
        return {names[0]: scores["squad_f1"] / 100, names[1]: scores["squad_exact_match"] / 100}

    def prediction_row(self, task, example, reference, prediction):
        return [example.uid, " | ".join(reference), prediction]

    def warmup_inputs(self, task, sentence, other):
        return {"question": [b"what is warmed up ?"], "context": sentence}

    # --- transformers ---------------------------------------------------------------------

    def transformers_head(self, task):
        return "qa_outputs"

    def transformers_labels(self, task):
        return ["LABEL_0", "LABEL_1"]


SPAN_QA = SpanQa()
