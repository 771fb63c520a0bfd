"""Readers for the task files: CS224N minbert TSVs (SST-5, STS-B, Quora) and GLUE TSVs.

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

log = logging.getLogger(__name__)

TASKS = ("sst", "para", "sts")
NUM_SST_CLASSES = 5


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
    label: float  # int class for sst/para, float score in [0, 5] for sts
    uid: str = ""


@dataclasses.dataclass(frozen=True)
class ReadResult:
    examples: list[Example]
    skipped: int  # damaged rows skipped
    path: str


# Which columns hold what, per (task, layout). "cs224n" is the shared data's layout;
# "glue" the official GLUE TSVs (SST-2: sentence/label; QQP: question1/question2/
# is_duplicate; STS-B: sentence1/sentence2/score).
_COLUMNS = {
    ("sst", "cs224n"): ("sentence", None, "sentiment", "id"),
    ("para", "cs224n"): ("sentence1", "sentence2", "is_duplicate", "id"),
    ("sts", "cs224n"): ("sentence1", "sentence2", "similarity", "id"),
    ("sst", "glue"): ("sentence", None, "label", None),
    ("para", "glue"): ("question1", "question2", "is_duplicate", "id"),
    ("sts", "glue"): ("sentence1", "sentence2", "score", None),
}

_PTB_REPLACEMENTS = (
    ("-LRB-", "("), ("-RRB-", ")"), ("-LSB-", "["), ("-RSB-", "]"),
    ("\\/", "/"), ("\\*", "*"), ("``", '"'), ("''", '"'),
)


def clean_ptb(text: str) -> str:
    """Undoes the Penn Treebank escapes of the SST sentences (`-LRB-` -> `(`)."""
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


def detect_layout(header: list[str]) -> str:
    return "cs224n" if header and header[0] == "" else "glue"


def _parse_label(task: str, raw: str) -> float:
    if task == "sts":
        value = float(raw)
        if not 0.0 <= value <= 5.0:
            raise ValueError(f"similarity {value} outside [0, 5]")
        return value
    value = float(raw)  # Quora labels are "1.0"
    if value != int(value):
        raise ValueError(f"label {raw!r} is not a whole number")
    label = int(value)
    num_classes = NUM_SST_CLASSES if task == "sst" else 2
    if not 0 <= label < num_classes:
        raise ValueError(f"label {label} outside [0, {num_classes - 1}]")
    return label


def _clean(task: str, text: str) -> str:
    text = text.strip()
    if task == "sst":
        text = clean_ptb(text)
    if task == "para":
        text = unquote_twice_quoted(text)
    return " ".join(text.split())


def read_task_file(task: str, path: str, max_bad_fraction: float = 0.1) -> ReadResult:
    """Reads one task file (cs224n or GLUE layout, detected from its header).

    Raises DataError for a missing file, bad UTF-8, missing columns, or when more
    than `max_bad_fraction` of the rows are damaged.
    """
    if task not in TASKS:
        raise ValueError(f"task must be one of {TASKS}. Received: task={task!r}")
    if not os.path.isfile(path):
        raise DataError(f"{path}: file not found")
    text = read_utf8(path)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter="\t")
    header = next(reader, None)
    if not header:
        raise DataError(f"{path}: empty file (no header line)")
    layout = detect_layout(header)
    col_a, col_b, col_label, col_id = _COLUMNS[(task, layout)]
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
