"""Fine-tuning tasks as data: a `Task` declares its files, columns, kind and classes.

A run's tasks are declared in its config (`"tasks"`: names of the shipped tasks, or a
mapping of names to declarations, or a JSON file of declarations) or built in Python with
`Task(...)`; the shipped tasks (`BUILTIN_TASKS`: SST-5, Quora, STS-B, CFIMDB, SST-2) are
declarations of the same kind. The kind names the task's family (kerasbert/families/: one
module each), which decides what the head computes, its loss, its metrics and its signatures:

    kind          input        head output                     loss        metrics (headline first)
    classes       one text     softmax over the classes        x-entropy   accuracy
    pair_classes  text a, b    softmax over the classes        x-entropy   accuracy
    pair_binary   text a, b    probability of the 2nd class    binary x-e  accuracy, f1
    score         one text     score in [min_score, max_score] mse         pearson, spearman
    pair_score    text a, b    score in [min_score, max_score] mse         pearson, spearman
    tags          one text     a tag per word (first piece)    masked x-e  f1, precision, recall (entities)
    span          question,    the answer's first and last     start + end f1, exact_match (SQuAD's)
                  context      piece in the context            x-entropy

Signatures of a task (head `h`, the task's name unless declared): `h` (text in), `h_tokens`
(token ids in), and `h_classify` (the classes kinds) or `h_regress` (the score kinds) for
TF Serving's :classify and :regress. The families (kerasbert/families/) have `h` and
`h_tokens` only: `entities` (text -> entities with character offsets) for `ner`, `answer`
(question, context -> the answer, a slice of the context) for `squad`.

The families' files: a tags task reads CoNLL column files (format `conll`: the word first,
its tag last, blank lines between sentences) and its `labels` are its tag names (`O`
first; from the training file when not declared); a span task reads SQuAD v1.1's JSON
(format `squad`). A task's own settings are its `settings`, a frozen dataclass of its family
(`family.settings`; `Task` holds only what every task has): a classes task's
`ClassificationSettings` (its columns, labels, class names; a pair_binary task's `mnrl_weight`),
a score task's `ScoreSettings` (its columns, range, `score_output`; a pair_score task's `encoder`
and `loss`), a tags task's `TaggingSettings`
(`sequence_length`, 0: the run's `data.max_sequence_length`; `words`, the words it serves), a
span task's `SpanSettings` (`sequence_length`; `doc_stride`, 0: the largest that skips no
context, up to 128, a declared one that would skip context being a TaskError when the config
loads; `max_query_length`, `max_answer_length`, and `max_windows`, the longest context
answered, in windows). A config declares them flat, beside the other keys (`{"kind": "span",
"doc_stride": 64}`); a key of another family's settings is a TaskError.
Their scores are fractions in [0, 1] like every other metric: SQuAD's official script
prints `squad_f1` and `squad_exact_match` in percent (100x).

Classes: `labels` are the label column's values in class order and `class_names` the names
served for them; either gives the other, and with neither the labels found in the training
file are taken, sorted (as numbers when they all are). Numbers match as numbers: "1.0",
"1" and 1 are one label. A score task's range is `min_score`..`max_score`, or the training
labels' range when not declared.

Example:
    >>> tickets = Task("tickets", "classes", train_file="tickets-train.csv", dev_file="tickets-dev.csv",
    ...                text="body", label="category")
    >>> tickets.signature_names, tickets.is_resolved
    (('tickets', 'tickets_tokens', 'tickets_classify'), False)
    >>> tickets.resolved(["billing", "bug", "billing"]).settings.served_names
    ('billing', 'bug')
    >>> BUILTIN_TASKS["sts"].head, BUILTIN_TASKS["sts"].kind, BUILTIN_TASKS["sts"].settings.text_a
    ('similarity', 'pair_score', '')
    >>> BUILTIN_TASKS["squad"].settings
    SpanSettings(sequence_length=384, doc_stride=0, max_query_length=64, max_answer_length=30, max_windows=16)
"""

from __future__ import annotations

import dataclasses
import functools
import os
import re
import zlib
from typing import Any, Iterable

from kerasbert.errors import TaskError
from kerasbert.families import Family, family_of, kinds
from kerasbert.families.sentence import Columns
from kerasbert.families.span_qa import SpanSettings

COLUMN_FORMATS = ("csv", "tsv", "jsonl")  # the sentence families' files; a token-level family has its own
# Signatures every export has besides the tasks' own.
RESERVED_SIGNATURES = ("embed", "embed_tokens", "serving_default")
_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
# Defaults that run folders of earlier versions hold in every task's declaration: doc_stride was
# 128 until a span task's stride came from its length (0).
_EARLIER_DEFAULTS = {"doc_stride": (128,)}


def formats() -> tuple[str, ...]:
    """The file formats a task may declare: the column formats and the families' own.

    >>> formats()
    ('csv', 'tsv', 'jsonl', 'conll', 'squad')
    """
    return COLUMN_FORMATS + tuple(dict.fromkeys(family_of(kind).format for kind in kinds() if family_of(kind).format))


@dataclasses.dataclass(frozen=True, init=False)
class Task:
    """One fine-tuning task, declared by its data: what every task has, and its family's
    settings (`settings`, a frozen dataclass of the family: `ClassSettings`, `ScoreSettings`,
    `TaggingSettings`, `SpanSettings`). The family's keys may be given flat, as a config
    declares them (`text="review"`); another family's key is a TaskError.

    Example:
        >>> nli = Task("nli", "pair_classes", train_file="nli-train.jsonl", dev_file="nli-dev.jsonl",
        ...            text_a="premise", text_b="hypothesis", label="gold_label")
        >>> stars = Task("stars", "score", train_file="reviews.tsv", dev_file="reviews-dev.tsv",
        ...              text="review", label="stars", min_score=1, max_score=5)
        >>> stars.metric_names, stars.settings.max_score
        (('stars_pearson', 'stars_spearman'), 5.0)
        >>> Task("qa", "span", settings=SpanSettings(doc_stride=64)).settings.doc_stride
        64
        >>> Task("sentiment", "classes", text="review", min_score=1)
        Traceback (most recent call last):
        kerasbert.errors.TaskError: task 'sentiment': min_score is a score or pair_score task's setting; a classes task has none
    """

    name: str  # key of configs, metrics (`<name>_accuracy`), batches and prediction files
    kind: str  # one of the families' kinds (kerasbert.families.kinds())
    train_file: str = ""  # absolute, relative to the working folder, or to --data_dir
    dev_file: str = ""
    format: str = ""  # csv | tsv | jsonl | conll | squad; "" = from the kind or the file's extension
    head: str = ""  # the head layer (`<head>_head`) and the signatures' name ("" = name)
    title: str = ""  # for plots and reports ("" = name)
    # The family's own settings, an instance of `family.settings` (None = the family's defaults).
    settings: Any = None

    def __init__(self, name: str, kind: str, train_file: str = "", dev_file: str = "", format: str = "",
                 head: str = "", title: str = "", settings: Any = None, **keys):
        fix = functools.partial(object.__setattr__, self)  # frozen: the declaration's values, normalised once
        for field, value in (("name", name), ("kind", kind), ("train_file", train_file), ("dev_file", dev_file),
                             ("format", format), ("head", head or name), ("title", title or name)):
            fix(field, value)
        self._check_name_and_kind()
        settings = self.family.settings() if settings is None else settings
        if keys:
            own = _refuse_others(name, kind, keys)
            if type(settings) is self.family.settings:  # else _check names the settings' type
                settings = dataclasses.replace(settings, **own)
        fix("settings", settings)
        self._check()

    def _check_name_and_kind(self):
        if not isinstance(self.name, str) or not _NAME.match(self.name):
            raise TaskError(f"A task name is lowercase letters, digits and _, starting with a letter "
                            f"(it names metrics, files and signatures). Received: {self.name!r}")
        if self.kind not in kinds():
            raise TaskError(f"task {self.name!r}: kind must be one of {kinds()}. Received: {self.kind!r}")

    def _check(self):
        def fail(message):
            raise TaskError(f"task {self.name!r}: {message}")

        family = self.family
        if self.format and self.format not in formats():
            fail(f"format must be one of {formats()} (or empty: from the extension). Received: {self.format!r}")
        if type(self.settings) is not family.settings:
            fail(f"a {self.kind} task's settings are a {family.settings.__name__}. Received: {self.settings!r}")
        if family.format and self.format and self.format != family.format:
            fail(f"a {self.kind} task reads {family.format} files. Received: format={self.format!r}")
        if not family.format and self.format not in ("", *COLUMN_FORMATS):
            owner = next(family_of(kind) for kind in kinds() if family_of(kind).format == self.format)
            fail(f"format {self.format!r} is a {owner.kinds[0]} task's, not a {self.kind} task's")
        family.check(self, fail)

    # --- What follows from the kind ------------------------------------------------------

    @property
    def family(self) -> Family:
        """The task's family (kerasbert/families/): the code of its kind."""
        return family_of(self.kind)

    @property
    def is_resolved(self) -> bool:
        """Whether the classes (or the score range) are known; else the training file gives them."""
        return self.family.is_resolved(self)

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The keys this task adds to metrics.json; the first is its headline."""
        return self.family.metric_names(self)

    @property
    def signature_names(self) -> tuple[str, ...]:
        """Text signature, token-id signature, and the :classify or :regress one (not for
        the token-level families)."""
        return self.family.signature_names(self)

    @property
    def serving_method(self) -> str:
        """The method_name of the :classify or :regress signature ("" for none)."""
        return self.family.serving_method(self)

    def headline(self, metrics: dict[str, float]) -> float:
        """This task's part of `overall`, in [0, 1]: accuracy, entity or SQuAD F1, or (pearson + 1) / 2."""
        return self.family.headline(metrics[self.metric_names[0]])

    # --- Classes and ranges from the training labels ---------------------------------------

    def resolved(self, train_labels: Iterable) -> "Task":
        """This task with its classes (sorted) or score range taken from `train_labels`
        where the declaration leaves them out.

        >>> Task("t", "classes", text="x").resolved(["10", "9", 9.0]).settings.labels
        ('9', '10')
        """
        return self if self.is_resolved else self.family.resolved(self, train_labels)

    # --- As config data ------------------------------------------------------------------------

    def to_config(self) -> dict[str, Any]:
        """The declaration as JSON values (what a config's "tasks" mapping holds for it): the
        common fields and the family's own settings, flat.

        >>> {key: value for key, value in BUILTIN_TASKS["squad"].to_config().items() if "length" in key}
        {'sequence_length': 384, 'max_query_length': 64, 'max_answer_length': 30}
        """
        values = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        settings = dataclasses.asdict(values.pop("settings"))
        return {**values, **settings, **{key: list(value) for key, value in settings.items() if isinstance(value, tuple)}}

    @classmethod
    def from_config(cls, name: str, values: dict[str, Any]) -> "Task":
        """A task from a config's declaration, its family's settings flat beside the other keys;
        the keys of a shipped task's declaration it does not give are the shipped task's, so
        `{"train_file": ...}` moves a shipped task's file.

        >>> Task.from_config("sst", {"dev_file": "my-sst-dev.tsv"}).title
        'SST-5'
        >>> Task.from_config("qa", {"kind": "span", "doc_stride": 64}).settings.doc_stride
        64
        >>> Task.from_config("sst", {"doc_stride": 64})
        Traceback (most recent call last):
        kerasbert.errors.TaskError: task 'sst': doc_stride is a span task's setting; a classes task has none
        """
        if not isinstance(values, dict):
            raise TaskError(f"tasks.{name} must be an object (a declaration). Received: {values!r}")
        if values.get("name", name) != name:
            raise TaskError(f"task {name!r} is declared with name {values['name']!r}")
        base = BUILTIN_TASKS.get(name)
        if base is None and "kind" not in values:
            raise TaskError(f"task {name!r} is not a shipped task ({', '.join(BUILTIN_TASKS)}), so its "
                            f"declaration needs a kind: one of {kinds()}")
        kind = values.get("kind", base.kind if base else "")
        if kind not in kinds():
            raise TaskError(f"task {name!r}: kind must be one of {kinds()}. Received: {kind!r}")
        common = {field.name for field in dataclasses.fields(cls)} - {"name", "settings"}
        flat = {key: value for key, value in values.items() if key not in common | {"name"}}
        # Run folders written while every task had every key (config.json, model.keras) hold the
        # other families' at their defaults (then or now): those still load, and are left out.
        own = _refuse_others(name, kind, flat, earlier=True)
        family = family_of(kind)
        settings = base.settings if base is not None and base.family is family else family.settings()
        settings = dataclasses.replace(settings, **own)
        declared = {key: value for key, value in values.items() if key in common}
        if base is None:
            return cls(name, settings=settings, **declared)
        return dataclasses.replace(base, settings=settings, **declared)


def _refuse_others(name: str, kind: str, keys: dict[str, Any], earlier: bool = False) -> dict[str, Any]:
    """The keys of `keys` that are `kind`'s family's settings; a TaskError names the first key
    that is another family's (or no family's). With `earlier`, another family's key at its default
    (as earlier run folders hold every key) is left out instead.

    >>> _refuse_others("sst", "classes", {"text": "body", "min_score": None}, earlier=True)
    {'text': 'body'}
    """
    settings_of = _settings_of_kinds()
    own = settings_of[kind]
    known = {field.name for field in dataclasses.fields(Task)} - {"name", "settings"}
    unknown = sorted(key for key in keys if not any(key in settings for settings in settings_of.values()))
    if unknown:
        raise TaskError(f"task {name!r}: unknown key(s) {unknown}. Known: {sorted(known | set(own))}")
    for key in sorted(set(keys) - set(own)):
        owners = {other: defaults[key] for other, defaults in settings_of.items() if key in defaults}
        value = tuple(keys[key]) if isinstance(keys[key], list) else keys[key]
        if not (earlier and value in (*owners.values(), *_EARLIER_DEFAULTS.get(key, ()))):
            raise TaskError(f"task {name!r}: {key} is a {' or '.join(owners)} task's setting; "
                            f"a {kind} task has none")
    return {key: value for key, value in keys.items() if key in own}


def _settings_of_kinds() -> dict[str, dict[str, Any]]:
    """Each kind's settings (its family's) at their defaults.

    >>> _settings_of_kinds()["tags"]
    {'sequence_length': 0, 'words': 'spaces', 'labels': ()}
    """
    return {kind: {field.name: getattr(family_of(kind).settings(), field.name)
                   for field in dataclasses.fields(family_of(kind).settings)} for kind in kinds()}


def file_format(task: Task, path: str) -> str:
    """The format a task's file is read in: the declaration's, or the extension's.

    >>> file_format(Task("t", "classes", text="x"), "data/train.jsonl")
    'jsonl'
    """
    if task.family.layouts(task):  # the shipped TSV layouts
        return "tsv"
    if task.format:
        return task.format
    if task.family.format:
        return task.family.format
    extension = os.path.splitext(path)[1].lower().lstrip(".")
    if extension in COLUMN_FORMATS:
        return extension
    if extension == "json":
        return "jsonl"
    raise TaskError(f"{path}: cannot tell the format of task {task.name!r}'s file from its extension "
                    f"{'.' + extension if extension else '(none)'}; name the file .csv, .tsv or .jsonl, "
                    f"or declare \"format\": one of {formats()}")


# --- The shipped tasks ------------------------------------------------------------------------

_SENTIMENT_5 = ("very negative", "negative", "neutral", "positive", "very positive")
BUILTIN_TASKS: dict[str, Task] = {task.name: task for task in (
    Task("sst", "classes", "cs224n/sst-train.tsv", "cs224n/sst-dev.tsv", head="sentiment", title="SST-5",
         layouts={"cs224n": Columns("sentence", None, "sentiment", "id")},
         labels=("0", "1", "2", "3", "4"), class_names=_SENTIMENT_5, clean="ptb"),
    Task("para", "pair_binary", "cs224n/quora-train.tsv", "cs224n/quora-dev.tsv", head="paraphrase", title="Quora",
         layouts={"cs224n": Columns("sentence1", "sentence2", "is_duplicate", "id"),
                  "glue": Columns("question1", "question2", "is_duplicate", "id")},
         labels=("0", "1"), class_names=("not duplicate", "duplicate"), clean="twice_quoted"),
    Task("sts", "pair_score", "cs224n/sts-train.tsv", "cs224n/sts-dev.tsv", head="similarity", title="STS-B",
         layouts={"cs224n": Columns("sentence1", "sentence2", "similarity", "id"),
                  "glue": Columns("sentence1", "sentence2", "score")},
         min_score=0.0, max_score=5.0),
    Task("cfimdb", "classes", "cs224n/cfimdb-train.tsv", "cs224n/cfimdb-dev.tsv", head="review_sentiment",
         title="CFIMDB", layouts={"cs224n": Columns("sentence", None, "sentiment", "id")},
         labels=("0", "1"), class_names=("negative", "positive"), clean="review"),
    # GLUE's SST-2 (sentence, label: 0 negative, 1 positive): binary, unlike SST-5's five classes.
    Task("sst2", "classes", "glue/SST-2/train.tsv", "glue/SST-2/dev.tsv", head="binary_sentiment", title="SST-2",
         layouts={"glue": Columns("sentence", None, "label")},
         labels=("0", "1"), class_names=("negative", "positive")),
    # BERT's other two families: CoNLL-2003 named entities (tag names from the training file)
    # and SQuAD v1.1 extractive question answering.
    Task("ner", "tags", "conll2003/train.txt", "conll2003/dev.txt", head="entities", title="CoNLL-2003 NER"),
    Task("squad", "span", "squad/train.json", "squad/dev.json", head="answer", title="SQuAD v1.1",
         settings=SpanSettings(sequence_length=384)),
)}
# What a run trains when its config does not say: the reference study's three tasks.
DEFAULT_TASKS = ("sst", "para", "sts")


def task_names() -> tuple[str, ...]:
    """The shipped tasks' names (a config refers to them by name).

    >>> task_names()
    ('sst', 'para', 'sts', 'cfimdb', 'sst2', 'ner', 'squad')
    """
    return tuple(BUILTIN_TASKS)


def get_task(task: "str | Task") -> Task:
    """A `Task` as it is, or the shipped task of that name (a TaskError lists them).

    >>> get_task("para").title
    'Quora'
    """
    if isinstance(task, Task):
        return task
    if task not in BUILTIN_TASKS:
        raise TaskError(f"Unknown task {task!r}: declare it (a kind, files and columns) or name one of the "
                        f"shipped tasks {tuple(BUILTIN_TASKS)}")
    return BUILTIN_TASKS[task]


def declare_tasks(tasks, what: str = "tasks") -> dict[str, Task]:
    """A run's tasks, {name: Task} in the order given (the first task's text signature is an
    export's serving_default), from names of shipped tasks (a list, or one comma-separated
    string), a mapping of names to declarations, or `Task`s. Raises TaskError naming what is
    wrong: an unknown name, a task twice, a signature name two tasks (or a task and the
    export's own signatures) would share.

    >>> list(declare_tasks("sts,sst"))
    ['sts', 'sst']
    >>> declare_tasks({"sst": {}, "nli": {"kind": "pair_classes", "text_a": "p", "text_b": "h"}})["nli"].head
    'nli'
    """
    if isinstance(tasks, str):
        tasks = [name.strip() for name in tasks.split(",") if name.strip()]
    if isinstance(tasks, dict):
        declared = [value if isinstance(value, Task) else Task.from_config(name, value or {})
                    for name, value in tasks.items()]
    else:
        declared = [get_task(task) for task in tasks]
    if not declared:
        raise TaskError(f"{what} must name at least one task (shipped: {', '.join(BUILTIN_TASKS)})")
    names = [task.name for task in declared]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise TaskError(f"{what} declares task(s) {twice} twice. Received: {names}")
    ids = {task_id(name) for name in names}
    if len(ids) != len(names):
        raise TaskError(f"{what}: two task names share a batch id (a 1 in 2**31 chance); rename one. Received: {names}")
    owners: dict[str, str] = {name: "the export itself" for name in RESERVED_SIGNATURES}
    for task in declared:
        for signature in task.signature_names:
            if signature in owners:
                raise TaskError(f"task {task.name!r}'s signature {signature!r} clashes with a signature of "
                                f"{owners[signature]}; rename the task, or declare a \"head\" (the signatures' name)")
            owners[signature] = f"task {task.name!r}"
    return {task.name: task for task in declared}


def task_id(name: str) -> int:
    """The id a batch of task `name` carries in its `task` field: a fingerprint of the name
    (tf.distribute moves no strings between replicas), the same in every process.

    >>> task_id("sts") == task_id("sts") != task_id("sst")
    True
    """
    return zlib.crc32(name.encode("utf-8")) & 0x7FFFFFFF  # an int32


def encoder_of(task: Task, pair_encoder: str = "cross") -> str:
    """"cross" (the pair packed as one sequence) or "bi" (each text alone) for a pair task,
    "" for a one-text task: a pair_score task's own `encoder` when it sets one, else `pair_encoder`.

    >>> encoder_of(Task.from_config("sts", {"encoder": "bi"}), "cross"), encoder_of(BUILTIN_TASKS["sst"], "cross")
    ('bi', '')
    """
    return task.family.encoder_of(task, pair_encoder)


# What HeadsConfig (a config's "heads") and MultitaskBert held for the sentence families until
# issue 86, now their tasks' settings (`Family.upgraded_heads`), at the defaults they had.
HEADS_BEFORE = {"sts_encoder": "", "sts_loss": "mse", "para_mnrl_weight": 0.0, "mnrl_scale": 20.0}


def upgrade_heads(tasks, heads: dict) -> dict[str, Any]:
    """`tasks` (as `declare_tasks` takes them) as declarations ({name: keys}) with what an earlier
    config's or model's heads section (`heads`: keys of HEADS_BEFORE) set for them.

    >>> upgrade_heads("sts,para", {"sts_encoder": "bi", "para_mnrl_weight": 0.5})["para"]["mnrl_weight"]
    0.5
    """
    return {name: {**task.to_config(), **task.family.upgraded_heads(task, heads)}
            for name, task in declare_tasks(tasks).items()}
