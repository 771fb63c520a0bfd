"""The tiny vocabulary and corpus the tests and the docstring examples (../conftest.py) share:
plain Python, no TensorFlow."""

import random

# A 10-word vocabulary after the 5 special tokens; "##s" lets words have two pieces.
TINY_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]",
              "the", "cat", "dog", "sat", "ran", "on", "mat", "fast", "##s", "."]


def write_corpus(path, num_documents=40, sentences_per_document=6, seed=0):
    """Plain-text corpus: blank-line separated documents of made-up sentences."""
    rng = random.Random(seed)
    words = ["the", "cat", "dog", "sat", "ran", "on", "mat", "fast", "cats", "dogs"]
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(num_documents):
            for _ in range(sentences_per_document):
                sentence = " ".join(rng.choice(words) for _ in range(rng.randint(3, 9)))
                f.write(sentence.capitalize() + ". ")
            f.write("\n\n")
    return path
