"""benchmarks.inference asks every system in turn, each round in a rotated order, so the
machine's drift hits all alike; a system's figures are medians over the rounds, its score
that of its batch-32 pass over every dev sentence. Entities, however each system answers them,
are scored as the CoNLL words' tags they cover."""

import argparse

import numpy as np

from benchmarks.inference import InProcess, measure
from benchmarks.inference_entities import answers, word_tags
from benchmarks.peer_onnx import entities_of


def test_every_system_is_asked_in_turn_and_scored_on_every_sentence():
    asked = []

    def system(name, label):
        return InProcess(lambda texts: asked.append((name, len(texts))) or [label] * len(texts))

    texts, labels = ["a", "b", "c"], np.array([0, 1, 0])
    found = measure(argparse.Namespace(repeats=2, batch_1_texts=2), {"x": system("x", 0), "y": system("y", 1)},
                    texts, lambda answers: {"accuracy": float(np.mean(np.array(answers) == labels))})
    one, all_ = [1, 1], [3]  # batch 1 over the first 2 texts, then batch 32 over all 3
    assert asked == [(name, size) for name in ("x", "y", "y", "x") for size in one + all_]
    assert found["x"]["accuracy"] == 2 / 3 and found["y"]["accuracy"] == 1 / 3
    assert set(found["x"]["batch_1"]) == {"sentences_per_s", "p50_ms", "p99_ms", "spread", "repeats"}
    assert len(found["x"]["batch_32"]["repeats"]) == 2 and 0 < found["x"]["batch_32"]["spread"] <= 1


def test_entities_tag_the_words_they_cover_however_a_word_was_split():
    words = ["(", "U.S.-based", "Acme", "Corp", "said", "."]
    # kerasbert trims punctuation off an entity; the pipeline's may start inside a word.
    assert word_tags(words, [["LOC", 3, 7], ["ORG", 13, 22]]) == ["O", "B-LOC", "B-ORG", "I-ORG", "O", "O"]
    assert word_tags(words, []) == ["O"] * 6


def test_the_signatures_outputs_in_process_and_served_give_the_same_entities():
    in_process = {"entity_type": np.array([[b"PER", b"LOC"], [b"", b""]]), "entity_start": np.array([[0, 9], [-1, -1]]),
                  "entity_end": np.array([[4, 14], [-1, -1]]), "num_entities": np.array([2, 0])}
    served = {name: value.tolist() for name, value in in_process.items()}
    served["entity_type"] = [["PER", "LOC"], ["", ""]]  # REST's strings
    assert answers(in_process) == answers(served) == [[["PER", 0, 4], ["LOC", 9, 14]], []]


def test_onnx_pieces_group_into_entities_as_the_pipelines_first_strategy():
    # "Jo Ann Smith visits New York ." : Jo's second piece tagged O, Smith I-PER, an I-LOC after O.
    word_ids = [None, 0, 0, 1, 2, 3, 4, 5, 6, None]
    offsets = [[0, 0], [0, 1], [1, 2], [3, 6], [7, 12], [13, 19], [20, 23], [24, 28], [29, 30], [0, 0]]
    tags = ["O", "B-PER", "O", "I-PER", "I-PER", "O", "I-LOC", "B-LOC", "O", "O"]
    assert entities_of(word_ids, offsets, tags) == [["PER", 0, 12], ["LOC", 20, 23], ["LOC", 24, 28]]
