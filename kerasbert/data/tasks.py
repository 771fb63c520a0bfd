"""Readers for the task files: CS224N minbert TSVs (the shared data) and GLUE TSVs.

Which columns a task takes, and how its text is cleaned, is its declaration's
(`kerasbert.tasks.TASKS`).

Formats (see `../shared/data/README.md`): tab-separated, a header whose first column name
is empty in the CS224N files, which are CSV-quoted (Quora questions containing `"` were
quoted twice); GLUE's files are not quoted. Each line is read on its own (`rows.py`), so
a stray quote damages one row. A damaged row (a quote left open, wrong field count, a
label that is not a finite number in range, empty text) is skipped and counted per file;
a file that is mostly damaged is an error naming the file and the first bad line.

Example:
    >>> result = read_task_file("sst", "../shared/data/cs224n/sst-dev.tsv")
    >>> len(result.examples), result.skipped
    (1101, 0)
    >>> result.examples[0].text_a[:12]
    "It 's a lov"
"""

from __future__ import annotations

import dataclasses
import math
import os

from kerasbert.data.rows import Damaged, DataError, check_damage, read_tsv, read_utf8  # noqa: F401 (re-exported)
from kerasbert.tasks import TASKS, Task, get_task


@dataclasses.dataclass(frozen=True)
class Example:
    """One labelled example. `text_b` is "" for single-sentence tasks."""

    text_a: str
    text_b: str
    label: float  # class id, or the score of a pair_score task
    uid: str = ""


@dataclasses.dataclass(frozen=True)
class ReadResult:
    examples: list[Example]
    skipped: int  # damaged rows skipped
    path: str


def detect_layout(header: list[str]) -> str:
    return "cs224n" if header and header[0] == "" else "glue"


def _has_columns(columns, header: list[str]) -> bool:
    return all(name in header for name in (columns.text_a, columns.text_b, columns.label) if name)


def _parse_label(task: Task, raw: str) -> float:
    value = float(raw)  # Quora labels are "1.0"
    if not math.isfinite(value):
        raise ValueError(f"label {raw!r} is not a finite number")
    if task.kind == "pair_score":
        if not 0.0 <= value <= task.max_score:
            raise ValueError(f"score {value} outside [0, {task.max_score:g}]")
        return value
    if value != int(value):
        raise ValueError(f"label {raw!r} is not a whole number")
    label = int(value)
    if not 0 <= label < task.num_classes:
        raise ValueError(f"label {label} outside [0, {task.num_classes - 1}]")
    return label


def _clean(task: Task, text: str) -> str:
    return " ".join(task.clean(text.strip()).split())


def read_task_file(task: str, path: str, max_bad_fraction: float = 0.1) -> ReadResult:
    """Reads one task file (cs224n or GLUE layout, detected from its header).

    Raises DataError for a missing file, bad UTF-8, missing columns, or when more
    than `max_bad_fraction` of the rows are damaged.
    """
    task = get_task(task)
    if not os.path.isfile(path):
        raise DataError(f"{path}: file not found")
    # The CS224N files are CSV-quoted; GLUE's are not: a `"` there is text wherever it stands.
    table = read_tsv(path, quoted=lambda header: detect_layout(header) == "cs224n")
    header = table.header
    layout = detect_layout(header)
    if layout not in task.columns:
        readers = [other.name for other in TASKS.values()
                   if layout in other.columns and _has_columns(other.columns[layout], header)]
        hint = f"; it is task {readers[0]!r}'s layout ({TASKS[readers[0]].title})" if readers else ""
        raise DataError(f"{path}:1: a {layout}-layout header{hint}, but task {task.name!r} "
                        f"({task.title}) is read only from {'/'.join(sorted(task.columns))} files. "
                        f"Header: {header}")
    col_a, col_b, col_label, col_id = dataclasses.astuple(task.columns[layout])
    wanted = [c for c in (col_a, col_b, col_label) if c]
    missing = [c for c in wanted if c not in header]
    if missing:
        raise DataError(f"{path}:1: header lacks column(s) {missing} for task {task.name!r} "
                        f"({layout} layout). Header: {header}")
    index = {name: i for i, name in enumerate(header)}

    examples, damaged = [], list(table.damaged)
    for line, row in table.rows:
        try:
            text_a = _clean(task, row[index[col_a]])
            text_b = _clean(task, row[index[col_b]]) if col_b else ""
            if not text_a or (col_b and not text_b):
                raise ValueError("empty text")
            label = _parse_label(task, row[index[col_label]].strip())
        except ValueError as error:
            damaged.append(Damaged(line, str(error)))
            continue
        uid = row[index[col_id]] if col_id and col_id in index else str(line)
        examples.append(Example(text_a, text_b, label, uid))
    damaged.sort(key=lambda row: row.line)
    check_damage(path, damaged, len(examples) + len(damaged), max_bad_fraction)
    return ReadResult(examples, len(damaged), path)
