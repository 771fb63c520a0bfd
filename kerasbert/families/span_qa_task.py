"""The extractive question-answering family as the task system sees it: a task of kind `span`
(SQuAD v1.1) reads SQuAD's JSON (kerasbert/families/squad.py), its head is dense(2) on each
token's state (start and end logits), its loss `span_loss`, its metrics SQuAD's F1 and exact
match (as fractions), its signatures `<head>` (question, context -> the answer, a slice of the
context) and `<head>_tokens` (kerasbert/families/span_qa.py, span_qa_export.py). Its settings
are the task's `sequence_length`, `doc_stride` (`Task.doc_stride_at`), `max_query_length`,
`max_answer_length` and `max_windows`.

Example:
    >>> from kerasbert.tasks import get_task
    >>> squad = get_task("squad")
    >>> SPAN_QA.scores(squad, [["Denver Broncos", "the Broncos"], ["Paris"]], ["the Broncos", "Rome"])
    {'squad_f1': 0.5, 'squad_exact_match': 0.5}
"""

from __future__ import annotations

from kerasbert.data.rows import DataError, ReadResult, file_exists
from kerasbert.families.base import TokenFamily
from kerasbert.families.squad import read_squad, squad_scores


class SpanQa(TokenFamily):
    name = "span_qa"
    kinds = ("span",)
    format = "squad"
    metrics = {"span": ("f1", "exact_match")}
    architecture = "BertForQuestionAnswering"
    decoder_function = "answer"

    def check(self, task, fail):
        if task.words != "spaces":
            fail(f"words chooses a tags task's served words; a {task.kind} task has none")
        super().check(task, fail)

    def check_labels(self, task, fail):
        if task.labels:
            fail(f"a span task has no labels (its answers are slices of the context). Received: {list(task.labels)}")

    def check_run(self, task, sequence_length):
        task.doc_stride_at(sequence_length)  # TaskError when the stride would skip context

    # --- Files and features ---------------------------------------------------------------

    def read(self, task, path, max_bad_fraction):
        if not file_exists(path):
            raise DataError(f"{path}: file not found")
        squad = read_squad(path, max_bad_fraction)
        return ReadResult(squad.examples, squad.skipped, path, squad.bad_answers)

    def graph(self, task, vocabulary, sequence_length):
        from kerasbert.families.span_qa import SpanGraph

        return SpanGraph(vocabulary, sequence_length, task.doc_stride_at(sequence_length), task.max_query_length,
                         task.max_answer_length, task.max_windows)

    def features(self, task, graph, examples, training):
        from kerasbert.families.span_qa import span_features

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

        from kerasbert.families.span_qa import span_loss

        # (batch, 2): the answer's first and last piece
        return span_loss(tf.reshape(y, [-1, 2]), model.head_output(name, x, training=True), x["padding_mask"])

    # --- Evaluation and serving -----------------------------------------------------------

    def decoder(self, predict, graph):
        from kerasbert.families.span_qa_export import SpanSignatures

        return SpanSignatures(predict, graph)

    def predict(self, function, examples, batch_size):
        from kerasbert.families.span_qa import predict_answers

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
