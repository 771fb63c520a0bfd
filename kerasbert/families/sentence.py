"""`SentenceFamily`: what the sentence families (classification, regression) share. A task reads
one text or a pair from named columns of CSV, TSV or JSON Lines files
(kerasbert/data/task_files.py); its head reads the sentence embedding (`MultitaskBert.embed`) or,
for a bi-encoder pair, the two sentences' [u, v, |u - v|, u * v]; its signatures are `<head>`,
`<head>_tokens` and TF Serving's `<head>_classify` or `<head>_regress`
(kerasbert/families/sentence_export.py). Where its text and label are is its settings'
(`ColumnSettings`, extended by each sentence family's).

Example:
    >>> from kerasbert.tasks import BUILTIN_TASKS
    >>> from kerasbert.families import family_of
    >>> sts = BUILTIN_TASKS["sts"]
    >>> family_of(sts).signature_names(sts), family_of(sts).encoder_of(sts, "cross")
    (('similarity', 'similarity_tokens', 'similarity_regress'), 'cross')
"""

from __future__ import annotations

import dataclasses

import numpy as np

from kerasbert.families.base import Family
from kerasbert.labels import label_key

LAYOUTS = ("cs224n", "glue")  # the shipped TSV layouts (ColumnSettings.layouts)
CLEANERS = ("", "ptb", "twice_quoted", "review")  # kerasbert.data.cleaning.CLEANERS


@dataclasses.dataclass(frozen=True)
class Columns:
    """Which header columns hold the texts, the label and the id (None: absent)."""

    text_a: str
    text_b: str | None
    label: str
    id: str | None = None


@dataclasses.dataclass(frozen=True)
class ColumnSettings:
    """Where a task read from column files (CSV, TSV, JSON Lines) finds its text and label: the
    settings every sentence family's extend (`ClassificationSettings`, `RegressionSettings`).

    >>> ColumnSettings(text_a="q1", text_b="q2").columns_for("jsonl")
    Columns(text_a='q1', text_b='q2', label='label', id=None)
    """

    text: str = ""  # the text column (one-text kinds)
    text_a: str = ""  # the pair's columns (pair kinds)
    text_b: str = ""
    label: str = "label"  # the label column
    id: str = ""  # an id column, kept in predictions ("" = the line number)
    clean: str = ""  # a cleaner of kerasbert.data.cleaning.CLEANERS ("" = spaces only)
    layouts: dict = dataclasses.field(default_factory=dict)  # the shipped TSV layouts: {layout: Columns}

    def __post_init__(self):
        object.__setattr__(self, "layouts", {layout: columns if isinstance(columns, Columns) else Columns(**columns)
                                             for layout, columns in self.layouts.items()})

    def columns_for(self, layout: str) -> Columns | None:
        """The columns to read from a file of `layout` (a shipped TSV layout, or a format)."""
        if self.layouts:
            return self.layouts.get(layout)
        return Columns(self.text_a or self.text, self.text_b or None, self.label, self.id or None)


@dataclasses.dataclass(frozen=True)
class ClassSettings(ColumnSettings):
    """The columns of a task whose labels are classes, and its classes: `labels` (the label
    column's values, in class order) and `class_names` (served for them); either gives the other.

    >>> ClassSettings(text="x", labels=(1, "2.0")).label_values, ClassSettings(class_names=("no", "yes")).num_classes
    (('1', '2'), 2)
    """

    labels: tuple = ()
    class_names: tuple = ()

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "labels", tuple(label_key(value) for value in self.labels))
        object.__setattr__(self, "class_names", tuple(str(value) for value in self.class_names))

    @property
    def num_classes(self) -> int:
        return len(self.labels or self.class_names)

    @property
    def label_values(self) -> tuple[str, ...]:
        """The label column's values in class order (matched with `label_key`)."""
        return self.labels or tuple(label_key(name) for name in self.class_names)

    @property
    def served_names(self) -> tuple[str, ...]:
        """The class names served by :classify and the text signatures."""
        return self.class_names or self.labels

    def class_of(self, value) -> int:
        """The class id of a label value; ValueError if it is not one of the task's."""
        return self.label_values.index(label_key(value))


class SentenceFamily(Family):
    serving_verb = ""  # "classify" or "regress": TF Serving's method of the third signature

    def check(self, task, fail):
        settings = task.settings
        if settings.clean not in CLEANERS:
            fail(f"clean must be ptb, twice_quoted, review or empty. Received: {settings.clean!r}")
        if not settings.layouts:
            wanted = ("text_a", "text_b") if self.is_pair(task) else ("text",)
            unwanted = ("text",) if self.is_pair(task) else ("text_a", "text_b")
            missing = [key for key in wanted if not getattr(settings, key)]
            if missing:
                fail(f"a {task.kind} task names its text column(s) {' and '.join(wanted)}; missing: {missing}")
            if any(getattr(settings, key) for key in unwanted):
                fail(f"a {task.kind} task takes {' and '.join(wanted)}, not {' or '.join(unwanted)}")
        if not settings.label and not settings.layouts:
            fail(f"label names the label column; a {task.kind} task has one. Received: label={settings.label!r}")
        unknown = set(settings.layouts) - set(LAYOUTS)
        if unknown:
            fail(f"unknown layout(s) {sorted(unknown)}; known: {LAYOUTS}")
        self.check_labels(task, fail)

    def check_labels(self, task, fail) -> None:
        """The classes or the score range of a declaration."""

    def is_pair(self, task) -> bool:
        """Whether the task reads a pair of texts (text_a, text_b)."""
        return task.kind.startswith("pair_")

    def signature_names(self, task):
        return (task.head, f"{task.head}_tokens", f"{task.head}_{self.serving_verb}")

    def serving_method(self, task):
        return f"tensorflow/serving/{self.serving_verb}"

    def encoder_of(self, task, pair_encoder):
        return self.pair_encoder_of(task, pair_encoder) if self.is_pair(task) else ""

    def pair_encoder_of(self, task, pair_encoder: str) -> str:
        return pair_encoder

    def layouts(self, task):
        return task.settings.layouts

    def transformers_refusal(self, model, name):
        if model.encoder_of(name) == "bi":
            return "a bi-encoder pair head (two sentence embeddings) has no transformers form; fine-tune it with " \
                   "heads.pair_encoder=cross (and no encoder=bi of its own, a pair_score task)"
        if model.pooling != "cls":
            return "its head reads the mean of the token states (heads.pooling=mean); transformers' " \
                   "BertForSequenceClassification reads the [CLS] pooler: fine-tune with heads.pooling=cls"
        return ""

    # --- Model ----------------------------------------------------------------------------

    def head_input_shape(self, model, name, hidden):
        return (None, 4 * hidden if model.encoder_of(name) == "bi" else hidden)  # [u, v, |u-v|, u*v]

    def head_output(self, model, name, x, training=False):
        return self.head_output_from(model, name, *model.task_embeddings(name, x, training), training=training)

    def head_output_from(self, model, name: str, u, v=None, training: bool = False):
        """The head's output from sentence embeddings: u of the text or pair, v of sentence b (bi)."""
        raise NotImplementedError

    def batch_prediction(self, model, name, x):
        return self.prediction(model, name, *model.task_embeddings(name, x))

    def prediction(self, model, name: str, u, v=None):
        """What evaluation scores and the export serves, from sentence embeddings."""
        raise NotImplementedError

    # --- Evaluation and serving -----------------------------------------------------------

    def prediction_row(self, task, example, reference, prediction):
        names = self.head_names(task)
        if np.ndim(prediction) and names:
            return [example.uid, names[int(reference)], names[int(np.argmax(prediction))]]
        value = int(np.argmax(prediction)) if np.ndim(prediction) else round(float(prediction), 6)
        return [example.uid, reference, value]

    def serving_outputs(self, task, prediction) -> dict:
        """The named outputs of the text and token signatures."""
        raise NotImplementedError

    def examples_outputs(self, task, outputs: dict) -> dict:
        """TF Serving's :classify (classes, scores) or :regress (outputs) from `serving_outputs`."""
        raise NotImplementedError

    def serving_functions(self, model, preprocessor, graph, name):
        from kerasbert.families.sentence_export import sentence_signatures  # TensorFlow

        return sentence_signatures(self, graph, model.task_specs[name])

    def warmup_inputs(self, task, sentence, other):
        return {"text_a": sentence, "text_b": other} if self.is_pair(task) else {"text": sentence}
