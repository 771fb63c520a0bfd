"""The span family: SQuAD reader and official scores, windows and their features, the loss,
training, and the `answer` signature in memory and in a fresh TF-only process."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import kerasbert
from conftest import DATA_DIR, ROOT
from kerasbert.data.rows import DataError
from helpers import save_family_functions
from kerasbert.families.span_qa.features import SpanGraph, answer_pieces, predict_answers, span_features, span_loss
from kerasbert.families.span_qa.export import SpanSignatures, best_spans, max_context
from kerasbert.families.span_qa import SpanSettings
from kerasbert.families.span_qa.squad import (Answer, QaExample, exact_match, f1_gap_interval, normalize_answer, read_squad,
                                      squad_scores, token_f1, write_squad)
from kerasbert.finetuning.data import TaskPreprocessor, family_dataset
from kerasbert.finetuning.model import MultitaskBert
from kerasbert.packing import ENCODER_KEYS
from kerasbert.tasks import Task
from kerasbert.tokenization import make_tokenizer

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "where", "is", "the", "cat", "sat", "on", "mat", "in",
         "paris", "cafe", "new", "york", ".", "?", "##s"]


def squad_file(tmp_path, qas, context="The cat sat in Paris."):
    path = tmp_path / "squad.json"
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "T", "paragraphs": [
        {"context": context, "qas": qas}]}]}), encoding="utf-8")
    return str(path)


def test_reader_keeps_every_reference_and_skips_answers_off_their_offset(tmp_path, caplog):
    qas = [{"id": f"q{i}", "question": "Where is the cat?",
            "answers": [{"text": "Paris", "answer_start": 15}, {"text": "in Paris", "answer_start": 12}]}
           for i in range(10)]
    qas[1]["answers"].append({"text": "Paris", "answer_start": 3})  # off its offset: skipped, counted
    qas.append({"id": "bad", "question": "Where?", "answers": [{"text": "Rome", "answer_start": 0}]})
    result = read_squad(squad_file(tmp_path, qas), max_bad_fraction=0.2)
    assert (len(result.examples), result.skipped, result.bad_answers) == (10, 1, 1)
    assert result.examples[1].answers == [Answer("Paris", 15), Answer("in Paris", 12)]
    assert result.examples[0].context[15:20] == "Paris"
    # SQuAD's own files are one line: the question's number and id say which.
    assert "squad.json:1: skipped damaged row (question 11, id 'bad': no answer matches the context" in caplog.text
    assert "squad.json:1: skipped answer 'Paris' of question 2, id 'q1' (answer_start 3 points at ' cat ')" \
        in caplog.text
    empty = [{"id": "e", "question": "  ", "answers": [{"text": "Paris", "answer_start": 15}]}] + qas[:1]
    with pytest.raises(DataError, match="squad.json:1: 1 of 2 rows are damaged; first: question 1, id 'e': "
                                        "empty question"):
        read_squad(squad_file(tmp_path, empty))
    with pytest.raises(DataError, match="empty context"):
        read_squad(squad_file(tmp_path, qas[:1], context=""))
    # An offset that is not a count from the context's start: negative (Python's slice counts
    # from the end: -21 is "The") or a boolean (false is 0 to Python).
    odd = [{"id": "o", "question": "Where?", "answers": [{"text": "The", "answer_start": -21},
                                                          {"text": "T", "answer_start": False}]}]
    assert read_squad(squad_file(tmp_path, odd + qas[:9])).skipped == 1
    (tmp_path / "broken.json").write_text("{\"data\": [", encoding="utf-8")
    with pytest.raises(DataError, match="broken.json: not SQuAD's JSON layout"):
        read_squad(str(tmp_path / "broken.json"))


def test_reader_names_the_lines_of_a_pretty_printed_files_damaged_questions_and_answers(tmp_path, caplog):
    context = "The cat sat in Paris."
    qas = [{"id": f"q{i}", "question": "Where is the cat?", "answers": [{"text": "Paris", "answer_start": 15}]}
           for i in range(12)]
    qas[3]["answers"] = [{"text": "Paris", "answer_start": 14}]  # its only answer is off: the question is damaged
    qas[5]["answers"].append({"text": "in Paris", "answer_start": 1})  # one of two is off: counted, named
    path = tmp_path / "pretty.json"
    path.write_text(json.dumps({"version": "1.1", "data": [{"title": "T", "paragraphs": [
        {"context": context, "qas": qas}]}]}, indent=2), encoding="utf-8")
    lines = path.read_text(encoding="utf-8").splitlines()
    question_line = next(n for n, line in enumerate(lines, 1) if '"q3"' in line) - 1  # the line of its "{"
    answer_line = next(n for n, line in enumerate(lines, 1) if '"in Paris"' in line) - 1
    assert lines[question_line - 1].strip() == "{" and lines[answer_line - 1].strip() == "{"
    result = read_squad(str(path))
    assert (len(result.examples), result.skipped, result.bad_answers) == (11, 1, 1)
    assert (f"pretty.json:{question_line}: skipped damaged row (question 4, id 'q3': no answer matches the context "
            "at its answer_start (1 given))") in caplog.text
    assert f"pretty.json:{answer_line}: skipped answer 'in Paris' of question 6, id 'q5' (answer_start 1 points at " \
           "'he cat s')" in caplog.text


def test_reader_counts_on_the_real_dev_set():
    path = os.path.join(DATA_DIR, "squad", "dev.json")
    if not os.path.isfile(path):
        pytest.skip(f"{path} is not here")
    result = read_squad(path)
    assert (len(result.examples), result.skipped, result.bad_answers) == (1065, 0, 0)
    assert result.examples[0].answers[:2] == [Answer("Project Mercury", 361), Answer("spacecraft", 328)]


def test_squad_scores_as_the_official_script():
    assert normalize_answer("The  Denver, Broncos!") == "denver broncos"
    assert normalize_answer("an apple a day") == "apple day"
    assert exact_match("the Denver Broncos", "Denver Broncos") == 1.0
    # prediction "denver broncos win", reference "broncos": precision 1/3, recall 1 -> F1 0.5
    assert token_f1("Denver Broncos win", "the Broncos") == pytest.approx(0.5)
    assert token_f1("a", "the") == 0.0  # both empty after normalisation: no common words
    scores = squad_scores({"q1": "Denver Broncos win", "q2": "Paris"},
                          {"q1": ["the Broncos", "Denver Broncos win!"], "q2": ["Rome"], "q3": ["x"]})
    assert scores == {"squad_exact_match": pytest.approx(100 / 3), "squad_f1": pytest.approx(100 / 3)}


def graph(**overrides):
    settings = {"sequence_length": 12, "doc_stride": 2, "max_query_length": 3, "max_answer_length": 4,
                "max_windows": 8, **overrides}
    return SpanGraph(VOCAB, **settings)


def test_windows_cover_the_context_at_the_stride():
    windows = graph().windows(tf.constant(["Where is the cat?", "cat"]),
                              tf.constant(["the cat sat on the mat in Paris", "The cats sat."]))
    # Question 1 is cut to 3 pieces, so windows hold 12 - 3 - 3 = 6 context pieces: 8 pieces -> starts 0, 2.
    assert windows["window_count"].numpy().tolist() == [2, 1]
    assert windows["example"].numpy().tolist() == [0, 0, 1]
    assert windows["window_start"].numpy().tolist() == [0, 2, 0]
    assert windows["window_length"].numpy().tolist() == [6, 6, 5]
    assert windows["token_ids"].numpy().tolist() == [
        [2, 5, 6, 7, 3, 7, 8, 9, 10, 7, 11, 3],
        [2, 5, 6, 7, 3, 9, 10, 7, 11, 12, 13, 3],
        [2, 8, 3, 7, 8, 19, 9, 17, 3, 0, 0, 0]]
    assert windows["segment_ids"].numpy().tolist()[2] == [0, 0, 0, 1, 1, 1, 1, 1, 1, 0, 0, 0]
    assert windows["context_offset"].numpy().tolist() == [5, 5, 3]
    with pytest.raises(ValueError, match="doc_stride must be in"):
        graph(doc_stride=7)


def test_a_dev_context_past_max_windows_is_an_error_before_training_naming_file_question_and_setting(tmp_path):
    from kerasbert.finetuning.run import check_dev_sets
    from kerasbert.config import FinetuneConfig

    declaration = {"kind": "span", "sequence_length": 12, "doc_stride": 2, "max_query_length": 3,
                   "max_windows": 2, "dev_file": "squad.json"}
    config = FinetuneConfig(tasks={"qa": declaration})
    short = QaExample("short", "Where is the cat?", "The cat sat in Paris.", [Answer("Paris", 15)])
    long = QaExample("long", "Where is the cat?", "the cat sat on the mat in Paris " * 2, [Answer("Paris", 26)])
    preprocessor = TaskPreprocessor(make_tokenizer(VOCAB), 12)
    squad_file(tmp_path, [])  # the dev file the examples came from
    check_dev_sets(config, config.tasks, {"qa": [short]}, preprocessor, str(tmp_path))
    with pytest.raises(DataError, match=r"squad.json: 1 question\(s\) have a context longer than task 'qa' answers "
                                        r"\(max_windows=2 .*first: id 'long', 6 windows.*set tasks.qa.max_windows=6"):
        check_dev_sets(config, config.tasks, {"qa": [short, long]}, preprocessor, str(tmp_path))


def test_features_point_at_the_answer_or_at_cls():
    examples = [QaExample("a", "Where is the cat?", "the cat sat on the mat in Paris", [Answer("Paris", 26)]),
                QaExample("b", "cat", "The cats sat.", [Answer("cats", 4)])]
    features = span_features(graph(), examples)
    # Paris is context piece 7: outside window 1 (pieces 0-5), position 5 + 7 - 2 = 10 in window 2.
    assert features.positions.tolist() == [[0, 0], [10, 10], [4, 5]]
    assert features.windows_without_answer == 1 and features.skipped == 0
    assert features.token_ids.shape == (3, 12)
    assert answer_pieces([0, 4, 8], [3, 7, 11], 5, 6) == (1, 1)  # an answer inside one piece
    assert answer_pieces([0, 4], [3, 7], 3, 4) is None  # only the space between pieces


def test_span_loss_is_the_mean_of_start_and_end_cross_entropy():
    logits = tf.constant([[[1.0, 0.0], [0.0, 2.0], [0.0, 0.0]]])  # (1, 3, 2)
    start = -np.log(np.exp(1) / (np.exp(1) + 2))  # start at 0
    end = -np.log(np.exp(2) / (np.exp(2) + 2))  # end at 1
    assert float(span_loss(tf.constant([[0, 1]]), logits)) == pytest.approx((start + end) / 2, rel=1e-5)
    # Padding takes no share: the last position padded, whatever its logits.
    padded = tf.concat([logits, tf.constant([[[9.0, 9.0]]])], axis=1)
    expected = (-np.log(np.exp(1) / (np.exp(1) + 1)) - np.log(np.exp(2) / (np.exp(2) + 1))) / 2
    assert float(span_loss(tf.constant([[0, 1]]), padded, tf.constant([[1, 1, 0, 0]]))) == pytest.approx(
        float(span_loss(tf.constant([[0, 1]]), logits, tf.constant([[1, 1, 0]]))), rel=1e-6)
    assert float(span_loss(tf.constant([[0, 1]]), logits, tf.constant([[1, 1, 0]]))) == pytest.approx(expected, rel=1e-5)


def test_best_span_respects_order_length_and_the_allowed_pieces():
    start = tf.constant([[9.0, 1.0, 0.0, 3.0, 0.0, 0.0]])
    end = tf.constant([[9.0, 0.0, 4.0, 0.0, 0.0, 5.0]])
    allowed = tf.constant([[False, True, True, True, True, True]])  # position 0 is [CLS]
    best = best_spans(start, end, allowed, max_answer_length=3)
    # 3 + 5 spans 3 pieces (3..5); 1 + 5 would span 5; 3 + 4 would end before it starts.
    assert (best["start"].numpy()[0], best["end"].numpy()[0], best["logit"].numpy()[0]) == (3, 5, 8.0)
    assert best_spans(start, end, allowed, max_answer_length=2)["end"].numpy()[0] == 2  # 1 + 4
    # Starts limited to positions 1 and 2: 1 + 4 (1..2) beats 1 + 5, which spans 5 pieces.
    starts_allowed = tf.constant([[True, True, True, False, False, False]])
    limited = best_spans(start, end, allowed, max_answer_length=3, starts_allowed=starts_allowed)
    assert (limited["start"].numpy()[0], limited["end"].numpy()[0]) == (1, 2)
    probability = np.exp(3) / np.exp(start.numpy()[0, 1:]).sum() * np.exp(5) / np.exp(end.numpy()[0, 1:]).sum()
    assert best["probability"].numpy()[0] == pytest.approx(probability, rel=1e-5)


def test_a_tiny_multitask_model_learns_a_few_answers_through_its_span_head():
    keras.utils.set_random_seed(2)
    examples = [QaExample("a", "Where is the cat?", "the cat sat in Paris", [Answer("Paris", 15)]),
                QaExample("b", "Where is the mat?", "the mat is in New York", [Answer("New York", 14)])] * 4
    task = Task("qa", "span", settings=SpanSettings(sequence_length=16, doc_stride=4, max_query_length=3,
                                                    max_answer_length=4))
    data = family_dataset(task, examples, TaskPreprocessor(make_tokenizer(VOCAB), 32), batch_size=4, training=True,
                          seed=1)
    x, y = next(iter(data))
    width = int(tf.reduce_max(tf.reduce_sum(x["padding_mask"], axis=1)))  # trimmed to its longest window
    assert x["token_ids"].shape == (4, width) and width < 16 and y.shape == (4, 2)
    model = MultitaskBert(kerasbert.build_encoder("tiny", vocabulary_size=len(VOCAB)), tasks=(task,))
    assert model.head_output("qa", x).shape == (4, width, 2)
    model.compile(keras.optimizers.Adam(3e-3))
    history = model.fit(data, steps_per_epoch=2, epochs=8, verbose=0).history["loss"]
    assert history[-1] < 0.5 * history[0]


def fixed_reader():
    """A 'model' whose logits are a table of each token's: a span starts at "new" (5) or
    "paris" (3) and ends at "york" (5) or "paris" (3); every other piece 0."""
    table = np.zeros((len(VOCAB), 2), np.float32)
    table[VOCAB.index("new")] = [5.0, 0.0]
    table[VOCAB.index("york")] = [0.0, 5.0]
    table[VOCAB.index("paris")] = [3.0, 3.0]
    inputs = {key: keras.Input((None,), dtype="int32", name=key) for key in ENCODER_KEYS}
    layer = keras.layers.Embedding(len(VOCAB), 2, name="span_table")
    model = keras.Model(inputs, layer(inputs["token_ids"]))
    layer.set_weights([table])
    return model


QUESTIONS = ["Where is New York?", "Where is the cat?", "Where?"]
CONTEXTS = ["The cat sat on the mat, the cat sat on the mat. Le Café de New  York", "The cat sat in Paris.",
            "Paris"]
EXPECTED = {"answer": ["New  York", "Paris", "Paris"], "answer_start": [59, 15, 0], "answer_end": [68, 20, 5]}


def check_answers(outputs):
    for key, value in EXPECTED.items():
        got = [v.decode() if isinstance(v, bytes) else v for v in np.asarray(outputs[key]).tolist()]
        assert got == value, key
    assert [c[s:e] for c, s, e in zip(CONTEXTS, EXPECTED["answer_start"], EXPECTED["answer_end"])] == EXPECTED["answer"]


def bert_is_max_context(doc_spans: list[tuple[int, int]], cur_span_index: int, position: int) -> bool:
    """run_squad.py's `_check_is_max_context`, as written there (doc_spans: (start, length))."""
    best_score, best_span_index = None, None
    for span_index, (start, length) in enumerate(doc_spans):
        end = start + length - 1
        if position < start or position > end:
            continue
        score = min(position - start, end - position) + 0.01 * length
        if best_score is None or score > best_score:
            best_score, best_span_index = score, span_index
    return cur_span_index == best_span_index


@pytest.mark.parametrize("settings", [
    {"doc_stride": 1}, {"doc_stride": 2}, {"doc_stride": 4},
    # Windows of 196, 196 and 60 pieces: 0.01 * the length outweighs a piece more of context.
    {"sequence_length": 200, "doc_stride": 150}])
def test_max_context_is_run_squads_rule(settings):
    questions = ["Where is New York?", "cat", "Where is the cat?", "Where?"]
    contexts = [CONTEXTS[0], "the cat sat on the mat in Paris " * 2, "The cat sat in Paris.", CONTEXTS[0] * 2]
    if "sequence_length" in settings:
        questions, contexts = questions + ["cat"], contexts + ["the cat sat on the mat " * 60]
    windows = graph(**settings, max_windows=32).windows(tf.constant(questions), tf.constant(contexts))
    width = windows["token_ids"].shape[1]
    position = np.arange(width)[None, :]
    offset, length = windows["context_offset"].numpy()[:, None], windows["window_length"].numpy()[:, None]
    allowed = (position >= offset) & (position < offset + length)
    got = max_context(windows, tf.constant(allowed)).numpy()
    assert windows["window_count"].numpy().max() >= 3  # several windows overlap a piece
    expected = np.zeros_like(got)
    spans = {}
    for w, example in enumerate(windows["example"].numpy()):
        spans.setdefault(example, []).append((int(windows["window_start"].numpy()[w]), int(length[w, 0])))
    for w, example in enumerate(windows["example"].numpy()):
        index = len([e for e in windows["example"].numpy()[:w] if e == example])
        for p in range(width):
            if allowed[w, p]:
                piece = spans[example][index][0] + p - offset[w, 0]
                expected[w, p] = bert_is_max_context(spans[example], index, piece)
    assert got.tolist() == expected.tolist()


def test_answer_signature_finds_the_best_span_over_all_windows():
    signatures = SpanSignatures(fixed_reader(), graph())
    windows = signatures.graph.windows(tf.constant(QUESTIONS), tf.constant(CONTEXTS))
    # 19 context pieces, 6 a window (the question cut to 3), stride 2: 8 windows, the answer in the last.
    assert windows["window_count"].numpy().tolist() == [8, 1, 1]
    outputs = signatures.answer(question=tf.constant(QUESTIONS), context=tf.constant(CONTEXTS))
    check_answers(outputs)  # "new york" in the question is not an answer: only context pieces are
    # P(start) * P(end) over the last window's 5 context pieces (le cafe de new york): 5 for
    # "new" (start) and "york" (end), 0 for the other four.
    probability = (np.exp(5) / (np.exp(5) + 4)) ** 2
    assert outputs["score"].numpy()[0] == pytest.approx(probability, rel=1e-5)
    # The token variant over the batch's 8th window ([CLS] where is new [SEP] le cafe de new york [SEP]).
    by_tokens = signatures.answer_tokens(*(windows[key][7:8] for key in ENCODER_KEYS))
    assert (by_tokens["start_position"].numpy()[0], by_tokens["end_position"].numpy()[0]) == (8, 9)
    examples = [QaExample(str(i), q, c, [Answer("x", 0)]) for i, (q, c) in enumerate(zip(QUESTIONS, CONTEXTS))]
    assert predict_answers(signatures.answer, examples) == {"0": "New  York", "1": "Paris", "2": "Paris"}


@pytest.fixture(scope="module")
def short_reader():
    return SpanSignatures(fixed_reader(), graph(max_windows=3))


@pytest.mark.parametrize("question, context, message", [
    ("", "Paris", "empty question"),
    ("Where?", "   ", "empty context"),
    ("Where?", b"caf\xe9", "the context input is not valid UTF-8"),
    (b"\xff", "Paris", "the question input is not valid UTF-8"),
    ("Where?", "the cat sat on the mat " * 10, "context too long: it needs more than 3 windows of 12 tokens"),
])
def test_bad_input_is_a_clear_error(short_reader, question, context, message):
    with pytest.raises(tf.errors.InvalidArgumentError, match=message):
        short_reader.answer(question=tf.constant([question]), context=tf.constant([context]))


def test_saved_answer_signature_in_a_fresh_tf_only_process_matches(tmp_path):
    model = fixed_reader()
    signatures = SpanSignatures(model, graph())
    path = str(tmp_path / "export" / "1")
    save_family_functions(path, model, signatures.graph, signatures.functions("answer"))
    tokens = {key: [[2, 5, 3, 13, 3]] for key in ENCODER_KEYS}
    tokens["segment_ids"], tokens["padding_mask"] = [[0, 0, 0, 1, 1]], [[1] * 5]
    calls = {"answer": {"question": QUESTIONS, "context": CONTEXTS}, "answer_tokens": tokens}
    (tmp_path / "calls.json").write_text(json.dumps(calls))
    result = subprocess.run([sys.executable, os.path.join(ROOT, "tests", "load_export.py"), path,
                             str(tmp_path / "calls.json")], capture_output=True, text=True, timeout=300,
                            env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])["outputs"]
    check_answers(out["answer"])
    in_memory = signatures.answer(question=tf.constant(QUESTIONS), context=tf.constant(CONTEXTS))
    np.testing.assert_allclose(out["answer"]["score"], in_memory["score"].numpy(), rtol=1e-6)
    assert (out["answer_tokens"]["start_position"], out["answer_tokens"]["end_position"]) == ([3], [3])


def test_a_written_squad_file_reads_back_to_the_same_questions(tmp_path):
    """bench-tasks trains kerasbert on the file and gives transformers the questions: both the same."""
    questions = read_squad(os.path.join(DATA_DIR, "squad", "dev.json")).examples[:12]
    questions.append(QaExample("long", "What was Apollo?", " ".join([questions[0].context] * 4), questions[0].answers))
    write_squad(str(tmp_path / "train.json"), questions)
    assert read_squad(str(tmp_path / "train.json")).examples == questions


def test_the_f1_gap_interval_is_a_paired_bootstrap_over_the_questions():
    questions = [QaExample(str(i), "?", "the red fox", [Answer("the red fox", 0), Answer("fox", 8)]) for i in range(40)]
    right = {str(i): "Red fox!" for i in range(40)}  # SQuAD's normalisation: F1 1
    half = {str(i): "red fox" if i % 2 else "red" for i in range(40)}  # F1 1 or 2/3 (best reference)
    assert f1_gap_interval(questions, right, right) == {"gap": 0.0, "low": 0.0, "high": 0.0, "questions": 40,
                                                        "resamples": 2000}
    gap = f1_gap_interval(questions, right, half)
    assert gap["gap"] == pytest.approx(100 / 6)  # half the questions 1/3 apart
    assert 0 < gap["low"] < gap["gap"] < gap["high"] < 100 / 3
    assert f1_gap_interval(questions, half, right)["gap"] == pytest.approx(-100 / 6)
    assert f1_gap_interval(questions, {}, right)["gap"] == -100.0  # an unanswered question scores 0
