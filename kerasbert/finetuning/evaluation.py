"""Dev-set predictions and metrics with the key names of metrics.json.

    sst_accuracy; para_accuracy, para_f1; sts_pearson, sts_spearman;
    overall = (sst_accuracy + para_accuracy + (sts_pearson + 1) / 2) / 3   (the reference study's)

Example:
    >>> predictions = predict_examples(model, preprocessor, "sts", dev_examples)
    >>> task_metrics("sts", [e.label for e in dev_examples], predictions)
    {'sts_pearson': 0.87, 'sts_spearman': 0.86}
"""

from __future__ import annotations

import weakref

import numpy as np
import scipy.stats
import tensorflow as tf

from kerasbert.finetuning.data import load_examples, task_dataset

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
        functions[task] = tf.function(lambda x: model.task_prediction(task, x), reduce_retracing=True)
    return functions[task]


def predict_task(model, task: str, dataset: tf.data.Dataset) -> np.ndarray:
    """sst: class probabilities (n, 5); para: probability of paraphrase (n,); sts: score (n,)."""
    step = _predict_function(model, task)
    return np.concatenate([step(x).numpy() for x, _ in dataset])


def predict_examples(model, preprocessor, task: str, examples, batch_size: int = 64) -> np.ndarray:
    """`predict_task` on a list of examples, returned in their order. The batches are cut from
    the examples sorted by text length, so a batch trimmed to its longest text carries little
    padding."""
    order = np.argsort([len(e.text_a) + len(e.text_b) for e in examples], kind="stable")
    dataset = task_dataset(task, [examples[i] for i in order], preprocessor, batch_size, training=False)
    predictions = predict_task(model, task, dataset)
    in_order = np.empty_like(predictions)
    in_order[order] = predictions
    return in_order


def score_file(model, preprocessor, task: str, path: str, limit: int = 0) -> dict[str, float]:
    """Metrics of `task`'s head on a labelled file of that task's format (a seeded random
    `limit` rows of it if > 0).

    Example:
        >>> score_file(model, preprocessor, "sts", "../shared/data/cs224n/sts-dev.tsv")
        {'sts_pearson': 0.87, 'sts_spearman': 0.86}
    """
    examples = load_examples(task, path, limit)
    return task_metrics(task, [e.label for e in examples], predict_examples(model, preprocessor, task, examples))


def task_metrics(task: str, labels: np.ndarray, predictions: np.ndarray) -> dict[str, float]:
    labels = np.asarray(labels)
    if task == "sst":
        return {"sst_accuracy": float(np.mean(predictions.argmax(-1) == labels))}
    if task == "para":
        predicted = predictions >= 0.5
        truth = labels >= 0.5
        true_positives = np.sum(predicted & truth)
        precision = true_positives / max(np.sum(predicted), 1)
        recall = true_positives / max(np.sum(truth), 1)
        f1 = 2 * precision * recall / max(precision + recall, 1e-12)
        return {"para_accuracy": float(np.mean(predicted == truth)), "para_f1": float(f1)}
    return {"sts_pearson": float(scipy.stats.pearsonr(predictions, labels)[0]),
            "sts_spearman": float(scipy.stats.spearmanr(predictions, labels)[0])}


def overall_score(metrics: dict[str, float], tasks: tuple[str, ...] = ("sst", "para", "sts")) -> float:
    """The reference study's overall score; with `tasks`, the mean of those tasks' parts only
    (what a run that trains some of the tasks is selected by).

    >>> overall_score({"sst_accuracy": 0.5, "para_accuracy": 0.8, "sts_pearson": 0.6}, ("sst",))
    0.5
    """
    parts = {"sst": metrics["sst_accuracy"], "para": metrics["para_accuracy"],
             "sts": (metrics["sts_pearson"] + 1) / 2}
    return sum(parts[task] for task in tasks) / len(tasks)


def plot_confusion(labels, predicted, output_png: str, title: str) -> None:
    """5x5 confusion matrix of the sentiment classes, counts in each cell."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    matrix = np.zeros((5, 5), int)
    for truth, guess in zip(np.asarray(labels, int), np.asarray(predicted, int)):
        matrix[truth, guess] += 1
    names = ["very neg", "neg", "neutral", "pos", "very pos"]
    fig, ax = plt.subplots(figsize=(5.5, 5))
    ax.imshow(matrix, cmap="Blues")
    for i in range(5):
        for j in range(5):
            ax.text(j, i, matrix[i, j], ha="center", va="center",
                    color="white" if matrix[i, j] > matrix.max() / 2 else "black")
    ax.set_xticks(range(5), names, rotation=30)
    ax.set_yticks(range(5), names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    ax.set_title(title)
    fig.tight_layout()
    fig.savefig(output_png, dpi=100)
    plt.close(fig)
