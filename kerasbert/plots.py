"""The figures a run writes: training curves and a confusion matrix, each a PNG whose text
stays inside the figure.

Example (a run's history.csv, as keras' CSVLogger writes it; one row a block of 150 steps):
    >>> _ = (tmp_path / "history.csv").write_text("epoch,loss,val_loss\\n0,1.2,1.3\\n1,0.8,1.0\\n")
    >>> plot_curves(f"{tmp_path}/history.csv", f"{tmp_path}/curves.png", "multitask fine-tuning", 150)
    >>> plot_confusion([0, 1, 1], [0, 1, 0], ["neg", "pos"], f"{tmp_path}/sst_confusion.png", "SST-2: 3 dev examples")
    >>> sorted(path.name for path in tmp_path.glob("*.png"))
    ['curves.png', 'sst_confusion.png']
"""

from __future__ import annotations

import csv
import os
import textwrap

import numpy as np

STEP_CURVE = "steps.csv"  # beside history.csv: the training loss every few steps (StepCurve)


def _pyplot():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _rows(path: str) -> list[dict]:
    if not os.path.exists(path):
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _number(text) -> float:
    try:
        return float(text)
    except (TypeError, ValueError):  # CSVLogger writes "NA" for missing values
        return float("nan")


def _title(fig, title: str) -> None:
    """`title` over the figure, wrapped to its width (about 8 characters an inch at 12 pt)."""
    fig.suptitle(textwrap.fill(title, max(20, int(fig.get_figwidth() * 8))))


def plot_curves(history_csv: str, output_png: str, title: str, steps_per_block: int = 1) -> None:
    """Plots every `*loss` and `*accuracy` column against training step: the training loss
    every few steps from `steps.csv` beside `history_csv` where the run logged one (StepCurve),
    and every column of `history_csv` (a CSVLogger file, one row a block); held-out (`val_*`,
    `dev_*`) columns dashed."""
    rows = _rows(history_csv)
    if not rows:
        return
    steps = _rows(os.path.join(os.path.dirname(history_csv), STEP_CURVE))
    plt = _pyplot()
    blocks = [(int(r["epoch"]) + 1) * steps_per_block for r in rows]
    fig, (loss_ax, acc_ax) = plt.subplots(1, 2, figsize=(11, 4))
    colours: dict[str, str] = {}
    for key in rows[0]:
        values = [_number(r.get(key)) for r in rows]
        if key == "epoch" or all(np.isnan(values)):
            continue
        base = key.removeprefix("val_")  # a held-out curve takes its training curve's colour
        style = {"label": key, "linestyle": "--" if base != key else "-",
                 "color": colours.setdefault(base, f"C{len(colours)}")}
        if key.endswith("loss"):
            if steps and key in steps[0]:  # the finer curve instead of one point a block
                kept = [r for r in steps if not np.isnan(_number(r[key]))]  # not a task's windows without its steps
                loss_ax.plot([int(r["step"]) for r in kept], [_number(r[key]) for r in kept], **style)
            else:
                loss_ax.plot(blocks, values, marker=".", **style)
        elif key.endswith("accuracy") or key.endswith("pearson"):
            acc_ax.plot(blocks, values, marker=".", **style)
    scores = sorted({key.removeprefix("val_").removeprefix("dev_").rsplit("_", 1)[-1] for key in rows[0]
                     if key.endswith(("accuracy", "pearson"))})
    for ax, name in ((loss_ax, "loss"), (acc_ax, " / ".join(scores) or "accuracy")):
        ax.set_xlabel("training step")
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylabel(name)
        ax.grid(alpha=0.3)
        if ax.lines:
            ax.legend(fontsize=8)
    _title(fig, title)
    fig.tight_layout()
    fig.savefig(output_png, dpi=100)
    plt.close(fig)


def confusion_figure(labels, predicted, class_names, title: str):
    """The confusion matrix of a classes task as a matplotlib figure, counts in each cell."""
    plt = _pyplot()
    n = len(class_names)
    matrix = np.zeros((n, n), int)
    for truth, guess in zip(np.asarray(labels, int), np.asarray(predicted, int)):
        matrix[truth, guess] += 1
    fig, ax = plt.subplots(figsize=(1.5 + 0.8 * n, 1.2 + 0.76 * n))
    ax.imshow(matrix, cmap="Blues")
    for i in range(n):
        for j in range(n):
            ax.text(j, i, matrix[i, j], ha="center", va="center",
                    color="white" if matrix[i, j] > matrix.max() / 2 else "black")
    ax.set_xticks(range(n), class_names, rotation=30)
    ax.set_yticks(range(n), class_names)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    _title(fig, title)
    fig.tight_layout()
    return fig


def plot_confusion(labels, predicted, class_names, output_png: str, title: str) -> None:
    """Writes `confusion_figure` to `output_png`."""
    fig = confusion_figure(labels, predicted, class_names, title)
    fig.savefig(output_png, dpi=100)
    _pyplot().close(fig)
