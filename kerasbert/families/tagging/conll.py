"""A reader for the CoNLL column format (CoNLL-2003 NER): one word a line, its tag in the
last column, a blank line between sentences, `-DOCSTART-` lines between documents.

Tags are IOB: `O`, `B-TYPE`, `I-TYPE`. Files in IOB1 (an entity starts with `I-`; `B-`
only between two adjacent entities of one type) are converted to IOB2 (every entity
starts with `B-`); conversion leaves IOB2 unchanged, so every file goes through it, and
`ConllFile.scheme` says which one the file was in. The conversion is conlleval's reading of
the tags: an `I-X` after `O` or after another type starts an entity.

A damaged line (a field count unlike the file's first word line, or a tag that is not
IOB) damages its sentence, which is skipped, counted and reported as the TSV readers do
(`kerasbert.data.rows.check_damage`).

Example:
    >>> result = read_conll("../shared/data/conll2003/dev.txt")
    >>> len(result.sentences), result.scheme, result.sentences[0].words[:3]
    (3250, 'IOB2', ['CRICKET', '-', 'LEICESTERSHIRE'])
"""

from __future__ import annotations

import dataclasses
import os

from kerasbert.data.rows import Damaged, DataError, check_damage, read_utf8, text_lines

DOCSTART = "-DOCSTART-"


@dataclasses.dataclass(frozen=True)
class Sentence:
    """The words of one sentence, their IOB2 tags, and the line of its first word (1-based)."""

    words: list[str]
    tags: list[str]
    line: int


@dataclasses.dataclass(frozen=True)
class ConllFile:
    sentences: list[Sentence]
    skipped: int  # damaged sentences left out
    scheme: str  # "IOB2", or "IOB1" when some entity started with I- (converted to IOB2)
    path: str


def check_tag(tag: str) -> None:
    """Raises ValueError unless `tag` is `O`, `B-TYPE` or `I-TYPE`."""
    if tag != "O" and not (tag[:2] in ("B-", "I-") and len(tag) > 2):
        raise ValueError(f"tag {tag!r} is not IOB (O, B-TYPE or I-TYPE)")


def to_iob2(tags: list[str]) -> list[str]:
    """IOB1 (or IOB2) tags -> IOB2: an `I-X` that starts an entity becomes `B-X`.

    Example:
        >>> to_iob2(["I-PER", "I-PER", "B-PER", "O", "I-LOC"])
        ['B-PER', 'I-PER', 'B-PER', 'O', 'B-LOC']
    """
    converted, previous = [], "O"
    for tag in tags:
        if tag.startswith("I-") and (previous == "O" or previous[2:] != tag[2:]):
            tag = "B-" + tag[2:]
        converted.append(tag)
        previous = tag
    return converted


def read_conll(path: str, max_bad_fraction: float = 0.1) -> ConllFile:
    """Reads a CoNLL column file. Raises DataError for a missing or non-UTF-8 file, one with
    no sentence, or one where more than `max_bad_fraction` of the sentences are damaged."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: file not found")
    sentences, damaged, converted = [], [], False
    field_count = None
    words, tags, first_line, problem = [], [], 0, None

    def end_sentence():
        nonlocal words, tags, problem, converted
        if problem:
            damaged.append(problem)
        elif words:
            iob2 = to_iob2(tags)
            converted = converted or iob2 != tags
            sentences.append(Sentence(words, iob2, first_line))
        words, tags, problem = [], [], None

    for number, line in enumerate(text_lines(read_utf8(path)), start=1):
        fields = line.split()
        if not fields or fields[0] == DOCSTART:
            end_sentence()
            continue
        if not words and not problem:
            first_line = number
        field_count = field_count or len(fields)
        try:
            if len(fields) != field_count:
                raise ValueError(f"{len(fields)} fields, the file's first word line has {field_count}")
            check_tag(fields[-1])
        except ValueError as error:
            problem = problem or Damaged(number, str(error))
            continue
        words.append(fields[0])
        tags.append(fields[-1])
    end_sentence()
    if not sentences and not damaged:
        raise DataError(f"{path}: no sentences (an empty file, or only -DOCSTART- lines)")
    check_damage(path, damaged, len(sentences) + len(damaged), max_bad_fraction)
    return ConllFile(sentences, len(damaged), "IOB1" if converted else "IOB2", path)


def tag_names(sentences: list[Sentence]) -> tuple[str, ...]:
    """The tags a model predicts, from the data: `O` first, then each type's B- and I-,
    types sorted. Both B- and I- of every type seen, whichever the data happened to use.

    Example:
        >>> tag_names([Sentence(["Paris"], ["B-LOC"], 1)])
        ('O', 'B-LOC', 'I-LOC')
    """
    types = sorted({tag[2:] for sentence in sentences for tag in sentence.tags if tag != "O"})
    return ("O",) + tuple(f"{prefix}-{kind}" for kind in types for prefix in ("B", "I"))


def write_conll(path: str, sentences: list[Sentence]) -> None:
    """`sentences` as a CoNLL file `read_conll` reads back to their words and tags: one
    `word tag` line a word, a blank line between sentences.

    Example:
        >>> write_conll(f"{tmp_path}/train.txt", [Sentence(["Paris", "is"], ["B-LOC", "O"], 1)])
        >>> read_conll(f"{tmp_path}/train.txt").sentences[0].tags
        ['B-LOC', 'O']
    """
    text = "\n\n".join("\n".join(f"{word} {tag}" for word, tag in zip(s.words, s.tags)) for s in sentences)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text + "\n")
