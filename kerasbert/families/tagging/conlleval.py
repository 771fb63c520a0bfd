"""Entity-level precision, recall and F1 as the CoNLL shared task's `conlleval` script
computes them: an entity counts as found only if its type and both boundaries match.

Entities are read from IOB tags with conlleval's own rules (`startOfChunk`/`endOfChunk`):
an entity starts at `B-X`, at `I-X` after `O`, and wherever the type changes, so an
invalid `I-` in a prediction still makes an entity, as conlleval and seqeval's default
mode read it. Scores are micro-averaged over entities, overall and per type, as
fractions in [0, 1] (conlleval prints percentages).

Example:
    >>> scores = entity_scores([["B-PER", "I-PER", "O", "B-LOC"]], [["B-PER", "I-PER", "O", "B-ORG"]])
    >>> scores.precision, scores.recall, scores.f1
    (0.5, 0.5, 0.5)
"""

from __future__ import annotations

import dataclasses


def entities(tags: list[str]) -> list[tuple[str, int, int]]:
    """(type, first word, one past the last word) of each entity in a tag sequence.

    Example:
        >>> entities(["B-PER", "I-PER", "I-LOC", "O", "I-ORG"])
        [('PER', 0, 2), ('LOC', 2, 3), ('ORG', 4, 5)]
    """
    found, start, kind = [], None, None
    for index, tag in enumerate(list(tags) + ["O"]):
        prefix, tag_kind = (tag[0], tag[2:]) if tag != "O" else ("O", "")
        if start is not None and (prefix in ("O", "B") or tag_kind != kind):
            found.append((kind, start, index))
            start = None
        if start is None and prefix != "O":
            start, kind = index, tag_kind
    return found


@dataclasses.dataclass(frozen=True)
class Counts:
    correct: int  # predicted entities that match a reference entity exactly
    predicted: int
    reference: int

    @property
    def precision(self) -> float:
        return self.correct / self.predicted if self.predicted else 0.0

    @property
    def recall(self) -> float:
        return self.correct / self.reference if self.reference else 0.0

    @property
    def f1(self) -> float:
        p, r = self.precision, self.recall
        return 2 * p * r / (p + r) if p + r else 0.0


@dataclasses.dataclass(frozen=True)
class EntityScores(Counts):
    by_type: dict = dataclasses.field(default_factory=dict)  # type -> Counts

    def as_dict(self, prefix: str = "ner_") -> dict[str, float]:
        """Flat metrics: `ner_f1`, `ner_precision`, `ner_recall`, and `ner_f1_<TYPE>` each."""
        scores = {f"{prefix}f1": self.f1, f"{prefix}precision": self.precision, f"{prefix}recall": self.recall}
        scores.update({f"{prefix}f1_{kind}": counts.f1 for kind, counts in sorted(self.by_type.items())})
        return scores


def entity_scores(references: list[list[str]], predictions: list[list[str]]) -> EntityScores:
    """conlleval's scores of predicted tag sequences against reference ones (one per sentence)."""
    if len(references) != len(predictions):
        raise ValueError(f"{len(references)} reference sentences but {len(predictions)} predicted ones")
    totals: dict[str, list[int]] = {}
    for number, (reference, prediction) in enumerate(zip(references, predictions)):
        if len(reference) != len(prediction):
            raise ValueError(f"sentence {number}: {len(reference)} reference tags but {len(prediction)} predicted")
        gold, guessed = set(entities(reference)), set(entities(prediction))
        for kind in {entity[0] for entity in gold | guessed}:
            count = totals.setdefault(kind, [0, 0, 0])
            count[0] += len({e for e in gold & guessed if e[0] == kind})
            count[1] += len({e for e in guessed if e[0] == kind})
            count[2] += len({e for e in gold if e[0] == kind})
    by_type = {kind: Counts(*count) for kind, count in totals.items()}
    return EntityScores(*(sum(count[i] for count in totals.values()) for i in range(3)), by_type=by_type)
