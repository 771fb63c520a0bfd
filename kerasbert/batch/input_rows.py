"""Input rows of batch inference, each keyed by its file and line: `<file>:<line>`.

Four formats, told apart by the file name:
- `*.jsonl`: JSON Lines, one object a line whose string fields are named as the signature's
  inputs (`{"question": ..., "context": ...}` for `answer`); other fields are ignored.
- `*.tfrecord`, `*.tfrecords`: tf.Examples whose bytes features are named as the signature's
  inputs (`text`, or `text_a` and `text_b`); the "line" is the record's number, from 1.
- `*.tsv`: a task file in the CS224N or GLUE layout (`kerasbert.tasks`), read line by line
  (`kerasbert.data.rows`); the text columns of the first task whose columns the header holds.
- anything else: plain text, one sentence a line (a pair signature: `text_a<TAB>text_b`);
  a line ends at `\n`, `\r\n` or a lone `\r`; an empty (or blank) line is an `Empty` row,
  counted and not scored.

A row that cannot be scored (bad UTF-8, NUL characters as UTF-16 text has, empty text, wrong
field count, a line over `MAX_FIELD_CHARS`, a record without the signature's features) is a
`Refused` row with its reason, for the dead-letter output; the job goes on.

Example:
    >>> rows = list(read_rows(sentences_file, ("text",), lambda: open(sentences_file, "rb").read()))
    >>> rows[0]
    Row(id='...sentences.txt:1', inputs={'text': 'the cat sat on the mat .'})
"""

from __future__ import annotations

import dataclasses
import json
from typing import Callable, Iterator

from kerasbert.data.rows import MAX_FIELD_CHARS, DataError
from kerasbert.tasks import BUILTIN_TASKS

TFRECORD_SUFFIXES = (".tfrecord", ".tfrecords")


@dataclasses.dataclass(frozen=True)
class Row:
    id: str
    inputs: dict[str, str]


@dataclasses.dataclass(frozen=True)
class Refused:
    id: str
    reason: str


@dataclasses.dataclass(frozen=True)
class Empty:
    """An empty or blank line: read and counted, nothing to score."""
    id: str


def read_rows(path: str, input_names: tuple[str, ...],
              read_bytes: Callable[[], bytes]) -> Iterator[Row | Refused | Empty]:
    """The rows of the file `path`, for a signature whose string inputs are `input_names`;
    `read_bytes()` gives its content (TFRecords are read by TensorFlow, which knows their framing)."""
    if path.endswith(TFRECORD_SUFFIXES):
        yield from _tfrecord_rows(path, input_names)
    elif path.endswith(".jsonl"):
        yield from _jsonl_rows(path, read_bytes(), input_names)
    elif path.endswith(".tsv"):
        yield from _tsv_rows(path, read_bytes(), input_names)
    else:
        yield from _text_rows(path, read_bytes(), input_names)


def _checked(row_id: str, values: list[str], input_names: tuple[str, ...], strip: bool = True) -> Row | Refused:
    """The row, or why it is refused; `strip`: without the values' outer whitespace (a line's
    text; a JSON field is kept as given, so that character offsets point into it)."""
    if len(values) != len(input_names):
        return Refused(row_id, f"{len(values)} tab-separated fields; the signature takes {len(input_names)} "
                               f"({', '.join(input_names)})")
    for name, value in zip(input_names, values):
        if "\x00" in value:
            return Refused(row_id, f"{name}: NUL characters, not UTF-8 text (UTF-16?)")
        if len(value) > MAX_FIELD_CHARS:
            return Refused(row_id, f"{name}: {len(value):,} characters (the limit is {MAX_FIELD_CHARS:,})")
        if not value.strip():
            return Refused(row_id, f"{name}: empty text")
    return Row(row_id, {name: value.strip() if strip else value for name, value in zip(input_names, values)})


def _text_rows(path, content, input_names):
    for number, raw in enumerate(content.splitlines(), start=1):  # \n, \r\n and a lone \r end a line
        row_id = f"{path}:{number}"
        if not raw.strip():
            yield Empty(row_id)
            continue
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            yield Refused(row_id, f"not valid UTF-8 (byte {error.start + 1})")
            continue
        yield _checked(row_id, line.split("\t") if len(input_names) > 1 else [line], input_names)


def _jsonl_rows(path, content, input_names):
    for number, raw in enumerate(content.splitlines(), start=1):
        row_id = f"{path}:{number}"
        if not raw.strip():
            yield Empty(row_id)
            continue
        try:
            row = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            yield Refused(row_id, f"not valid UTF-8 (byte {error.start + 1})")
            continue
        except json.JSONDecodeError as error:
            yield Refused(row_id, f"not JSON ({error.msg} at character {error.pos + 1})")
            continue
        if not isinstance(row, dict):
            yield Refused(row_id, f"a JSON {type(row).__name__}, not an object with {', '.join(input_names)}")
            continue
        wrong = [name for name in input_names if not isinstance(row.get(name), str)]
        if wrong:
            yield Refused(row_id, f"no string field {wrong[0]!r} (the signature takes {', '.join(input_names)})")
            continue
        yield _checked(row_id, [row[name] for name in input_names], input_names, strip=False)


def _tsv_columns(header: list[str], input_names: tuple[str, ...]) -> list[str] | None:
    """The header's columns for the signature's inputs: text (single) or text_a, text_b (pair)."""
    for task in BUILTIN_TASKS.values():
        for columns in task.family.layouts(task).values():
            wanted = [columns.text_a] + ([columns.text_b] if len(input_names) > 1 else [])
            if None not in wanted and all(name in header for name in wanted) and \
                    (len(input_names) == 1 or columns.text_b):
                return wanted
    return None


def _tsv_rows(path, content, input_names):
    from kerasbert.data.rows import read_tsv_text
    from kerasbert.data.task_files import detect_layout

    try:
        table = read_tsv_text(path, content.decode("utf-8"), quoted=lambda header: detect_layout(header) == "cs224n")
    except UnicodeDecodeError as error:
        line = content[:error.start].count(b"\n") + 1
        yield Refused(f"{path}:{line}", "not valid UTF-8; the file was not read")
        return
    except DataError as error:
        yield Refused(f"{path}:1", str(error))
        return
    columns = _tsv_columns(table.header, input_names)
    if columns is None:
        yield Refused(f"{path}:1", f"no declared task's text columns for {', '.join(input_names)} in the "
                                   f"header {table.header}")
        return
    index = [table.header.index(name) for name in columns]
    for damaged in table.damaged:
        yield Refused(f"{path}:{damaged.line}", damaged.reason)
    for line, fields in table.rows:
        yield _checked(f"{path}:{line}", [fields[i] for i in index], input_names)


def _tfrecord_rows(path, input_names):
    import tensorflow as tf

    records = iter(tf.data.TFRecordDataset(path).as_numpy_iterator())
    number = 0
    while True:
        number += 1
        row_id = f"{path}:{number}"
        try:
            record = next(records)
        except StopIteration:
            return
        except tf.errors.DataLossError as error:  # framing is lost: the rest of the file is unreadable
            yield Refused(row_id, f"damaged record, the file's remaining records were not read ({error.message})")
            return
        example = tf.train.Example()
        try:
            example.ParseFromString(record)
        except Exception as error:  # noqa: BLE001  protobuf's DecodeError: this record only
            yield Refused(row_id, f"not a tf.Example ({error})")
            continue
        values = [example.features.feature[name].bytes_list.value for name in input_names]
        missing = [name for name, value in zip(input_names, values) if len(value) != 1]
        if missing:
            yield Refused(row_id, f"no single bytes feature {missing[0]!r}")
            continue
        try:
            yield _checked(row_id, [value[0].decode("utf-8") for value in values], input_names)
        except UnicodeDecodeError:
            yield Refused(row_id, "not valid UTF-8")
