"""Dev-set predictions and metrics with the key names of metrics.json.

Each task's metrics are its family's (kerasbert/families/: `Family.scores`, `per_class`): `<task>_accuracy` (classes,
pair_classes); `<task>_accuracy`, `<task>_f1` (pair_binary); `<task>_pearson`,
`<task>_spearman` (score, pair_score); per-class precision, recall and F1 for the classes
kinds; a tags task's `<task>_f1`, `<task>_precision`, `<task>_recall` (entities,
as conlleval counts them) and `<task>_f1_<TYPE>` per entity type (the per-type
table); a span task's `<task>_f1`, `<task>_exact_match` (SQuAD's official evaluation,
as fractions: the script prints percent). The families are scored on their entities and
answers as the export serves them: the export's own functions, traced on the in-memory model.
`overall` is the mean of the tasks' headlines (accuracy, F1, or
(pearson + 1) / 2); for sst, para and sts that is the reference study's
    overall = (sst_accuracy + para_accuracy + (sts_pearson + 1) / 2) / 3

Example:
    >>> from kerasbert.data.task_files import Example
    >>> dev_examples = [Example("the cat sat", "a cat sat", 4.5), Example("the dog ran", "the cat sat", 0.5),
    ...                 Example("the dog ran", "dogs ran", 3.0)]
    >>> predictions = predict_examples(model, preprocessor, "sts", dev_examples)
    >>> predictions.shape
    (3,)
    >>> task_metrics("sts", [e.label for e in dev_examples], predictions)  # a tiny random model's
    {'sts_pearson': ..., 'sts_spearman': ...}
"""

from __future__ import annotations

import functools

import weakref

import numpy as np
import tensorflow as tf

from kerasbert.errors import ConfigError
from kerasbert.data.task_files import read_task_file, sample_examples
from kerasbert.finetuning.data import task_dataset
from kerasbert.tasks import DEFAULT_TASKS, Task, get_task

# The reference study's dev-set figures, quoted (its final overall as quoted; the formula
# gives a slightly different number from its rounded parts).
REFERENCE_STUDY = {
    "base implementation": {"sst_accuracy": 0.385, "para_accuracy": 0.375, "sts_pearson": 0.280},
    "final (continued MLM, cosine heads, AdamW, exp. decay)": {
        "sst_accuracy": 0.520, "para_accuracy": 0.583, "sts_pearson": 0.528, "overall": 0.589},
}
_PREDICT_FUNCTIONS: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _predict_function(model, task: str):
    """One traced prediction function per (model, task), reused across evaluations; batches
    are trimmed to their longest sequence, so it is traced for any length, not each one."""
    functions = _PREDICT_FUNCTIONS.setdefault(model, {})
    if task not in functions:
        # A partial, not a lambda: TensorFlow counts retraces by the Python code object, and one
        # lambda's code shared by every task's function made their first traces look like
        # retracing ("6 out of the last 10 calls ... triggered tf.function retracing").
        functions[task] = tf.function(functools.partial(model.task_prediction, task), reduce_retracing=True,
                                      autograph=False)
    return functions[task]


def family_signatures(model, preprocessor, task: str):
    """The serving functions of a token-level task's head on `model` (`TaggingSignatures`,
    `SpanSignatures`), over the task's graph (`TaskPreprocessor.graph_of`): what the export serves
    and what evaluation scores.

    Example:
        >>> entities = family_signatures(model, preprocessor, "ner").entities(tf.constant(["the cat ran"]))
        >>> entities["word"], entities["num_words"]
        (<tf.Tensor: shape=(1, 3), dtype=string, numpy=array([[b'the', b'cat', b'ran']], dtype=object)>, <tf.Tensor: shape=(1,), dtype=int64, numpy=array([3])>)
    """
    return model.task_specs[task].family.signatures(model, preprocessor, task)


def _family_function(model, preprocessor, task: str):
    """The traced text function of a token-level task (`entities`, `answer`), one per (model, task)."""
    functions = _PREDICT_FUNCTIONS.setdefault(model, {})
    if task not in functions:
        family = model.task_specs[task].family
        function, signature = family_signatures(model, preprocessor, task).functions()[family.decoder_function]
        functions[task] = tf.function(function, input_signature=signature, autograph=False)
    return functions[task]


def predict_task(model, task: str, dataset: tf.data.Dataset) -> np.ndarray:
    """`model.task_prediction` of every batch: class probabilities (n, classes), a probability (n,)
    or a score (n,)."""
    step = _predict_function(model, task)
    return np.concatenate([step(x).numpy() for x, _ in dataset])


def predict_examples(model, preprocessor, task: str, examples, batch_size: int = 64):
    """The predictions of `task`'s head for a list of examples, in their order (its family's
    `predict_examples`): a sentence task's `predict_texts`; a tags task's, a list of each sentence's
    tags, and a span task's, a list of answers (`predict_decoded`)."""
    return model.task_specs[task].family.predict_examples(model, preprocessor, task, examples, batch_size)


def predict_decoded(model, preprocessor, task: str, examples, batch_size: int = 64) -> list:
    """A token-level task's predictions, decoded in the graph as the export serves them."""
    return model.task_specs[task].family.predict(_family_function(model, preprocessor, task), examples, batch_size)


def predict_texts(model, preprocessor, task: str, examples, batch_size: int = 64) -> np.ndarray:
    """`predict_task` on a list of column-file examples, returned in their order. The batches are
    cut from the examples sorted by text length, so a batch trimmed to its longest text carries
    little padding."""
    order = np.argsort([len(e.text_a) + len(e.text_b) for e in examples], kind="stable")
    dataset = task_dataset(model.task_specs[task], [examples[i] for i in order], preprocessor, batch_size,
                           training=False)
    predictions = predict_task(model, task, dataset)
    in_order = np.empty_like(predictions)
    in_order[order] = predictions
    return in_order


def score_file(model, preprocessor, task: str, path: str, limit: int = 0) -> dict[str, float]:
    """Metrics of `task`'s head on a labelled file of that task's format (a seeded random
    `limit` rows of it if > 0).

    Example:
        >>> score_file(model, preprocessor, "sts", f"{data_dir}/cs224n/sts-dev.tsv", limit=50)  # a tiny random model's
        {'sts_pearson': ..., 'sts_spearman': ...}
    """
    if task not in model.tasks:
        raise ConfigError(f"This model has no head for task {task!r}; its tasks: {', '.join(model.tasks)}")
    examples = sample_examples(read_task_file(model.task_specs[task], path), limit)
    return score_examples(model, preprocessor, task, examples)[0]


def score_examples(model, preprocessor, task: str, examples) -> tuple[dict[str, float], object]:
    """(metrics, predictions) of `task`'s head on labelled examples: what a run's dev
    evaluation and `score_file` report."""
    predictions = predict_examples(model, preprocessor, task, examples)
    return task_metrics(model.task_specs[task], task_labels(model.task_specs[task], examples), predictions), \
        predictions


def task_labels(task: Task, examples) -> list:
    """The references the metrics compare with: labels; a tags task's tags per sentence; a
    span task's reference answers per question."""
    return task.family.references(task, examples)


def task_metrics(task: "str | Task", labels, predictions) -> dict[str, float]:
    """The metrics of `task`'s family, named `<task>_<metric>`.

    >>> task_metrics("sts", [0.0, 2.5, 5.0], np.array([0.5, 2.0, 4.0]))
    {'sts_pearson': 0.9966158955401239, 'sts_spearman': 1.0}
    >>> task_metrics("squad", [["Denver Broncos", "the Broncos"], ["Paris"]], ["the Broncos", "Rome"])
    {'squad_f1': 0.5, 'squad_exact_match': 0.5}
    """
    task = get_task(task)
    return task.family.scores(task, labels, predictions)


def per_class(task: Task, labels, predictions) -> dict | None:
    """precision, recall, F1 and support per class (per entity type of a tags task), or None.

    >>> per_class(get_task("para"), [0, 1, 1], np.array([0.1, 0.9, 0.2]))["duplicate"]
    {'precision': 1.0, 'recall': 0.5, 'f1': 0.6666666666666666, 'support': 2}
    """
    return task.family.per_class(task, labels, predictions)


def predicted_classes(task: Task, predictions: np.ndarray) -> np.ndarray:
    """Class ids from a classes task's predictions (probabilities, or pair_binary's probability)."""
    return task.family.predicted_classes(task, predictions)


def overall_score(metrics: dict[str, float], tasks=DEFAULT_TASKS) -> float:
    """The mean of `tasks`' headlines (accuracy, or (pearson + 1) / 2): for sst, para and sts
    the reference study's overall score; a run is selected by the tasks it trains.

    >>> overall_score({"sst_accuracy": 0.5, "para_accuracy": 0.8, "sts_pearson": 0.6}, ("sst",))
    0.5
    """
    return sum(get_task(task).headline(metrics) for task in tasks) / len(tasks)


def headline_keys(tasks) -> list[str]:
    """Each task's headline metric, then overall: what the console reports of a run.

    >>> headline_keys(("sst", "sts"))
    ['sst_accuracy', 'sts_pearson', 'overall']
    """
    return [*(get_task(task).metric_names[0] for task in tasks), "overall"]
