"""SQuAD v1.1: a reader for its JSON layout and its official scores (evaluate-v1.1.py).

Layout: `{"data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question",
"answers": [{"text", "answer_start"}, ...]}]}]}]}`. Every reference answer is kept (the
scores take the best over them). An answer whose `answer_start` does not point at its text
in the context is skipped and counted; a question left with no answer, or with an empty
question or context, is damaged: skipped, counted and reported as the TSV readers do. JSON
has no useful line numbers (SQuAD files are one line), so a damaged question is named by
its number in the file (1-based) and its id.

Example:
    >>> result = read_squad("../shared/data/squad/dev.json")
    >>> len(result.examples), result.examples[0].answers[0]
    (1065, Answer(text='Project Mercury', start=361))
    >>> squad_scores({"q1": "the Denver Broncos"}, {"q1": ["Denver Broncos"]})
    {'squad_exact_match': 100.0, 'squad_f1': 100.0}
"""

from __future__ import annotations

import collections
import dataclasses
import json
import os
import re
import string

from kerasbert.data.rows import Damaged, DataError, check_damage, read_utf8


@dataclasses.dataclass(frozen=True)
class Answer:
    text: str
    start: int  # character offset into the context

    @property
    def end(self) -> int:
        return self.start + len(self.text)


@dataclasses.dataclass(frozen=True)
class QaExample:
    uid: str
    question: str
    context: str
    answers: list[Answer]  # the reference answers, in the file's order


@dataclasses.dataclass(frozen=True)
class SquadFile:
    examples: list[QaExample]
    skipped: int  # damaged questions left out
    bad_answers: int  # answers whose offset does not match their text, left out
    path: str


def _question(qa: dict, context: str) -> tuple[QaExample, int]:
    """One question's example and how many of its answers were left out; ValueError if damaged."""
    question, uid = qa.get("question"), str(qa.get("id", ""))
    if not isinstance(question, str) or not question.strip():
        raise ValueError("empty question")
    answers, bad = [], 0
    for answer in qa.get("answers") or []:
        text, start = answer.get("text"), answer.get("answer_start")
        if isinstance(text, str) and text and isinstance(start, int) and context[start:start + len(text)] == text:
            answers.append(Answer(text, start))
        else:
            bad += 1
    if not answers:
        raise ValueError(f"no answer matches the context at its answer_start ({bad} given)")
    return QaExample(uid, question, context, answers), bad


def read_squad(path: str, max_bad_fraction: float = 0.1) -> SquadFile:
    """Reads a SQuAD v1.1 JSON file. Raises DataError for a missing file, bad UTF-8 or JSON,
    a file without questions, or more than `max_bad_fraction` of the questions damaged."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: file not found")
    try:
        data = json.loads(read_utf8(path))["data"]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise DataError(f"{path}: not SQuAD's JSON layout ({error})") from None
    examples, damaged, bad_answers, number = [], [], 0, 0
    for article in data:
        for paragraph in article.get("paragraphs", []):
            context = paragraph.get("context")
            for qa in paragraph.get("qas", []):
                number += 1
                try:
                    if not isinstance(context, str) or not context.strip():
                        raise ValueError("empty context")
                    example, bad = _question(qa, context)
                except ValueError as error:
                    damaged.append(Damaged(number, f"question {qa.get('id')!r}: {error}"))
                    continue
                examples.append(example)
                bad_answers += bad
    check_damage(path, damaged, len(examples) + len(damaged), max_bad_fraction)
    return SquadFile(examples, len(damaged), bad_answers, path)


def normalize_answer(text: str) -> str:
    """SQuAD's normalisation: lower case, no punctuation, no articles, single spaces.

    Example:
        >>> normalize_answer("The  Denver Broncos!")
        'denver broncos'
    """
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def exact_match(prediction: str, reference: str) -> float:
    return float(normalize_answer(prediction) == normalize_answer(reference))


def token_f1(prediction: str, reference: str) -> float:
    """F1 of the normalised answers' words (as multisets)."""
    predicted, expected = normalize_answer(prediction).split(), normalize_answer(reference).split()
    common = sum((collections.Counter(predicted) & collections.Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


def squad_scores(predictions: dict[str, str], references: dict[str, list[str]]) -> dict[str, float]:
    """Exact match and F1 in percent, each the best over a question's references, averaged
    over all questions of `references` (a question without a prediction scores 0, as in the
    official script)."""
    if not references:
        raise ValueError("squad_scores needs at least one question. Received: 0")
    em = f1 = 0.0
    for uid, answers in references.items():
        if uid in predictions:
            em += max(exact_match(predictions[uid], answer) for answer in answers)
            f1 += max(token_f1(predictions[uid], answer) for answer in answers)
    return {"squad_exact_match": 100.0 * em / len(references), "squad_f1": 100.0 * f1 / len(references)}
