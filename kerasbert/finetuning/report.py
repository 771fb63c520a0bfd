"""A fine-tuning run's `report.md`: each task's headline metrics, per-class precision, recall
and F1 of the classes kinds (per entity type of a tags task), and the plots beside it.

Example:
    >>> print("\\n".join(class_table({"negative": {"precision": 0.8, "recall": 0.5, "f1": 0.615, "support": 10}})))
    | class | precision | recall | F1 | dev examples |
    |---|---:|---:|---:|---:|
    | negative | 0.800 | 0.500 | 0.615 | 10 |
"""

from __future__ import annotations

import os


def class_table(per_class: dict[str, dict[str, float]], what: str = "class", support: str = "dev examples") -> list[str]:
    """Markdown rows of one task's per-class (or per entity type) precision, recall, F1 and support."""
    lines = [f"| {what} | precision | recall | F1 | {support} |", "|---|---:|---:|---:|---:|"]
    lines += [f"| {name} | {row['precision']:.3f} | {row['recall']:.3f} | {row['f1']:.3f} | {row['support']} |"
              for name, row in per_class.items()]
    return lines


def write_run_report(output_dir: str, tasks: dict, metrics: dict, confusion_files: dict[str, str]) -> str:
    """Writes `<output_dir>/report.md` for the run's `tasks` ({name: Task}); returns its path."""
    steps = (f"{metrics['train_steps']} steps; the weights of step {metrics['best_step']} are kept (the best dev "
             f"`overall`, {metrics['overall']:.3f})" if "best_step" in metrics else f"overall {metrics['overall']:.3f}")
    lines = [f"# Fine-tuning run: {os.path.basename(os.path.abspath(output_dir))}", "",
             f"{steps}. Metrics: [metrics.json](metrics.json).", ""]
    if os.path.exists(os.path.join(output_dir, "curves.png")):
        lines += ["![losses and dev metrics](curves.png)", ""]
    for name, task in tasks.items():
        values = ", ".join(f"{key.removeprefix(name + '_')} {metrics[key]:.3f}" for key in task.metric_names)
        lines += [f"## {task.title} (`{name}`, {task.kind})", "", f"{values}.", ""]
        if name in metrics.get("per_class", {}):
            lines += class_table(metrics["per_class"][name], *task.family.per_class_headings) + [""]
        if name in confusion_files:
            lines += [f"![{task.title} confusion matrix]({confusion_files[name]})", ""]
    path = os.path.join(output_dir, "report.md")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return path
