"""Pretraining corpora as documents of sentences.

A document is a list of sentences (plain strings). NSP pairs are cut inside one
document; negatives come from another. Corpora by name:

- `wikitext` / `wikitext_test`: WikiText-2 valid.txt / test.txt, one document per
  article (a title line ` = T = ` between blank lines). Section headings are dropped,
  `@-@`-style number splits are joined and `<unk>` placeholders removed.
- `imdb`: the CFIMDB reviews (train + dev), one document per review, with the
  `<br />` and multiply-escaped quotes cleaned.
- `sst`, `sts`, `quora`: the task sentences (train files only), one single-sentence
  document per distinct sentence; `tasks_dev`: those of the three dev files.

Example:
    >>> docs = load_corpus("wikitext_test", "../shared/data")
    >>> len(docs)
    60
"""

from __future__ import annotations

import os
import re

from kerasbert.data.cleaning import clean_review
from kerasbert.data.rows import (MAX_FIELD_CHARS, Damaged, DataError, check_damage, read_tsv, read_utf8,
                                 text_lines)
from kerasbert.data.task_files import read_task_file

Document = list[str]
CORPUS_NAMES = ("wikitext", "wikitext_test", "imdb", "sst", "sts", "quora", "tasks_dev")

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[\"'(\[]?[A-Z0-9])")
_WIKI_JOINS = ((" @-@ ", "-"), (" @,@ ", ","), (" @.@ ", "."))
_WIKI_TITLE = re.compile(r"^ = [^=].* = $")
_WIKI_HEADING = re.compile(r"^ (= )+.*( =)+ $")


def data_path(data_dir: str, *parts: str) -> str:
    path = os.path.join(data_dir, *parts)
    if not os.path.exists(path):
        raise DataError(f"{path}: file not found (data_dir={data_dir!r}; set --data_dir or "
                        "KERASBERT_DATA_DIR to the folder holding cs224n/ and wikitext-2/)")
    return path


def read_utf8_lines(path: str) -> list[str]:
    """Reads a text file as lines, naming the line of the first bad UTF-8 byte."""
    return text_lines(read_utf8(path))


def _bounded_lines(path: str, max_bad_fraction: float = 0.1) -> list[str]:
    """The lines of a plain text file, a line over MAX_FIELD_CHARS counted as damaged and
    left out (an empty string in its place, so line numbers hold)."""
    lines = read_utf8_lines(path)
    damaged = [Damaged(i + 1, f"a line of {len(line):,} characters (the limit is {MAX_FIELD_CHARS:,})")
               for i, line in enumerate(lines) if len(line) > MAX_FIELD_CHARS]
    if damaged:
        check_damage(path, damaged, sum(1 for line in lines if line.strip()), max_bad_fraction)
        too_long = {row.line - 1 for row in damaged}
        lines = ["" if i in too_long else line for i, line in enumerate(lines)]
    return lines


def split_sentences(text: str) -> list[str]:
    """Splits text after `.`, `!` or `?` followed by a capital or digit."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]


def read_wikitext(path: str) -> list[Document]:
    """One document per article; real titles stand between two blank lines."""
    lines = _bounded_lines(path)
    documents: list[Document] = []
    for i, line in enumerate(lines):
        is_title = (_WIKI_TITLE.match(line) and 0 < i < len(lines) - 1
                    and lines[i - 1] == " " and lines[i + 1] == " ")
        if is_title:
            documents.append([])
            continue
        if not line.strip() or _WIKI_HEADING.match(line):
            continue
        if not documents:
            raise DataError(f"{path}:{i + 1}: text before the first article title")
        for joined, plain in _WIKI_JOINS:
            line = line.replace(joined, plain)
        line = " ".join(word for word in line.split() if word != "<unk>")
        documents[-1].extend(split_sentences(line))
    return [doc for doc in documents if doc]


def read_imdb(path: str, max_bad_fraction: float = 0.1) -> list[Document]:
    """One document per CFIMDB review (CSV-quoted TSV with a `sentence` column), cleaned by
    the `clean_review` the fine-tuning task uses; damaged rows (see rows.py) or empty reviews
    are counted and left out."""
    table = read_tsv(path, quoted=True)
    if "sentence" not in table.header:
        raise DataError(f"{path}:1: expected a header with a 'sentence' column. Header: {table.header}")
    column = table.header.index("sentence")
    documents, damaged = [], list(table.damaged)
    for line, row in table.rows:
        sentences = split_sentences(clean_review(row[column]))
        if sentences:
            documents.append(sentences)
        else:
            damaged.append(Damaged(line, "empty review"))
    damaged.sort(key=lambda row: row.line)
    check_damage(path, damaged, len(documents) + len(damaged), max_bad_fraction)
    return documents


def read_task_sentences(task: str, path: str) -> list[Document]:
    """Distinct sentences of a task file, each a one-sentence document."""
    seen: dict[str, None] = {}
    for example in read_task_file(task, path).examples:
        for text in (example.text_a, example.text_b):
            if text:
                seen.setdefault(text, None)
    return [[sentence] for sentence in seen]


def load_corpus(name: str, data_dir: str) -> list[Document]:
    """Loads one named corpus from `data_dir` as a list of documents."""
    cs224n = lambda f: data_path(data_dir, "cs224n", f)  # noqa: E731
    if name == "wikitext":
        return read_wikitext(data_path(data_dir, "wikitext-2", "valid.txt"))
    if name == "wikitext_test":
        return read_wikitext(data_path(data_dir, "wikitext-2", "test.txt"))
    if name == "imdb":
        return read_imdb(cs224n("cfimdb-train.tsv")) + read_imdb(cs224n("cfimdb-dev.tsv"))
    if name == "sst":
        return read_task_sentences("sst", cs224n("sst-train.tsv"))
    if name == "sts":
        return read_task_sentences("sts", cs224n("sts-train.tsv"))
    if name == "quora":
        return read_task_sentences("para", cs224n("quora-train.tsv"))
    if name == "tasks_dev":  # held-out text for continued pretraining on the tasks
        return (read_task_sentences("sst", cs224n("sst-dev.tsv"))
                + read_task_sentences("sts", cs224n("sts-dev.tsv"))
                + read_task_sentences("para", cs224n("quora-dev.tsv")))
    if os.path.isfile(name):
        return read_plain_text(name)
    if os.sep in name or os.path.splitext(name)[1]:
        raise DataError(f"{name}: file not found (a corpus is the path of a text file, or one of "
                        f"{', '.join(CORPUS_NAMES)})")
    raise DataError(f"Unknown corpus {name!r}: use one of {', '.join(CORPUS_NAMES)}, or the path of a "
                    "text file (one document per blank-line block)")


def read_plain_text(path: str) -> list[Document]:
    """A user corpus: documents separated by blank lines, sentences split by punctuation."""
    documents: list[Document] = [[]]
    for line in _bounded_lines(path):
        if not line.strip():
            if documents[-1]:
                documents.append([])
            continue
        documents[-1].extend(split_sentences(line.strip()))
    documents = [doc for doc in documents if doc]
    if not documents:
        raise DataError(f"{path}: no text (empty corpus)")
    return documents


def load_labelled_corpora(names: tuple[str, ...] | list[str], data_dir: str) -> tuple[list[Document], list[str]]:
    """The documents of several corpora, and for each document the name of its corpus.

    >>> documents, sources = load_labelled_corpora(["wikitext", "imdb"], "../shared/data")
    >>> sources[0], sources[-1]
    ('wikitext', 'imdb')
    """
    documents: list[Document] = []
    sources: list[str] = []
    for name in names:
        loaded = load_corpus(name, data_dir)
        if not loaded:
            raise DataError(f"Corpus {name!r} under {data_dir} has no documents")
        documents.extend(loaded)
        sources.extend([name] * len(loaded))
    return documents, sources


def load_corpora(names: tuple[str, ...] | list[str], data_dir: str) -> list[Document]:
    return load_labelled_corpora(names, data_dir)[0]


def default_data_dir() -> str:
    """`$KERASBERT_DATA_DIR`; else `../shared/data` from the working folder, or from the clone
    this code runs from (an editable install), whichever exists; else `../shared/data` (which
    `check_data_dir` then reports).

    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"KERASBERT_DATA_DIR": "/data/kerasbert"}):
    ...     default_data_dir()
    '/data/kerasbert'
    """
    if os.environ.get("KERASBERT_DATA_DIR"):
        return os.environ["KERASBERT_DATA_DIR"]
    relative = os.path.join("..", "shared", "data")
    clone = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    for candidate in (relative, os.path.join(clone, relative)):
        if os.path.isdir(candidate):
            return candidate
    return relative


def check_data_dir(path: str) -> str:
    """`path` if it is a folder; else a one-line FileNotFoundError naming the three ways to give one.

    >>> check_data_dir("/nowhere")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    FileNotFoundError: data folder /nowhere does not exist: pass --data_dir DIR, set KERASBERT_DATA_DIR=DIR, ...
    """
    if not os.path.isdir(path):
        raise FileNotFoundError(f"data folder {path} does not exist: pass --data_dir DIR, set "
                                "KERASBERT_DATA_DIR=DIR, or run from a folder whose ../shared/data exists")
    return path
