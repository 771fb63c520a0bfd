"""Task families: one package per family, each a `Family` (kerasbert/families/base.py) that the
rest of kerasbert asks what a task of its kinds reads, computes, scores and serves.

    classification  classes, pair_classes, pair_binary   classification/
    regression      score, pair_score                     regression/
    tagging         tags (named entities, CoNLL-2003)     tagging/ (features, export, conll, conlleval)
    span_qa         span (extractive QA, SQuAD v1.1)      span_qa/ (features, export, squad, windows)
    embedding       embedding (Sentence-BERT)             embedding/ (losses, ranking, sentence_transformers)

A package's __init__.py holds its `Family`; what more than one family imports sits beside
base.py: sentence.py and sentence_export.py (the sentence families' head and signatures),
wordpiece.py (WordPiece with byte offsets: tagging, span_qa).

A task is data, a family is code: `family_of(task)` finds a task's family by its kind, and
`register(family)` adds one (its kinds become declarable).

Example:
    >>> family_of("pair_binary").name, kinds()[:3]
    ('classification', ('classes', 'pair_classes', 'pair_binary'))
"""

from __future__ import annotations

from kerasbert.errors import TaskError
from kerasbert.families.base import Family
from kerasbert.families.classification import CLASSIFICATION
from kerasbert.families.embedding import EMBEDDING
from kerasbert.families.regression import REGRESSION
from kerasbert.families.span_qa import SPAN_QA
from kerasbert.families.tagging import TAGGING

_BY_KIND: dict[str, Family] = {}


def register(family: Family) -> Family:
    """Makes `family`'s kinds declarable (TaskError if another family owns one); returns it."""
    taken = [kind for kind in family.kinds if kind in _BY_KIND and _BY_KIND[kind] is not family]
    if taken or not family.kinds:
        raise TaskError(f"family {family.name!r}: its kinds must be new and at least one. Received: "
                        f"{family.kinds} (taken: {taken})")
    _BY_KIND.update({kind: family for kind in family.kinds})
    return family


def unregister(family: Family) -> None:
    """Removes `family`'s kinds (a test's own family)."""
    for kind in family.kinds:
        if _BY_KIND.get(kind) is family:
            del _BY_KIND[kind]


def kinds() -> tuple[str, ...]:
    """The declarable kinds, in registration order."""
    return tuple(_BY_KIND)


def family_of(task) -> Family:
    """The family of a task (or of a kind); TaskError naming the known kinds."""
    kind = task if isinstance(task, str) else task.kind
    if kind not in _BY_KIND:
        raise TaskError(f"kind must be one of {kinds()}. Received: {kind!r}")
    return _BY_KIND[kind]


for _family in (CLASSIFICATION, REGRESSION, TAGGING, SPAN_QA, EMBEDDING):
    register(_family)
