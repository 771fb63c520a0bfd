"""`Family`: what every task of some kinds shares. A task is data (`kerasbert.tasks.Task`); its
family is code, found by its kind (`kerasbert.families.family_of`).

A family owns, for its kinds: the task settings it adds (`settings`, a frozen dataclass: a
score task's `min_score` is on `ScoreSettings` only, a span task's `doc_stride` on
`SpanSettings`; `Task.settings` holds a task's, `Task` itself only what every task has), the
declaration fields it checks, its files, its features, its head and loss, its predictions and
metrics, its serving signatures, its report rows and its transformers form. The rest of
kerasbert asks the family and calls one of the methods below; nothing outside
kerasbert/families/ tests a task's kind.

    declaration  settings, check, sequence_length, check_run, check_heads, upgraded_heads, is_resolved,
                 resolved, metric_names,
                 headline, signature_names, serving_method, encoder_of, layouts, describe
    files        format, read (a family's own format); of column files (kerasbert.data.task_files):
                 train_labels, label, check_training; dataset (its batches), predict_examples
    model        head_units, head_input_shape, head_output, loss, batch_prediction
    evaluation   references, scores, per_class, per_class_headings, prediction_row,
                 head_names, head_order, head_difference, has_confusion
    serving      serving_functions, tracked, row_costs, warmup_inputs
    transformers architecture, transformers_head, transformers_labels, head_from_transformers,
                 head_to_transformers, transformers_refusal, transformers_files, transformers_difference
and, of a `TokenFamily` (tags, span): read_training, graph and features (its words or windows,
made once), decoder, signatures and predict (decoded in the graph, as the export serves it); of a
`SentenceFamily` (kerasbert/families/sentence.py): head_output_from, prediction, serving_outputs,
examples_outputs over the sentence embeddings.

The model methods take the `MultitaskBert` and the task's name: the model gives the shared
parts (`embed`, `sequence`, `task_embeddings`, `head`, `dropout`), the family what its head
does with them. TensorFlow-using parts are imported in the methods that use them: a declaration
is checked without TensorFlow (`kerasbert.ModelConfig` loads none).

Example (the families of the shipped kinds):
    >>> from kerasbert.families import family_of
    >>> [family_of(kind).name for kind in ("classes", "pair_score", "tags", "span")]
    ['classification', 'regression', 'tagging', 'span_qa']
"""

from __future__ import annotations

import dataclasses
import functools


@dataclasses.dataclass(frozen=True)
class NoSettings:
    """The task settings of a family that adds none: what `Task.settings` holds when a
    family names no `settings` of its own."""


@dataclasses.dataclass(frozen=True)
class TokenSettings:
    """What a token-level task (tags, span) sets besides its data: the length its sequences
    are packed to. Its families' settings add theirs (`TaggingSettings`, `SpanSettings`).

    >>> TokenSettings(sequence_length=256)
    TokenSettings(sequence_length=256)
    """

    sequence_length: int = 0  # 0: the run's data.max_sequence_length, else in [8, 512]


class Family:
    """The interface; the sentence families (`kerasbert.families.sentence.SentenceFamily`) and
    the token-level ones (`TokenFamily`) fill it in."""

    name = ""  # e.g. "classification"
    kinds: tuple[str, ...] = ()  # the task kinds it owns
    format = ""  # its own file format ("conll", "squad"); "" = column files (csv, tsv, jsonl)
    metrics: dict[str, tuple[str, ...]] = {}  # kind -> its metrics' names, the headline first
    architecture = ""  # transformers' architecture of its heads
    problem_type = ""  # transformers' config.problem_type of its heads ("" = none)
    settings: type = NoSettings  # the frozen dataclass of the task settings it adds (`Task.settings`)
    per_class_headings = ("class", "dev examples")  # report.md's per-class table: rows, support
    pooled = True  # its head reads the sentence embedding (the run's heads.pooling), not each token's state

    # --- Declaration ----------------------------------------------------------------------

    def check(self, task, fail) -> None:
        """Raises (through `fail(message)`) what is wrong with `task`'s declaration of this family."""

    def sequence_length(self, task, run_length: int) -> int:
        """The length `task`'s sequences are packed to in a run of `run_length` (data.max_sequence_length)."""
        return run_length

    def check_run(self, task, sequence_length: int) -> None:
        """Checks `task` against the length its sequences are packed to (a span task's stride)."""

    def check_heads(self, task, pair_encoder: str) -> None:
        """Checks `task` against the run's heads.pair_encoder (a cosine loss needs a bi-encoder)."""

    def upgraded_heads(self, task, heads: dict) -> dict:
        """The declaration keys of `task` that a config or model of before issue 86 set in its
        heads section (`heads`: sts_encoder, sts_loss, para_mnrl_weight, mnrl_scale), now its settings."""
        return {}

    def is_resolved(self, task) -> bool:
        """Whether the classes (tags, score range) are known; else the training file gives them."""
        return True

    def resolved(self, task, train_labels):
        """`task` with what its declaration leaves out taken from the training file's labels."""
        return task

    def metric_names(self, task) -> tuple[str, ...]:
        return tuple(f"{task.name}_{metric}" for metric in self.metrics[task.kind])

    def headline(self, value: float) -> float:
        """A task's part of `overall`, in [0, 1], from its headline metric."""
        return value

    def signature_names(self, task) -> tuple[str, ...]:
        """Text signature, token-id signature, and TF Serving's :classify or :regress one if any."""
        return (task.head, f"{task.head}_tokens")

    def serving_method(self, task) -> str:
        """The method_name of the :classify or :regress signature ("" for none)."""
        return ""

    def encoder_of(self, task, pair_encoder: str) -> str:
        """"cross" or "bi" for a pair task (the run's heads.pair_encoder unless the task sets its
        own), "" for a one-text task."""
        return ""

    def layouts(self, task) -> dict:
        """{layout: Columns} of the shipped TSV layouts `task` is read from (a shipped column-file
        task's, kerasbert.data.task_files.detect_layout), or {}: its files are read by format."""
        return {}

    def describe(self, task) -> str:
        """What a run prints of the task's classes or tags (", classes [...]"), or ""."""
        return ""

    # --- Files ----------------------------------------------------------------------------

    def read(self, task, path: str, max_bad_fraction: float):
        """A file of the family's own `format` as a `kerasbert.data.rows.ReadResult`."""
        raise NotImplementedError(f"the {self.name} family reads column files (kerasbert.data.task_files)")

    def train_labels(self, task, path: str, column: str, rows: list) -> list:
        """The labels of a column file's rows (`task_files.Row`) that resolve `task` (its classes or
        range); DataError for labels that cannot (one class only, text for a score)."""
        raise NotImplementedError(f"the {self.name} family reads no column files")

    def label(self, task, value, where: str) -> float:
        """A column file's label `value` as the example's label (a class id, a score): ValueError
        for a damaged row, DataError (naming `where`: file, line, column) for a wrong declaration."""
        raise NotImplementedError(f"the {self.name} family reads no column files")

    def check_training(self, task, path: str, column: str, labels: list) -> None:
        """DataError for a training file's `labels` that leave out something of `task` (a class)."""

    def dataset(self, task, examples: list, preprocessor, batch_size: int, training: bool, seed: int = 0,
                group_by_length: int = 0, swap_pairs: bool = False):
        """The batches of `examples` (`kerasbert.finetuning.data.task_dataset`): column-file texts
        packed by the preprocessor (`text_dataset`)."""
        from kerasbert.finetuning.data import text_dataset  # TensorFlow

        return text_dataset(task, examples, preprocessor, batch_size, training, seed, group_by_length, swap_pairs)

    def predict_examples(self, model, preprocessor, name: str, examples: list, batch_size: int):
        """What evaluation scores of `examples`, in their order (`predict_texts`: the head's batch predictions)."""
        from kerasbert.finetuning.evaluation import predict_texts  # TensorFlow

        return predict_texts(model, preprocessor, name, examples, batch_size)

    def check_scored(self, task, preprocessor, examples: list, path: str) -> None:
        """Raises DataError for an example of `path` (a dev file) that the task's served
        function would refuse, before any training: a span context past `max_windows`."""

    # --- Model ----------------------------------------------------------------------------

    def head_units(self, task) -> int:
        """The head's Dense units."""
        raise NotImplementedError

    def head_input_shape(self, model, name: str, hidden: int):
        """The shape the head is built on (None: the head has no weights)."""
        raise NotImplementedError

    def head_output(self, model, name: str, x, training: bool = False):
        """What the head computes from a batch (logits, a score)."""
        raise NotImplementedError

    def loss(self, model, name: str, x, y):
        """The training loss of one batch of the task; `y`'s shape may be unknown."""
        raise NotImplementedError

    def batch_prediction(self, model, name: str, x):
        """What evaluation scores of a batch (probabilities, a score)."""
        raise NotImplementedError

    # --- Evaluation -----------------------------------------------------------------------

    def references(self, task, examples) -> list:
        """What the metrics compare predictions with."""
        return [example.label for example in examples]

    def scores(self, task, references, predictions) -> dict[str, float]:
        """The metrics of the task's kind, named `<task>_<metric>`."""
        raise NotImplementedError

    def per_class(self, task, references, predictions) -> dict | None:
        """precision, recall, F1 and support per class (entity type), or None."""
        return None

    def prediction_row(self, task, example, reference, prediction) -> list:
        """id, label, prediction: a row of the run's predictions/<task>-dev.tsv."""
        raise NotImplementedError

    def head_names(self, task) -> tuple[str, ...]:
        """What the head's outputs stand for (classes, tags), or ()."""
        return ()

    def head_order(self, old, task):
        """The columns of `old`'s head in `task`'s order (a carried head), or a slice of all."""
        old_names, names = self.head_names(old), self.head_names(task)
        return [old_names.index(n) for n in names] if names else slice(None)

    def same_head_names(self, old, task) -> bool:
        """Whether `old`'s head answers `task`'s classes (tags), in any order."""
        return sorted(self.head_names(old)) == sorted(self.head_names(task))

    def head_difference(self, old, task) -> str:
        """Why the head of `old` (an earlier run's task of the same name) does not answer `task`
        ("" when its kind and names do)."""
        if old.kind != task.kind:
            return f"it is a {old.kind} task"
        if not self.same_head_names(old, task):
            return f"its names are {list(self.head_names(old))}"
        return ""

    def has_confusion(self, task) -> bool:
        """Whether a run plots the task's confusion matrix."""
        return False

    # --- Serving --------------------------------------------------------------------------

    def serving_functions(self, model, preprocessor, graph, name: str) -> dict:
        """{signature: (function, input signature)} of task `name`, text signature first."""
        raise NotImplementedError

    def tracked(self, preprocessor, task) -> list:
        """What an export must track besides the model (the families' offset tokenizers)."""
        return []

    def row_costs(self, model, preprocessor, name: str) -> dict:
        """{signature: {input: cost}} of the text signatures (`python -m serving` cuts requests by it)."""
        return {}

    def warmup_inputs(self, task, sentence: list, other: list) -> dict:
        """The inputs of a warm-up request of the task's text signature."""
        return {"text": sentence}

    # --- transformers ---------------------------------------------------------------------

    def transformers_head(self, task) -> str:
        """The head's weight name in transformers."""
        return "classifier"

    def transformers_labels(self, task) -> list[str]:
        """id2label of the head's rows."""
        return ["LABEL_0"]

    def head_from_transformers(self, task, weight, bias, labels: list[str]):
        """(rows, hidden) weight and bias of a transformers head in kerasbert's order."""
        return weight, bias

    def head_to_transformers(self, task, weight, bias):
        """kerasbert's (units, hidden) rows as transformers' head rows."""
        return weight, bias

    def transformers_refusal(self, model, name: str) -> str:
        """Why task `name`'s head on `model` has no transformers form ("" when it has one)."""
        return ""

    def transformers_files(self, model, preprocessor, name: str) -> dict:
        """{path in the folder: JSON content} the family writes beside transformers' files (a
        sentence-transformers model's modules.json and pooling config), or {}."""
        return {}

    def transformers_difference(self, task) -> str:
        """Where transformers' pipeline on the exported folder will answer otherwise than the
        task's signatures, said in one line ("": nowhere)."""
        return ""


class TokenFamily(Family):
    """A family whose head reads each token's state (tags, span), with its own file format,
    features made by a graph (`graph`), and signatures that decode in the graph (`decoder`)."""

    settings: type = TokenSettings
    pooled = False
    decoder_function = ""  # the decoder's text function (`entities`, `answer`)
    dropout = False  # dropout on the token states before the head
    per_token_labels = False  # a batch's y is (batch, seq) (a tag per token), else (batch, 2)

    def check(self, task, fail):
        self.check_labels(task, fail)
        length = task.settings.sequence_length
        if length and not 8 <= length <= 512:
            fail(f"sequence_length must be 0 (the run's) or in [8, 512]. Received: {length}")

    def sequence_length(self, task, run_length):
        return task.settings.sequence_length or run_length

    def check_labels(self, task, fail) -> None:
        """The tags of a declaration (a span task has none)."""

    def read_training(self, task, path: str, max_bad_fraction: float):
        """(the task with what the training file gives, its ReadResult)."""
        return task, self.read(task, path, max_bad_fraction)

    def graph(self, task, vocabulary: list[str], sequence_length: int):
        raise NotImplementedError

    def features(self, task, graph, examples, training: bool):
        """(features, labels) of `examples`: numpy arrays, the features' token_ids, segment_ids and
        padding_mask attributes the batches' inputs."""
        raise NotImplementedError

    def decoder(self, predict, graph):
        """The family's signatures (`TaggingSignatures`, `SpanSignatures`) over `predict` (logits)."""
        raise NotImplementedError

    def predict(self, function, examples, batch_size: int) -> list:
        """Predictions of `examples` in their order, through the traced text `function`."""
        raise NotImplementedError

    def dataset(self, task, examples, preprocessor, batch_size, training, seed=0, group_by_length=0,
                swap_pairs=False):
        from kerasbert.finetuning.data import family_dataset  # TensorFlow

        return family_dataset(task, examples, preprocessor, batch_size, training, seed, group_by_length)

    def predict_examples(self, model, preprocessor, name, examples, batch_size):
        from kerasbert.finetuning.evaluation import predict_decoded  # TensorFlow

        return predict_decoded(model, preprocessor, name, examples, batch_size)

    def batch_prediction(self, model, name, x):
        raise ValueError(f"Task {name!r} is a {model.task_specs[name].kind} task: its predictions come from its "
                         "family's signatures (TokenFamily.signatures)")

    def signatures(self, model, preprocessor, name: str):
        return self.decoder(functools.partial(model.head_output, name),
                            preprocessor.graph_of(model.task_specs[name]))

    def head_input_shape(self, model, name, hidden):
        return (None, None, hidden)  # (batch, seq, hidden)

    def head_output(self, model, name, x, training=False):
        import tensorflow as tf

        states = model.sequence(x, training)  # (batch, seq, hidden)
        if self.dropout:
            states = model.dropout(states, training=training)
        return tf.cast(model.head(name)(states), tf.float32)

    def serving_functions(self, model, preprocessor, graph, name):
        return self.signatures(model, preprocessor, name).functions(model.task_specs[name].head)

    def tracked(self, preprocessor, task):
        return [preprocessor.graph_of(task)]

    def row_costs(self, model, preprocessor, name):
        return self.signatures(model, preprocessor, name).row_costs(model.task_specs[name].head)
