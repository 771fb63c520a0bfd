"""SQuAD v1.1: a reader for its JSON layout and its official scores (evaluate-v1.1.py).

Layout: `{"data": [{"title", "paragraphs": [{"context", "qas": [{"id", "question",
"answers": [{"text", "answer_start"}, ...]}]}]}]}`. Every reference answer is kept (the
scores take the best over them). An answer whose `answer_start` does not point at its text
in the context is skipped, counted and named; a question left with no answer, or with an
empty question or context, is damaged: skipped, counted and reported as the TSV readers do.
Each is named by the line its JSON object starts on, its question's number in the file
(1-based) and its id: SQuAD's own files are one line, a user's may be pretty-printed.

Example:
    >>> result = read_squad("../shared/data/squad/dev.json")
    >>> len(result.examples), result.examples[0].answers[0]
    (1065, Answer(text='Project Mercury', start=361))
    >>> squad_scores({"q1": "the Denver Broncos"}, {"q1": ["Denver Broncos"]})
    {'squad_exact_match': 100.0, 'squad_f1': 100.0}
"""

from __future__ import annotations

import bisect
import collections
import dataclasses
import json
import logging
import os
import re
import string

from kerasbert.data.rows import SHOWN_DAMAGED_ROWS, Damaged, DataError, check_damage, read_utf8

log = logging.getLogger(__name__)


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


class _LocatingDecoder(json.JSONDecoder):
    """`json.loads` that also tells the line each object of the text starts on. It runs on
    the json module's pure-Python scanner, several times slower than the C one, so the reader
    uses it only to name the lines of what it skips."""

    def __init__(self, text: str):
        super().__init__()
        self._starts: dict[int, int] = {}  # id(object) -> offset of its "{"
        self._newlines = [match.start() for match in re.finditer("\n", text)]
        self.parse_object = self._parse_object
        self.scan_once = json.scanner.py_make_scanner(self)

    def _parse_object(self, s_and_end, *args):
        value, end = json.decoder.JSONObject(s_and_end, *args)
        self._starts[id(value)] = s_and_end[1] - 1
        return value, end

    def line_of(self, value: dict) -> int:
        return bisect.bisect_right(self._newlines, self._starts[id(value)]) + 1


def _question(qa: dict, context: str) -> tuple[QaExample, list[dict]]:
    """One question's example and its answers left out; ValueError if damaged."""
    question, uid = qa.get("question"), str(qa.get("id", ""))
    if not isinstance(question, str) or not question.strip():
        raise ValueError("empty question")
    answers, bad = [], []
    for answer in qa.get("answers") or []:
        text, start = answer.get("text"), answer.get("answer_start")
        offset = isinstance(start, int) and not isinstance(start, bool) and start >= 0  # not -1, not true
        if isinstance(text, str) and text and offset and context[start:start + len(text)] == text:
            answers.append(Answer(text, start))
        else:
            bad.append(answer)
    if not answers:
        raise ValueError(f"no answer matches the context at its answer_start ({len(bad)} given)")
    return QaExample(uid, question, context, answers), bad


def _read(data: list, line_of) -> tuple[list[QaExample], list[Damaged], list[Damaged]]:
    """The examples of SQuAD's `data`, the damaged questions and the answers left out, each at
    `line_of(its JSON object)`."""
    examples, damaged, bad_answers, number = [], [], [], 0
    for article in data:
        for paragraph in article.get("paragraphs", []):
            context = paragraph.get("context")
            for qa in paragraph.get("qas", []):
                number += 1
                which = f"question {number}, id {qa.get('id')!r}"
                try:
                    if not isinstance(context, str) or not context.strip():
                        raise ValueError("empty context")
                    example, bad = _question(qa, context)
                except ValueError as error:
                    damaged.append(Damaged(line_of(qa), f"{which}: {error}"))
                    continue
                examples.append(example)
                for answer in bad:
                    text, start = answer.get("text"), answer.get("answer_start")
                    pointed = (f"points at {context[start:start + len(text)]!r}"
                               if isinstance(start, int) and isinstance(text, str) else "or its text is not usable")
                    bad_answers.append(Damaged(line_of(answer), f"skipped answer {text!r} of {which} "
                                                                f"(answer_start {start!r} {pointed})"))
    return examples, damaged, bad_answers


def read_squad(path: str, max_bad_fraction: float = 0.1) -> SquadFile:
    """Reads a SQuAD v1.1 JSON file. Raises DataError for a missing file, bad UTF-8 or JSON,
    a file without questions, or more than `max_bad_fraction` of the questions damaged."""
    if not os.path.isfile(path):
        raise DataError(f"{path}: file not found")
    text = read_utf8(path)

    def squad_data(decode):
        try:
            return decode(text)["data"]
        except (json.JSONDecodeError, KeyError, TypeError) as error:
            raise DataError(f"{path}: not SQuAD's JSON layout ({error})") from None

    examples, damaged, bad_answers = _read(squad_data(json.loads), line_of=lambda value: 0)
    if damaged or bad_answers:  # read again, to name their lines
        decoder = _LocatingDecoder(text)
        examples, damaged, bad_answers = _read(squad_data(decoder.decode), decoder.line_of)
    check_damage(path, damaged, len(examples) + len(damaged), max_bad_fraction)
    for answer in bad_answers[:SHOWN_DAMAGED_ROWS]:
        log.warning("%s:%d: %s", path, answer.line, answer.reason)
    if len(bad_answers) > SHOWN_DAMAGED_ROWS:
        log.warning("%s: %d more answers skipped", path, len(bad_answers) - SHOWN_DAMAGED_ROWS)
    return SquadFile(examples, len(damaged), len(bad_answers), path)


def write_squad(path: str, examples: list[QaExample], title: str = "") -> None:
    """`examples` as a SQuAD v1.1 file `read_squad` reads back to them: a paragraph each, under
    one article named `title`.

    Example:
        >>> example = QaExample("q1", "Where?", "In Paris.", [Answer("Paris", 3)])
        >>> write_squad(f"{tmp_path}/train.json", [example])
        >>> read_squad(f"{tmp_path}/train.json").examples == [example]
        True
    """
    paragraphs = [{"context": e.context, "qas": [{"id": e.uid, "question": e.question, "answers": [
        {"text": a.text, "answer_start": a.start} for a in e.answers]}]} for e in examples]
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"version": "1.1", "data": [{"title": title, "paragraphs": paragraphs}]}, f)


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


def f1_gap_interval(questions: list[QaExample], ours: dict[str, str], theirs: dict[str, str],
                    resamples: int = 2000, seed: int = 0) -> dict:
    """SQuAD F1 of `ours` minus `theirs` ({id: answer}) on the same `questions`, in points, with
    the 2.5th and 97.5th percentiles of that gap over `resamples` paired bootstrap samples of
    the questions: how much of a gap between two runs the choice of questions alone could make.

    Example:
        >>> question = QaExample("q", "Capital?", "Paris", [Answer("Paris", 0)])
        >>> f1_gap_interval([question], {"q": "Paris"}, {"q": "Rome"})["gap"]
        100.0
    """
    import numpy as np

    per_question = np.array([[max(token_f1(side.get(q.uid, ""), a.text) for a in q.answers)
                              for side in (ours, theirs)] for q in questions])  # (questions, 2)
    gaps = per_question[:, 0] - per_question[:, 1]
    samples = np.random.default_rng(seed).integers(0, len(gaps), (resamples, len(gaps)))
    low, high = np.percentile(gaps[samples].mean(axis=1), [2.5, 97.5])
    return {"gap": 100 * float(gaps.mean()), "low": 100 * float(low), "high": 100 * float(high),
            "questions": len(gaps), "resamples": resamples}
