"""Readers for the task files: CS224N minbert TSVs (the shared data) and GLUE TSVs.

Which columns a task takes, and how its text is cleaned, is its declaration's
(`kerasbert.tasks.TASKS`).

Formats (see `../shared/data/README.md`): tab-separated, CSV-style quoting, a header
whose first column name is empty. Quora questions containing `"` were quoted twice.
A damaged row (unparseable label, empty text) is skipped and counted per file; a file
that is mostly damaged is an error naming the file and the first bad line.

Example:
    >>> result = read_task_file("sst", "../shared/data/cs224n/sst-dev.tsv")
    >>> len(result.examples), result.skipped
    (1101, 0)
    >>> result.examples[0].text_a[:12]
    "It 's a lov"
"""

from __future__ import annotations

import csv
import dataclasses
import io
import logging
import os

from kerasbert.tasks import Task, get_task

log = logging.getLogger(__name__)



class DataError(ValueError):
    """A data file is missing or cannot be read; the message names file and line."""


def read_utf8(path: str) -> str:
    """A text file's content, or a DataError naming the line of its first bad UTF-8 byte.

    Example:
        >>> read_utf8("corpus.txt")[:12]
        'The cat sat.'
    """
    with open(path, "rb") as f:
        raw = f.read()
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not valid UTF-8 ({error.reason} at byte {error.start})") from None


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


def _parse_label(task: Task, raw: str) -> float:
    value = float(raw)  # Quora labels are "1.0"
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
    text = read_utf8(path)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t")
    header = next(reader, None)
    if not header:
        raise DataError(f"{path}: empty file (no header line)")
    layout = detect_layout(header)
    if layout not in task.columns:
        raise DataError(f"{path}:1: a {layout}-layout header, but task {task.name!r} is read only from "
                        f"{sorted(task.columns)} files. Header: {header}")
    col_a, col_b, col_label, col_id = dataclasses.astuple(task.columns[layout])
    wanted = [c for c in (col_a, col_b, col_label) if c]
    missing = [c for c in wanted if c not in header]
    if missing:
        raise DataError(f"{path}:1: header lacks column(s) {missing} for task {task!r} "
                        f"({layout} layout). Header: {header}")
    index = {name: i for i, name in enumerate(header)}

    examples, bad_lines = [], []
    for row in reader:
        line = reader.line_num
        try:
            if len(row) != len(header):
                raise ValueError(f"{len(row)} fields, header has {len(header)}")
            text_a = _clean(task, row[index[col_a]])
            text_b = _clean(task, row[index[col_b]]) if col_b else ""
            if not text_a or (col_b and not text_b):
                raise ValueError("empty text")
            label = _parse_label(task, row[index[col_label]].strip())
        except ValueError as error:
            bad_lines.append((line, str(error)))
            continue
        uid = row[index[col_id]] if col_id and col_id in index else str(line)
        examples.append(Example(text_a, text_b, label, uid))

    total = len(examples) + len(bad_lines)
    if total == 0:
        raise DataError(f"{path}: no data rows after the header")
    if len(bad_lines) > max_bad_fraction * total:
        line, reason = bad_lines[0]
        raise DataError(f"{path}:{line}: {len(bad_lines)} of {total} rows are damaged; "
                        f"first: {reason}")
    for line, reason in bad_lines:
        log.warning("%s:%d: skipped damaged row (%s)", path, line, reason)
    return ReadResult(examples, len(bad_lines), path)
