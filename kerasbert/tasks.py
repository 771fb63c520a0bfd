"""The fine-tuning tasks, each declared once; every consumer iterates over `TASKS`.

A task names its files, the columns its reader takes, its head and its export
signatures; its `kind` decides what the head computes, its loss, its metrics and the
shape of its signatures, in one place each (finetuning/model.py, finetuning/evaluation.py,
export.py):

    kind         input         head output                 loss        metrics (headline first)
    classes      one text      softmax over num_classes    x-entropy   accuracy
    pair_binary  text a, b     probability of "same"       binary x-e  accuracy, f1
    pair_score   text a, b     score in [0, max_score]     mse         pearson, spearman

Signatures of a task (head `h`): `h` (text in), `h_tokens` (token ids in), and
`h_classify` (classes, pair_binary) or `h_regress` (pair_score) for TF Serving's
:classify and :regress.

Adding a task is one `Task(...)` in `TASKS` below (and its test): the reader, the config's
file/share/weight maps, the model's heads, evaluation and the export follow.

Example:
    >>> TASKS["sts"].head, TASKS["sts"].kind, TASKS["sts"].is_pair
    ('similarity', 'pair_score', True)
    >>> [task.signature_names for task in TASKS.values()][0]
    ('sentiment', 'sentiment_tokens', 'sentiment_classify')
"""

from __future__ import annotations

import dataclasses
from typing import Callable

KINDS = ("classes", "pair_binary", "pair_score")
# Readers detect the layout from the header: the shared data's CS224N files start with an
# empty column name; GLUE's TSVs do not.
LAYOUTS = ("cs224n", "glue")


@dataclasses.dataclass(frozen=True)
class Columns:
    """Which header columns hold the texts, the label and the id (None: absent)."""

    text_a: str
    text_b: str | None
    label: str
    id: str | None = None


@dataclasses.dataclass(frozen=True)
class Task:
    """One fine-tuning task.

    Example:
        >>> Task("sst2", "binary_sentiment", "classes", "SST-2", "glue/SST-2/train.tsv", "glue/SST-2/dev.tsv",
        ...      {"glue": Columns("sentence", None, "label")}, num_classes=2, class_names=("negative", "positive"))
    """

    name: str  # key of configs, metrics (`<name>_accuracy`), batches and prediction files
    head: str  # the head layer (`<head>_head`) and the export's signature names
    kind: str  # one of KINDS
    title: str  # for plots and reports
    train_file: str  # default paths, relative to --data_dir
    dev_file: str
    columns: dict[str, Columns]  # layout -> columns
    num_classes: int = 2  # classes: the number of classes; pair_binary: 2
    class_names: tuple[str, ...] = ()  # classes, pair_binary: one per class id (default "0", "1", ...)
    max_score: float = 5.0  # pair_score: labels and predictions in [0, max_score]
    clean: Callable[[str], str] = lambda text: text  # undoes the file's escaping

    def __post_init__(self):
        if self.kind not in KINDS:
            raise ValueError(f"Task {self.name!r}: kind must be one of {KINDS}. Received: {self.kind!r}")
        if self.kind == "pair_binary" and self.num_classes != 2:
            raise ValueError(f"Task {self.name!r}: a pair_binary task has 2 classes")
        if self.class_names and len(self.class_names) != self.num_classes:
            raise ValueError(f"Task {self.name!r}: {len(self.class_names)} class names for "
                             f"{self.num_classes} classes")
        unknown = set(self.columns) - set(LAYOUTS)
        if unknown:
            raise ValueError(f"Task {self.name!r}: unknown layout(s) {sorted(unknown)}; known: {LAYOUTS}")

    @property
    def is_pair(self) -> bool:
        return self.kind != "classes"

    @property
    def labels(self) -> tuple[str, ...]:
        """The class names served by :classify and the text signatures (classes, pair_binary)."""
        return self.class_names or tuple(str(i) for i in range(self.num_classes))

    @property
    def metric_names(self) -> tuple[str, ...]:
        """The keys this task adds to metrics.json; the first is its headline."""
        names = {"classes": ("accuracy",), "pair_binary": ("accuracy", "f1"), "pair_score": ("pearson", "spearman")}
        return tuple(f"{self.name}_{metric}" for metric in names[self.kind])

    @property
    def signature_names(self) -> tuple[str, ...]:
        """Text signature, token-id signature, and the :classify or :regress one."""
        serving = "regress" if self.kind == "pair_score" else "classify"
        return (self.head, f"{self.head}_tokens", f"{self.head}_{serving}")

    def headline(self, metrics: dict[str, float]) -> float:
        """This task's part of `overall`, in [0, 1]: accuracy, or (pearson + 1) / 2."""
        value = metrics[self.metric_names[0]]
        return (value + 1) / 2 if self.kind == "pair_score" else value


# --- Text cleaning of the shared files (see ../shared/data/README.md) -------------------

_PTB_REPLACEMENTS = (
    ("-LRB-", "("), ("-RRB-", ")"), ("-LSB-", "["), ("-RSB-", "]"),
    ("\\/", "/"), ("\\*", "*"), ("``", '"'), ("''", '"'),
)


def clean_ptb(text: str) -> str:
    """Undoes the Penn Treebank escapes of the SST sentences (`-LRB-` -> `(`).

    >>> clean_ptb("a -LRB- small -RRB- film")
    'a ( small ) film'
    """
    for escaped, plain in _PTB_REPLACEMENTS:
        text = text.replace(escaped, plain)
    return text


def unquote_twice_quoted(text: str) -> str:
    """Second CSV unquoting for Quora fields that were quoted twice.

    `"What does ""69"" mean?"` -> `What does "69" mean?`. Text that is not a whole
    quoted string (including the damaged rows' open quotes) is returned unchanged.
    """
    if len(text) >= 2 and text[0] == '"' and text[-1] == '"':
        inner = text[1:-1]
        if '"' not in inner.replace('""', ""):
            return inner.replace('""', '"')
    return text


def clean_review(text: str) -> str:
    """CFIMDB reviews: HTML line breaks to spaces; reviews with quotes were escaped more
    than once (a `\"\"\"` wrapper, each quote mark doubled), so they are unescaped.

    >>> clean_review('\"\"\" a \"\" \"\" fine \"\" \"\" film .<br /><br />Go . \"\"\"')
    'a " fine " film . Go .'
    """
    text = text.replace("<br />", " ").strip()
    if len(text) >= 6 and text.startswith('"""') and text.endswith('"""'):
        text = text[3:-3]
    return " ".join(text.replace('"" ""', '"').replace('""', '"').split())


def _task_list(*tasks: Task) -> dict[str, Task]:
    return {task.name: task for task in tasks}


TASKS: dict[str, Task] = _task_list(
    Task("sst", "sentiment", "classes", "SST-5", "cs224n/sst-train.tsv", "cs224n/sst-dev.tsv",
         {"cs224n": Columns("sentence", None, "sentiment", "id")}, num_classes=5,
         class_names=("very negative", "negative", "neutral", "positive", "very positive"), clean=clean_ptb),
    Task("para", "paraphrase", "pair_binary", "Quora", "cs224n/quora-train.tsv", "cs224n/quora-dev.tsv",
         {"cs224n": Columns("sentence1", "sentence2", "is_duplicate", "id"),
          "glue": Columns("question1", "question2", "is_duplicate", "id")},
         class_names=("not duplicate", "duplicate"), clean=unquote_twice_quoted),
    Task("sts", "similarity", "pair_score", "STS-B", "cs224n/sts-train.tsv", "cs224n/sts-dev.tsv",
         {"cs224n": Columns("sentence1", "sentence2", "similarity", "id"),
          "glue": Columns("sentence1", "sentence2", "score")}),
    Task("cfimdb", "review_sentiment", "classes", "CFIMDB", "cs224n/cfimdb-train.tsv", "cs224n/cfimdb-dev.tsv",
         {"cs224n": Columns("sentence", None, "sentiment", "id")},
         num_classes=2, class_names=("negative", "positive"), clean=clean_review),
    # GLUE's SST-2 (sentence, label: 0 negative, 1 positive): binary, unlike SST-5's five classes.
    Task("sst2", "binary_sentiment", "classes", "SST-2", "glue/SST-2/train.tsv", "glue/SST-2/dev.tsv",
         {"glue": Columns("sentence", None, "label")}, num_classes=2, class_names=("negative", "positive")),
)
# What a run trains when its config does not say: the reference study's three tasks.
DEFAULT_TASKS = ("sst", "para", "sts")
# The id a batch carries in its `task` field, fixed by declaration order.
TASK_IDS = {name: index for index, name in enumerate(TASKS)}


def pair_encoders(pair_encoder: str = "cross", sts_encoder: str | None = "") -> dict[str, str]:
    """Pair task -> "cross" (the pair packed as one sequence) or "bi" (each text alone):
    pair_score tasks take `sts_encoder` when it is set, the others `pair_encoder`.

    >>> pair_encoders("cross", "bi")
    {'para': 'cross', 'sts': 'bi'}
    """
    return {name: (sts_encoder or pair_encoder) if task.kind == "pair_score" else pair_encoder
            for name, task in TASKS.items() if task.is_pair}


def task_names() -> tuple[str, ...]:
    """The declared tasks' names, in declaration order.

    >>> task_names()
    ('sst', 'para', 'sts', 'cfimdb', 'sst2')
    """
    return tuple(TASKS)


def get_task(name: str) -> Task:
    """The declared task `name`, or a ValueError listing the known ones.

    >>> get_task("para").title
    'Quora'
    """
    if name not in TASKS:
        raise ValueError(f"Unknown task {name!r}. Known tasks: {tuple(TASKS)}")
    return TASKS[name]


def check_task_names(names, what: str = "tasks") -> tuple[str, ...]:
    """`names` as a tuple, in the order given (the first task's text signature is an
    export's serving_default), or a ValueError naming what is wrong.

    >>> check_task_names(["sts", "sst"])
    ('sts', 'sst')
    """
    names = tuple(names)
    unknown = [name for name in names if name not in TASKS]
    if unknown or not names:
        raise ValueError(f"{what} must name some of {tuple(TASKS)}. Received: {names}")
    if len(set(names)) != len(names):
        raise ValueError(f"{what} names a task twice. Received: {names}")
    return names
