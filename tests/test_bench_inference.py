"""benchmarks.inference asks every system in turn, each round in a rotated order, so the
machine's drift hits all alike; a system's figures are medians over the rounds, its accuracy
that of its batch-32 pass over every dev sentence."""

import argparse

from benchmarks.inference import InProcess, measure


def test_every_system_is_asked_in_turn_and_scored_on_every_sentence():
    asked = []

    def system(name, label):
        return InProcess(lambda texts: asked.append((name, len(texts))) or [label] * len(texts))

    texts, labels = ["a", "b", "c"], [0, 1, 0]
    found = measure(argparse.Namespace(repeats=2, batch_1_texts=2), {"x": system("x", 0), "y": system("y", 1)},
                    texts, labels)
    one, all_ = [1, 1], [3]  # batch 1 over the first 2 texts, then batch 32 over all 3
    assert asked == [(name, size) for name in ("x", "y", "y", "x") for size in one + all_]
    assert found["x"]["accuracy"] == 2 / 3 and found["y"]["accuracy"] == 1 / 3
    assert set(found["x"]["batch_1"]) == {"sentences_per_s", "p50_ms", "p99_ms", "spread", "repeats"}
    assert len(found["x"]["batch_32"]["repeats"]) == 2 and 0 < found["x"]["batch_32"]["spread"] <= 1
