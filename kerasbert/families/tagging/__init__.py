"""The token-tagging family as the task system sees it: a task of kind `tags` (named entities on
CoNLL-2003) reads CoNLL column files (kerasbert/families/tagging/conll.py), its `labels` are its tag
names ('O' first; from the training file when not declared), its head is dropout + dense(tags) on
each token's state, its loss `masked_tag_loss`, its metrics conlleval's entity F1, precision and
recall (and F1 per entity type), its signatures `<head>` (text -> entities) and `<head>_tokens`
(kerasbert/families/tagging/features.py, export.py). Its settings (`TaggingSettings`) are the
task's `sequence_length` and the words it serves (`words`).

Example:
    >>> from kerasbert.tasks import get_task
    >>> ner = get_task("ner")
    >>> TAGGING.metric_names(ner), TAGGING.signature_names(ner)
    (('ner_f1', 'ner_precision', 'ner_recall'), ('entities', 'entities_tokens'))
    >>> TAGGING.scores(ner, [["B-PER", "O", "B-LOC"]], [["B-PER", "O", "O"]])["ner_f1"]
    0.6666666666666666
"""

from __future__ import annotations

import dataclasses

from kerasbert.data.rows import DataError, ReadResult, file_exists
from kerasbert.families.base import TokenFamily, TokenSettings
from kerasbert.families.tagging.conll import read_conll, tag_names
from kerasbert.families.tagging.conlleval import entity_scores
from kerasbert.labels import label_key

WORD_SPLITS = ("spaces", "punctuation")  # a tags task's `words`


@dataclasses.dataclass(frozen=True)
class TaggingSettings(TokenSettings):
    """A tags task's settings (`Task.settings`): `sequence_length` (0: the run's), its served
    words, and its tag names (`labels`: 'O' first; () = the training file's).

    >>> from kerasbert import Task
    >>> Task("people", "tags", settings=TaggingSettings(words="punctuation")).settings
    TaggingSettings(sequence_length=0, words='punctuation', labels=())
    """

    # "spaces" (what str.split() gives, as CoNLL files are split) or "punctuation" (BERT's basic
    # tokenizer's: punctuation and CJK characters are words of their own, as transformers'
    # token-classification pipeline reads text; imported taggers keep it).
    words: str = "spaces"
    labels: tuple = ()

    def __post_init__(self):
        object.__setattr__(self, "labels", tuple(label_key(value) for value in self.labels))


class Tagging(TokenFamily):
    name = "tagging"
    settings = TaggingSettings
    kinds = ("tags",)
    format = "conll"
    metrics = {"tags": ("f1", "precision", "recall")}
    architecture = "BertForTokenClassification"
    per_class_headings = ("entity type", "dev entities")
    decoder_function = "entities"
    dropout = True
    per_token_labels = True

    def check(self, task, fail):
        super().check(task, fail)
        if task.settings.words not in WORD_SPLITS:
            fail(f"words must be one of {WORD_SPLITS}. Received: {task.settings.words!r}")

    def check_labels(self, task, fail):
        labels = task.settings.labels
        if labels and (labels[0] != "O" or len(labels) < 2):
            fail(f"a tags task's labels are its tag names, 'O' first, then IOB2 tags. Received: {list(labels)}")

    def is_resolved(self, task):
        return bool(task.settings.labels)

    def resolved(self, task, train_labels):
        return dataclasses.replace(task, labels=tuple(train_labels))  # tag names, in their order (tag_names)

    def describe(self, task):
        return f", tags {list(task.settings.labels)}"

    # --- Files and features ---------------------------------------------------------------

    def read(self, task, path, max_bad_fraction):
        if not file_exists(path):
            raise DataError(f"{path}: file not found")
        conll = read_conll(path, max_bad_fraction)
        if self.is_resolved(task):  # a dev file, or a declared tag set: every tag is one of the task's
            known = set(task.settings.labels)
            for sentence in conll.sentences:
                unknown = sorted(set(sentence.tags) - known)
                if unknown:
                    raise DataError(f"{path}:{sentence.line}: tag(s) {unknown} not among task {task.name!r}'s "
                                    f"tags {list(task.settings.labels)} (declared, or taken from its training file)")
        return ReadResult(conll.sentences, conll.skipped, path)

    def read_training(self, task, path, max_bad_fraction):
        result = self.read(task, path, max_bad_fraction)
        return (task if self.is_resolved(task) else self.resolved(task, tag_names(result.examples))), result

    def graph(self, task, vocabulary, sequence_length):
        from kerasbert.families.tagging.features import TaggingGraph

        return TaggingGraph(vocabulary, task.settings.labels, sequence_length, task.settings.words)

    def features(self, task, graph, examples, training):
        from kerasbert.families.tagging.features import tagging_features

        features = tagging_features(graph, examples)
        if features.untagged_words and training:  # the training data's summary, once
            print(f"   {task.name}: {features.untagged_words} words past {graph.sequence_length - 2} word pieces "
                  "have no label (their sentences are cut)")
        return features, features.labels

    # --- Model ----------------------------------------------------------------------------

    def head_units(self, task):
        return len(task.settings.labels)

    def loss(self, model, name, x, y):
        import tensorflow as tf

        from kerasbert.families.tagging.features import masked_tag_loss

        labels = tf.reshape(y, tf.shape(x["token_ids"]))  # (batch, seq): tag ids at first pieces, -1 elsewhere
        return masked_tag_loss(labels, model.head_output(name, x, training=True))

    # --- Evaluation and serving -----------------------------------------------------------

    def decoder(self, predict, graph):
        from kerasbert.families.tagging.export import TaggingSignatures

        return TaggingSignatures(predict, graph)

    def predict(self, function, examples, batch_size):
        from kerasbert.families.tagging.features import predict_tags

        return predict_tags(function, examples, batch_size)

    def references(self, task, examples):
        return [sentence.tags for sentence in examples]

    def scores(self, task, references, predictions):
        return entity_scores(references, predictions).as_dict(prefix=f"{task.name}_")

    def per_class(self, task, references, predictions):
        return entity_report(references, predictions)

    def transformers_difference(self, task):
        if task.settings.words == "punctuation":
            return ""
        return (f"task {task.name!r} serves words split at spaces; transformers' pipeline will split words at "
                f"punctuation too ('U.S.' is 4 words, 'O'Gorman' 3), so its entities differ on such words: "
                f"declare the task with words: \"punctuation\" (--set tasks.{task.name}.words=punctuation) to "
                "serve words as it does")

    def prediction_row(self, task, example, reference, prediction):
        return [example.line, " ".join(reference), " ".join(prediction)]

    def head_names(self, task):
        return task.settings.labels

    # --- transformers ---------------------------------------------------------------------

    def transformers_labels(self, task):
        return list(task.settings.labels)

    def head_from_transformers(self, task, weight, bias, labels):
        order = [labels.index(label) for label in task.settings.labels]  # the rows in the task's tag order ('O' first)
        return weight[order], bias[order]


def entity_report(references: list[list[str]], predictions: list[list[str]]) -> dict[str, dict[str, float]]:
    """Per entity type: precision, recall, F1 (conlleval's) and support (reference entities).

    >>> entity_report([["B-PER", "O", "B-LOC"]], [["B-PER", "O", "O"]])["LOC"]
    {'precision': 0.0, 'recall': 0.0, 'f1': 0.0, 'support': 1}
    """
    return {kind: {"precision": counts.precision, "recall": counts.recall, "f1": counts.f1,
                   "support": counts.reference}
            for kind, counts in sorted(entity_scores(references, predictions).by_type.items())}


TAGGING = Tagging()
