"""Readers for the task files: CSV, TSV and JSON Lines with named columns, and the shipped
CS224N and GLUE TSVs.

Which columns a task takes and how its text is cleaned is its settings' (a sentence family's
`ColumnSettings`); what its labels are, its family's (`Family.train_labels`, `label`; a task
whose columns name no label, `label` "", reads none: its family's `label(task, None, where)`
stands for each). Files:
- CSV, quoted as Python's `csv` writes it (a quoted field may hold commas, quotes, newlines);
- TSV, tab-separated with a header, a field that starts with `"` CSV-quoted;
- JSON Lines, one object per line, its keys naming the columns (labels may be numbers);
- the shipped TSVs: the CS224N files (a header whose first column name is empty, CSV-quoted;
  Quora's questions quoted twice) and GLUE's (not quoted), told apart by their header.
A file path may be local or on any file system TensorFlow reads (`gs://...`).

A damaged row (a quote left open, a wrong field count, bad JSON, empty text or label, a
score that is not finite or out of range) is skipped and counted per file; a file that is
mostly damaged is an error naming the file and the first bad line. A label that cannot be
the task's (a class the training file never had, text where a score belongs) is an error
naming file, line and column: the declaration or the file is wrong, not one row.

Example:
    >>> result = read_task_file("sst", "../shared/data/cs224n/sst-dev.tsv")
    >>> len(result.examples), result.skipped
    (1101, 0)
    >>> result.examples[0].text_a[:11]
    "It 's a lov"
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json

import numpy as np

from kerasbert.data.cleaning import CLEANERS
from kerasbert.data.rows import (MAX_FIELD_CHARS, Damaged, DataError, ReadResult, Table,  # noqa: F401
                                 check_damage, file_exists, read_tsv_text, read_utf8, refuse_mostly_damaged,
                                 text_lines)
from kerasbert.tasks import BUILTIN_TASKS, Task, file_format, get_task


@dataclasses.dataclass(frozen=True)
class Example:
    """One labelled example. `text_b` is "" for one-text tasks."""

    text_a: str
    text_b: str
    label: float  # class id, or the score of a score task
    uid: str = ""


@dataclasses.dataclass(frozen=True)
class Row:
    """A sound row before its label is known as a class or a score: the label as the file has it."""

    line: int
    text_a: str
    text_b: str
    label: object  # str, or a JSON number
    uid: str


@dataclasses.dataclass
class TaskRows:
    """A task file's sound rows and its damaged ones, before labels are checked."""

    path: str
    column: str  # the label's column, for messages
    rows: list[Row]
    damaged: list[Damaged]


def detect_layout(header: list[str]) -> str:
    return "cs224n" if header and header[0] == "" else "glue"


def read_task_file(task: "str | Task", path: str, max_bad_fraction: float = 0.1) -> ReadResult:
    """Reads one file of a task whose classes (or score range) are known: the shipped tasks,
    or a task `resolved` from its training file (see `read_task_rows`, `label_examples`).

    Raises DataError for a missing file, bad UTF-8, missing columns, a label that is not the
    task's, or when more than `max_bad_fraction` of the rows are damaged.
    """
    task = get_task(task)
    if task.family.format:  # a family's own format (CoNLL, SQuAD): its reader
        return task.family.read(task, path, max_bad_fraction)
    if not task.is_resolved:
        raise ValueError(f"task {task.name!r} has no classes (or score range) yet: they come from its "
                         "training file (`task, train = kerasbert.data.task_files.read_training_file(task, "
                         "train_path)`); read its other files with the task that returns")
    return label_examples(task, read_task_rows(task, path), max_bad_fraction)


def read_training_file(task: Task, path: str, max_bad_fraction: float = 0.1) -> tuple[Task, ReadResult]:
    """A task's training file, and the task with the classes (or score range) it shows where
    the declaration leaves them out. DataError: a single class, a declared class with no
    training example, a score label that is not a number.

    Example (Quora's file read as a user's task: its "1.0" and "0.0" labels are two classes):
        >>> quora = Task("quora", "pair_classes", text_a="sentence1", text_b="sentence2", label="is_duplicate")
        >>> task, dev = read_training_file(quora, "../shared/data/cs224n/quora-dev.tsv")
        >>> task.settings.labels, len(dev.examples), dev.skipped
        (('0', '1'), 1999, 1)
    """
    if task.family.format:
        return task.family.read_training(task, path, max_bad_fraction)
    table = read_task_rows(task, path)
    # A mostly damaged file says so before its classes are taken from the rows that are left.
    refuse_mostly_damaged(path, table.damaged, len(table.rows) + len(table.damaged), max_bad_fraction)
    if not task.is_resolved:
        values = task.family.train_labels(task, path, table.column, table.rows)
        if values:
            task = task.resolved(values)
    result = label_examples(task, table, max_bad_fraction)
    task.family.check_training(task, path, table.column, [example.label for example in result.examples])
    return task, result


def load_examples(task: "str | Task", path: str, limit: int = 0, seed: int = 0) -> list[Example]:
    """Reads a file of a task whose classes are known (a shipped task, or one resolved from
    its training file: `kerasbert.data.task_files.read_training_file`); with `limit`, a seeded
    random subset of that size. Damaged rows are skipped and counted; a mostly damaged file
    is an error naming its first bad line.

    Example:
        >>> examples = load_examples("sts", "../shared/data/cs224n/sts-dev.tsv")
        >>> len(examples), examples[0].label
        (863, 1.0)
    """
    return sample_examples(read_task_file(task, path), limit, seed)


def sample_examples(result, limit: int = 0, seed: int = 0) -> list[Example]:
    """A file's examples (a `ReadResult`), a seeded random `limit` of them if > 0."""
    if result.skipped:
        print(f"   {result.path}: skipped {result.skipped} damaged row(s)")
    if result.skipped_answers:
        print(f"   {result.path}: skipped {result.skipped_answers} answer(s) whose answer_start does not point at "
              "their text")
    examples = result.examples
    if limit and len(examples) > limit:
        keep = np.random.default_rng(seed).choice(len(examples), limit, replace=False)
        examples = [examples[i] for i in sorted(keep)]
    return examples


def read_task_rows(task: Task, path: str) -> TaskRows:
    """A task file's rows, texts cleaned and checked, labels as the file has them."""
    if not file_exists(path):
        raise DataError(f"{path}: file not found")
    text = read_utf8(path)
    fmt = file_format(task, path)
    if fmt == "jsonl":
        return _jsonl_rows(task, path, text)
    table = _csv_table(path, text) if fmt == "csv" else _tsv_table(task, path, text)
    columns = _columns(task, path, table.header, fmt)
    index = {name: i for i, name in enumerate(table.header)}
    twice = [c for c in dataclasses.astuple(columns) if c and table.header.count(c) > 1]
    if twice:
        raise DataError(f"{path}:1: column(s) {twice} appear more than once in the header; task {task.name!r} "
                        f"reads them, so which one is meant is unclear. Header: {table.header}")
    result = TaskRows(path, columns.label, [], list(table.damaged))
    for line, fields in table.rows:
        try:
            result.rows.append(_row(task, line, [fields[index[columns.text_a]],
                                                 fields[index[columns.text_b]] if columns.text_b else None],
                                    fields[index[columns.label]] if columns.label else None,
                                    fields[index[columns.id]] if columns.id else str(line)))
        except ValueError as error:
            result.damaged.append(Damaged(line, str(error)))
    return result


def label_examples(task: Task, table: TaskRows, max_bad_fraction: float = 0.1) -> ReadResult:
    """`table`'s rows as Examples of the resolved `task`: class ids or scores. Empty or
    non-finite labels and scores out of range are damaged rows; a label that is not one of
    the task's classes, or a score label that is not a number, is a DataError."""
    examples, damaged = [], list(table.damaged)
    for row in table.rows:
        try:
            label = _label(task, row, table)
        except DataError:
            raise
        except ValueError as error:
            damaged.append(Damaged(row.line, str(error)))
            continue
        examples.append(Example(row.text_a, row.text_b, label, row.uid))
    damaged.sort(key=lambda row: row.line)
    check_damage(table.path, damaged, len(examples) + len(damaged), max_bad_fraction)
    return ReadResult(examples, len(damaged), table.path)


def _label(task: Task, row: Row, table: TaskRows) -> float:
    if not table.column:  # the task's files have no label column: its family says what stands for one
        return task.family.label(task, None, f"{table.path}:{row.line}")
    if row.label is None or (isinstance(row.label, str) and not row.label.strip()):
        raise ValueError("empty label")
    return task.family.label(task, row.label, f"{table.path}:{row.line}: column {table.column!r}")


def _row(task: Task, line: int, texts: list, label, uid) -> Row:
    clean = CLEANERS[task.settings.clean]
    text_a, text_b = (" ".join(clean(text.strip()).split()) if isinstance(text, str) else text for text in texts)
    if not text_a or (texts[1] is not None and not text_b):
        raise ValueError("empty text")
    return Row(line, text_a, text_b or "", label.strip() if isinstance(label, str) else label, str(uid))


def _tsv_table(task: Task, path: str, text: str) -> Table:
    # The CS224N files and TSVs written by Python's csv are CSV-quoted; GLUE's are not: a `"`
    # there is text wherever it stands.
    if not task.family.layouts(task):
        return read_tsv_text(path, text, quoted=True)
    return read_tsv_text(path, text, quoted=lambda header: detect_layout(header) == "cs224n")


def _csv_table(path: str, text: str) -> Table:
    """A CSV file's records, each with the line it starts on; a record the csv module
    refuses (a quote left open swallows the lines up to the next quote) is damaged."""
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader)
    except (StopIteration, csv.Error) as error:
        raise DataError(f"{path}: " + ("empty file (no header line)" if isinstance(error, StopIteration)
                                       else f"unreadable header ({error})")) from None
    table, start = Table(path, header, [], []), reader.line_num + 1
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            return table
        except csv.Error as error:
            table.damaged.append(Damaged(start, f"not CSV from here to line {reader.line_num} ({error})",
                                         lines=reader.line_num - start + 1))
        else:
            longest = max(map(len, fields), default=0)
            if not any(field.strip() for field in fields):
                pass  # a blank line
            elif len(fields) != len(header):
                table.damaged.append(Damaged(start, f"{len(fields)} fields, the header has {len(header)}"))
            elif longest > MAX_FIELD_CHARS:
                table.damaged.append(Damaged(start, f"a field of {longest:,} characters (the limit is "
                                                    f"{MAX_FIELD_CHARS:,})"))
            else:
                table.rows.append((start, fields))
        start = reader.line_num + 1


def _columns(task: Task, path: str, header: list[str], fmt: str):
    layouts = task.family.layouts(task)
    layout = detect_layout(header) if layouts else fmt
    columns = task.settings.columns_for(layout)
    if columns is None:
        readers = [other.name for other in BUILTIN_TASKS.values() if _reads(other, layout, header)]
        hint = f"; it is task {readers[0]!r}'s layout ({BUILTIN_TASKS[readers[0]].title})" if readers else ""
        raise DataError(f"{path}:1: a {layout}-layout header{hint}, but task {task.name!r} "
                        f"({task.title}) is read only from {'/'.join(sorted(layouts))} files. "
                        f"Header: {header}")
    missing = [c for c in dataclasses.astuple(columns) if c and c not in header]
    if missing:
        raise DataError(f"{path}:1: header lacks column(s) {missing} for task {task.name!r} "
                        f"({layout + ' layout' if layouts else fmt}). Header: {header}")
    return columns


def _reads(task: Task, layout: str, header: list[str]) -> bool:
    """Whether shipped `task` reads a `layout` file of this header (its texts and label)."""
    columns = task.family.layouts(task).get(layout)
    return bool(columns) and all(c in header for c in dataclasses.astuple(columns)[:3] if c)


def _jsonl_rows(task: Task, path: str, text: str) -> TaskRows:
    columns = task.settings.columns_for("jsonl")
    result = TaskRows(path, columns.label, [], [])
    first = True
    for number, line in enumerate(text_lines(text), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
            if not isinstance(record, dict):
                raise ValueError(f"a JSON {type(record).__name__}, not an object")
        except ValueError as error:
            result.damaged.append(Damaged(number, f"not a JSON object ({str(error)[:80]})"))
            continue
        missing = [key for key in dataclasses.astuple(columns) if key and key not in record]
        if missing and first:
            raise DataError(f"{path}:{number}: no key {missing[0]!r} for task {task.name!r}. "
                            f"Keys: {sorted(record)}")
        first = False
        try:
            if missing:
                raise ValueError(f"no key {missing[0]!r}")
            texts = [record[columns.text_a], record[columns.text_b] if columns.text_b else None]
            for key, value in zip((columns.text_a, columns.text_b), texts):
                if value is not None and not isinstance(value, str):
                    raise ValueError(f"{key!r} is a JSON {type(value).__name__}, not text")
                if value is not None and len(value) > MAX_FIELD_CHARS:
                    raise ValueError(f"a field of {len(value):,} characters (the limit is {MAX_FIELD_CHARS:,})")
            label = record[columns.label] if columns.label else None
            if isinstance(label, (dict, list)):
                raise ValueError(f"label is a JSON {type(label).__name__}")
            result.rows.append(_row(task, number, texts, label, record[columns.id] if columns.id else number))
        except ValueError as error:
            result.damaged.append(Damaged(number, str(error)))
    return result
