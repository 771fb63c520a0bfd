"""Tab-separated files read one physical line at a time, so damage stays in its own row.

The shared CS224N files are CSV-quoted (a field that starts with `"` is quoted, `""` inside
it is one `"`) but no quoted field holds a tab or a newline: every line is one record
(`../shared/data/README.md`). GLUE's TSVs are not quoted at all: their text may contain
`"` anywhere, and GLUE's own reader splits on tabs with no quote character. Parsing a whole
file with `csv` lets one stray quote swallow every line up to the next quote; parsing each
line on its own confines it to that line, which is then a damaged row with its line number.

Damaged rows (a quote left open, too few or too many fields, a field over
`MAX_FIELD_CHARS`, or whatever the caller's own checks refuse) are counted; the first few
are logged; a file with more than `max_bad_fraction` of its rows damaged is a DataError
naming the first.

Example:
    >>> table = read_tsv("../shared/data/cs224n/sts-dev.tsv", quoted=True)
    >>> table.header[:3], len(table.rows), table.damaged
    (['', 'id', 'sentence1'], 863, [])
"""

from __future__ import annotations

import csv
import dataclasses
import logging
import os
from typing import Callable

from kerasbert.errors import DataError

log = logging.getLogger(__name__)

MAX_FIELD_CHARS = 1 << 20  # a field longer than this (1 Mi characters) is a damaged row
SHOWN_DAMAGED_ROWS = 5  # damaged rows logged one by one; the rest are counted
csv.field_size_limit(max(csv.field_size_limit(), MAX_FIELD_CHARS + 1))


@dataclasses.dataclass(frozen=True)
class Damaged:
    """A row left out, with the line it is on (1-based) and why; `lines`: how many lines it
    took (a CSV quote left open swallows every line up to the next quote)."""

    line: int
    reason: str
    lines: int = 1


@dataclasses.dataclass
class Table:
    """A TSV file's header, its sound rows as (line, fields), and its damaged rows."""

    path: str
    header: list[str]
    rows: list[tuple[int, list[str]]]
    damaged: list[Damaged]


def _remote(path: str) -> bool:
    return "://" in path  # gs://, s3://, hdfs://: read through TensorFlow's file systems


def file_exists(path: str) -> bool:
    """Whether `path` is a file: local, or on any file system TensorFlow reads."""
    if _remote(path):
        import tensorflow as tf

        return tf.io.gfile.exists(path) and not tf.io.gfile.isdir(path)
    return os.path.isfile(path)


def read_utf8(path: str) -> str:
    """A text file's content (local, or on any file system TensorFlow reads), or a DataError
    naming the line of its first bad UTF-8 byte. A byte order mark at the start (Excel's
    "CSV UTF-8", Notepad) is left out: it would otherwise be part of the first column's name,
    the first word or the first JSON value.

    Example:
        >>> read_utf8("../shared/data/wikitext-2/valid.txt").splitlines()[1]
        ' = Homarus gammarus = '
    """
    if _remote(path):
        import tensorflow as tf

        with tf.io.gfile.GFile(path, "rb") as f:
            raw = f.read()
    else:
        with open(path, "rb") as f:
            raw = f.read()
    try:
        return raw.decode("utf-8").removeprefix("\ufeff")
    except UnicodeDecodeError as error:
        line = raw[: error.start].count(b"\n") + 1
        raise DataError(f"{path}:{line}: not valid UTF-8 ({error.reason} at byte {error.start})") from None


def text_lines(text: str) -> list[str]:
    """The physical lines of `text`, split at `\\n` only (a `\\r` before it dropped): other
    characters Python counts as line breaks (U+2028, `\\x1c`, ...) are text in these files."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [line[:-1] if line.endswith("\r") else line for line in lines]


def split_line(line: str, quoted: bool) -> list[str]:
    """One line's fields. Raises ValueError for a quote left open or a field over the limit."""
    if quoted and '"' in line:
        try:
            fields = next(csv.reader([line], delimiter="\t", strict=True))
        except csv.Error as error:
            reason = "a quoted field is not closed on its line" if "end of data" in str(error) else str(error)
            raise ValueError(reason) from None
    else:
        fields = line.split("\t")
    longest = max(map(len, fields), default=0)
    if longest > MAX_FIELD_CHARS:
        raise ValueError(f"a field of {longest:,} characters (the limit is {MAX_FIELD_CHARS:,})")
    return fields


def read_tsv(path: str, quoted: bool | Callable[[list[str]], bool]) -> Table:
    """Reads a TSV file line by line: `quoted` for CSV-style quoting (the CS224N files),
    else plain tab splitting (GLUE); a function of the header decides per file. Blank lines
    are passed over; a row whose field count differs from the header's is damaged. Raises
    DataError for an empty or unreadable file."""
    return read_tsv_text(path, read_utf8(path), quoted)


def read_tsv_text(path: str, text: str, quoted: bool | Callable[[list[str]], bool]) -> Table:
    """`read_tsv` of a file's `text`, read already (from any file system); `path` names it."""
    lines = text_lines(text)
    if not lines or not lines[0].strip():
        raise DataError(f"{path}: empty file (no header line)")
    header = lines[0].split("\t")
    if callable(quoted):
        quoted = quoted(header)
    if quoted and '"' in lines[0]:
        try:
            header = split_line(lines[0], quoted)
        except ValueError as error:
            raise DataError(f"{path}:1: unreadable header ({error})") from None
    table = Table(path, header, [], [])
    for number, line in enumerate(lines[1:], start=2):
        if not line.strip():
            continue
        try:
            fields = split_line(line, quoted)
            if len(fields) != len(header):
                raise ValueError(f"{len(fields)} fields, the header has {len(header)}")
        except ValueError as error:
            table.damaged.append(Damaged(number, str(error)))
            continue
        table.rows.append((number, fields))
    return table


def refuse_mostly_damaged(path: str, damaged: list[Damaged], total: int, max_bad_fraction: float) -> None:
    """Raises DataError when more than `max_bad_fraction` of `total` rows are damaged (or
    none is sound)."""
    swallowed = sum(row.lines - 1 for row in damaged)  # lines a damaged row took: rows lost
    total, bad = total + swallowed, len(damaged) + swallowed
    if total == 0:
        raise DataError(f"{path}: no data rows after the header")
    if bad > max_bad_fraction * total:
        first = damaged[0]
        raise DataError(f"{path}:{first.line}: {bad} of {total} rows are damaged; first: {first.reason}")


def check_damage(path: str, damaged: list[Damaged], total: int, max_bad_fraction: float) -> None:
    """`refuse_mostly_damaged`; then logs the first damaged rows and how many more there are."""
    refuse_mostly_damaged(path, damaged, total, max_bad_fraction)
    for row in damaged[:SHOWN_DAMAGED_ROWS]:
        log.warning("%s:%d: skipped damaged row (%s)", path, row.line, row.reason)
    if len(damaged) > SHOWN_DAMAGED_ROWS:
        log.warning("%s: %d more damaged rows skipped", path, len(damaged) - SHOWN_DAMAGED_ROWS)


@dataclasses.dataclass(frozen=True)
class ReadResult:
    examples: list  # task_files.Examples; a tags task's Sentences, a span task's QaExamples (kerasbert.families)
    skipped: int  # damaged rows skipped (a tags file's sentences, a span file's questions)
    path: str
    skipped_answers: int = 0  # a span file's answers whose offset does not match their text
